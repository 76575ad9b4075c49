#!/usr/bin/env python3
"""Writes the binary and ConvNetJS regression files of tests/regress (committed; rerun after a
change here). Files that claim a huge size carry only the header that claims it.
usage: generate.py [OUT_DIR]   (default: this directory; the test suite writes to a temporary
directory and compares, so the committed files cannot drift from this script)"""
import gzip
import json
import os
import random
import struct
import sys

R = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def put(rel, data):
    path = os.path.join(R, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(path, "wb") as f:
        f.write(data)


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def st(header, data=b"", hlen=None):
    """safetensors bytes; header is a dict or a raw JSON string, hlen overrides the length field."""
    h = header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))
    h = h.encode()
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data


def tensors(named):
    """A valid safetensors file of F32 tensors: [(name, shape, values)] in buffer order."""
    header, data = {}, b""
    for name, shape, values in named:
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + 4 * len(values)]}
        data += f32(values)
    return st(header, data)


def idx(magic, dims, payload):
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload


def cnj(numbers):
    return " ".join(str(x) for x in numbers) + "\n"


FC_W = [0.1 * (i % 7) - 0.3 for i in range(30)]
FC_B = [0.01 * i for i in range(10)]
FC_OK = [("fc.bias", [10], FC_B), ("fc.weight", [10, 3], FC_W)]

# --- base nets' good files -----------------------------------------------------------------
put("nets/fc.safetensors", tensors(FC_OK))
put("nets/idx.safetensors", tensors([("fc.bias", [10], FC_B), ("fc.weight", [10, 1], FC_W[:10])]))
BN = [("c.weight", [10, 3, 1, 1], FC_W), ("c.bias", [10], FC_B), ("b.weight", [10], [1.0] * 10),
      ("b.bias", [10], [0.0] * 10), ("b.running_mean", [10], [0.5] * 10), ("b.running_var", [10], [2.0] * 10)]
put("nets/bn.safetensors", tensors(BN))
put("nets/c.txt", cnj([1, 1, 1, 10] + FC_W[:10] + FC_B))
put("nets/f.txt", cnj([3, 10] + FC_W + FC_B))

# --- safetensors -----------------------------------------------------------------------------
S = "safetensors/"
put(S + "hlen_past_eof.safetensors", struct.pack("<Q", 1000) + b'{"a":1}')
put(S + "hlen_over_100mb.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
put(S + "dim_1e12.safetensors",
    st({"fc.weight": {"dtype": "F32", "shape": [10 ** 12], "data_offsets": [0, 4]}}, f32([1.0])))
put(S + "dim_negative.safetensors",
    st({"fc.weight": {"dtype": "F32", "shape": [-1, 3], "data_offsets": [0, 12]}}, f32([1.0] * 3)))
put(S + "shape_overflow.safetensors",
    st({"fc.weight": {"dtype": "F32", "shape": [1 << 32, 1 << 32, 16], "data_offsets": [0, 4]}}, f32([1.0])))
put(S + "shape_larger_than_data.safetensors",
    st({"fc.weight": {"dtype": "F32", "shape": [10, 3], "data_offsets": [0, 40]}}, f32([1.0] * 10)))
put(S + "bytes_not_dtype.safetensors",
    st({"fc.weight": {"dtype": "F32", "shape": [3], "data_offsets": [0, 13]}}, f32([1.0] * 3) + b"\0"))
put(S + "wrong_shape_for_layer.safetensors",
    tensors([("fc.bias", [10], FC_B), ("fc.weight", [10, 4], FC_W + [0.0] * 10)]))
put(S + "dtype_f16.safetensors",
    st({"fc.weight": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}, b"\0\0\0\0"))
put(S + "offsets_outside.safetensors",
    st({"fc.bias": {"dtype": "F32", "shape": [10], "data_offsets": [0, 1000]}}, f32(FC_B)))
put(S + "offsets_reversed.safetensors",
    st({"fc.bias": {"dtype": "F32", "shape": [10], "data_offsets": [40, 0]}}, f32(FC_B)))
put(S + "offsets_negative.safetensors",
    st({"fc.bias": {"dtype": "F32", "shape": [10], "data_offsets": [-4, 36]}}, f32(FC_B)))
put(S + "overlap.safetensors",
    st({"fc.bias": {"dtype": "F32", "shape": [10], "data_offsets": [0, 40]},
        "fc.weight": {"dtype": "F32", "shape": [10, 3], "data_offsets": [20, 140]}}, f32(FC_B + FC_W[:25])))
put(S + "hole.safetensors",
    st({"fc.bias": {"dtype": "F32", "shape": [10], "data_offsets": [0, 40]},
        "fc.weight": {"dtype": "F32", "shape": [10, 3], "data_offsets": [44, 164]}}, f32(FC_B + [0.0] + FC_W)))
put(S + "trailing.safetensors", tensors(FC_OK) + b"\0" * 8)
put(S + "dup_names.safetensors",
    st('{"fc.bias":{"dtype":"F32","shape":[10],"data_offsets":[0,40]},'
       '"fc.bias":{"dtype":"F32","shape":[10],"data_offsets":[40,80]}}', f32(FC_B + FC_B)))
put(S + "json_invalid.safetensors", st('{"fc.bias": {"dtype": "F32", "shape": [10], ', f32(FC_B)))
put(S + "unused_tensor.safetensors", tensors(FC_OK + [("fc2.weight", [2], [1.0, 2.0])]))
put(S + "missing_tensor.safetensors", tensors(FC_OK[1:]))
put(S + "truncated_data.safetensors", tensors(FC_OK)[:-50])
put(S + "truncated_header.safetensors", tensors(FC_OK)[:60])
put(S + "nan.safetensors", tensors([("fc.bias", [10], FC_B[:4] + [float("nan")] + FC_B[5:]), FC_OK[1]]))
put(S + "inf.safetensors", tensors([FC_OK[0], ("fc.weight", [10, 3], FC_W[:29] + [float("-inf")])]))
put(S + "huge_finite.safetensors", tensors([FC_OK[0], ("fc.weight", [10, 3], [3e38] * 30)]))
put(S + "text_as_weights.txt", cnj([1, 1, 3, 10] + FC_W + FC_B))
put(S + "bn_negative_var.safetensors", tensors(BN[:5] + [("b.running_var", [10], [2.0] * 9 + [-1.0])]))
put(S + "bn_scale_overflow.safetensors", tensors(BN[:2] + [("b.weight", [10], [1.0] * 9 + [3e38])] + BN[3:5] +
                                                 [("b.running_var", [10], [2.0] * 9 + [0.0])]))
put(S + "bn_fold_overflow.safetensors", tensors([("c.weight", [10, 3, 1, 1], FC_W[:29] + [1e10])] + BN[1:2] +
                                                [("b.weight", [10], [1.0] * 9 + [1e30])] + BN[3:]))
put(S + "empty_tensor.safetensors",
    st({"fc.weight": {"dtype": "F32", "shape": [10, 3], "data_offsets": [0, 120]},
        "fc.bias": {"dtype": "F32", "shape": [0], "data_offsets": [120, 120]}}, f32(FC_W)))

# --- ConvNetJS (one directory per case: --weights DIR with the base net's file name) -----------
C = "convnetjs/"
put(C + "header_huge/c.txt", cnj([10 ** 12, 1, 1, 10] + FC_W[:10] + FC_B))
put(C + "fc_outputs_huge/f.txt", cnj([3, 99999999999] + FC_W + FC_B))
put(C + "header_zero/c.txt", cnj([0, 1, 1, 10] + FC_W[:10] + FC_B))
put(C + "header_negative/c.txt", cnj([1, 1, -1, 10] + FC_W[:10] + FC_B))
put(C + "count_overflow/c.txt", cnj([4096, 4096, 16777216, 16777216, 1.0]))
put(C + "too_few_numbers/c.txt", cnj([1, 1, 1, 10] + FC_W[:10]))
put(C + "too_many_numbers/c.txt", cnj([1, 1, 1, 10] + FC_W[:10] + FC_B + [7]))
put(C + "fc_inputs_mismatch/f.txt", cnj([4, 10] + FC_W + FC_W[:10] + FC_B))
put(C + "truncated/f.txt", cnj([3, 10] + FC_W + FC_B)[:90])
put(C + "nan/c.txt", cnj([1, 1, 1, 10] + FC_W[:5] + ["nan"] + FC_W[6:10] + FC_B))
put(C + "inf_overflow/c.txt", cnj([1, 1, 1, 10] + FC_W[:10] + FC_B[:9] + ["1e999"]))
put(C + "word/f.txt", cnj([3, 10] + FC_W[:12] + ["0.5x"] + FC_W[13:] + FC_B))
put(C + "escape/c.txt", b"\x1b[31m1 1 1 10\n" + cnj(FC_W[:10] + FC_B).encode())
put(C + "binary/c.txt", b"\x01\x01\x01\x0a" + f32(FC_W[:10] + FC_B))



def snapshot_fc(weights, biases):
    """A ConvNetJS JSON snapshot of one fc layer (net.toJSON() form), weights as [output][input]."""
    vol = lambda vals: {"sx": 1, "sy": 1, "depth": len(vals), "w": {str(i): v for i, v in enumerate(vals)}}
    return json.dumps({"layers": [{"layer_type": "input", "out_sx": 1, "out_sy": 1, "out_depth": 3},
                                  {"layer_type": "fc", "filters": [vol(w) for w in weights], "biases": vol(biases)}]})


FC_ROWS = [FC_W[3 * o:3 * o + 3] for o in range(10)]
put(C + "json_1e39.json", snapshot_fc(FC_ROWS[:9] + [[0.5, 1e39, 0.5]], FC_B))
put(C + "json_huge_filters.json",
    '{"layers":[{"layer_type":"conv","filters":[{"sx":1048576,"sy":1048576,"depth":1,"w":[]}],"biases":{"w":[0]}}]}')

# --- CIFAR-10 ----------------------------------------------------------------------------------
REC = bytes([3]) + bytes((i * 7) % 256 for i in range(3072))
put("cifar10/ok.bin", REC)
put("cifar10/truncated.bin", REC + REC[:1000])
put("cifar10/empty.bin", b"")
put("cifar10/label10.bin", REC + bytes([10]) + REC[1:])
put("cifar10/weights.safetensors", tensors(FC_OK))
put("cifar10/gzip.bin.gz", gzip.compress(REC * 2, mtime=0))

# --- IDX ---------------------------------------------------------------------------------------
I = "idx/"
IMG, LAB = 0x803, 0x801
put(I + "ok-images-idx3-ubyte", idx(IMG, [3, 2, 2], bytes(range(12))))
put(I + "ok-labels-idx1-ubyte", idx(LAB, [3], bytes([0, 9, 4])))
put(I + "ok-images-idx3-ubyte.gz", gzip.compress(idx(IMG, [3, 2, 2], bytes(range(12))), mtime=0))
put(I + "dim_huge-images-idx3-ubyte", idx(IMG, [1000000, 1000000, 1000000], b""))
put(I + "count_huge-images-idx3-ubyte", idx(IMG, [100000, 28, 28], bytes(16)))
put(I + "dim_zero-images-idx3-ubyte", idx(IMG, [0, 2, 2], b""))
put(I + "truncated-images-idx3-ubyte", idx(IMG, [5, 2, 2], bytes(12)))
put(I + "truncated-labels-idx1-ubyte", idx(LAB, [5], bytes(3)))
put(I + "header_truncated-images-idx3-ubyte", idx(IMG, [3], b"\0\0"))
put(I + "trailing-images-idx3-ubyte", idx(IMG, [3, 2, 2], bytes(13)))
put(I + "two-labels-idx1-ubyte", idx(LAB, [2], bytes([1, 2])))
put(I + "bad_magic-images-idx3-ubyte", idx(0x804, [3, 2, 2], bytes(12)))
put(I + "label10-labels-idx1-ubyte", idx(LAB, [3], bytes([0, 10, 4])))
put(I + "gz_truncated-images-idx3-ubyte.gz", gzip.compress(idx(IMG, [3, 2, 2], bytes(range(12))), mtime=0)[:30])
GZ_OK = gzip.compress(idx(IMG, [3, 2, 2], bytes(range(12))), mtime=0)
put(I + "gz_corrupt-images-idx3-ubyte.gz", GZ_OK[:-8] + bytes(b ^ 0xff for b in GZ_OK[-8:-4]) + GZ_OK[-4:])
put(I + "gz_trailing-images-idx3-ubyte.gz", GZ_OK + b"appended")
# A header claiming 1 x 2000 x 2000 with 4100 incompressible bytes: the gzip file could hold the
# 4 MB claimed (the deflate bound), so only the shape check against the netdef, made before any
# pixel is read, stops it (reading first would report a truncation instead).
put(I + "gz_shape-images-idx3-ubyte.gz",
    gzip.compress(idx(IMG, [1, 2000, 2000], random.Random(16).randbytes(4100)), mtime=0))
put(I + "gz_bomb-images-idx3-ubyte.gz", gzip.compress(idx(IMG, [4000000, 100, 100], b""), mtime=0))

# ONNX models, protobuf written by hand (field numbers from onnx.proto) so that this script needs
# no onnx package: a tiny Conv -> Relu graph, then one hostile variant each.
def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out


def pv(field, v):  # varint field
    return varint(field << 3) + varint(v)


def pb(field, data):  # length-delimited field
    data = data.encode() if isinstance(data, str) else data
    return varint(field << 3 | 2) + varint(len(data)) + data


def value_info(name, dims):
    shape = b"".join(pb(1, pv(1, d)) for d in dims)
    return pb(1, name) + pb(2, pb(1, pv(1, 1) + pb(2, shape)))  # tensor_type: FLOAT, shape


def tensor(name, dims, raw=None, external=None):
    t = b"".join(pv(1, d) for d in dims) + pv(2, 1) + pb(8, name)
    if external is not None:
        t += b"".join(pb(13, pb(1, k) + pb(2, v)) for k, v in external) + pv(14, 1)
    else:
        t += pb(9, raw)
    return t


def node(op, name, ins, outs):
    return b"".join(pb(1, i) for i in ins) + b"".join(pb(2, o) for o in outs) + pb(3, name) + pb(4, op)


def model(nodes, inits, in_dims=(1, 3, 4, 4), ir=8, opset=13):
    g = b"".join(pb(1, n) for n in nodes) + pb(2, "g") + b"".join(pb(5, t) for t in inits)
    g += pb(11, value_info("x", in_dims)) + pb(12, pb(1, "y"))
    return pv(1, ir) + pb(8, pb(1, "") + pv(2, opset)) + pb(7, g)


O = "onnx/"
W = f32([0.5] * (4 * 3 * 3 * 3))
CONV = [node("Conv", "conv", ["x", "w"], ["a"]), node("Relu", "relu", ["a"], ["y"])]
GOOD = model(CONV, [tensor("w", [4, 3, 3, 3], W)])
put(O + "truncated.onnx", GOOD[:len(GOOD) // 2])
put(O + "cycle.onnx", model([node("Add", "loop_a", ["x", "y"], ["a"]), node("Relu", "loop_b", ["a"], ["y"])], []))
put(O + "missing_initializer.onnx", model(CONV, []))
put(O + "huge_dim.onnx", model(CONV, [tensor("w", [4, 3, 3, 3], W)], in_dims=(1, 3, 1 << 40, 4)))
put(O + "negative_dim.onnx", model(CONV, [tensor("w", [4, -3, 3, 3], W)]))
put(O + "raw_short.onnx", model(CONV, [tensor("w", [1024, 1024, 1024, 1024], b"\0" * 4)]))
put(O + "external_outside.onnx", model(CONV, [tensor("w", [4, 3, 3, 3], external=[("location", "../w.bin")])]))
put(O + "unsupported.onnx", model([node("LRN", "norm", ["x"], ["a"]), node("Conv", "conv", ["a", "w"], ["b"]),
                                    node("Sum", "sum", ["b"], ["y"])], [tensor("w", [4, 3, 3, 3], W)]))
put(O + "opset6.onnx", model(CONV, [tensor("w", [4, 3, 3, 3], W)], opset=6))
