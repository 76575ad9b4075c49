#!/usr/bin/env python3
"""Writes the valid seed inputs of the fuzzers into seeds/<target>/ (committed; rerun after a
change). The regression files of tests/regress/<target>/ are seeds too (see CMakeLists.txt)."""
import gzip
import json
import os
import struct

D = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")


def put(rel, data):
    path = os.path.join(D, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def f32(values):
    return struct.pack("<%df" % len(values), *values)


HEAD = "input: {channels: 3, height: 8, width: 8}\nclasses: [a, b, c, d, e, f, g, h, i, j]\n"
put("netdef/chain.yaml", HEAD + """preprocess: {scale: 0.0039, shift: -0.5}
weights: {format: convnetjs, path: w, files: {conv1: c.txt, fc: f.txt}}
data: {format: cifar10, path: d/train.bin, split: train}
layers:
  - {name: conv1, type: conv, filters: 4, kernel: 3, stride: 1, pad: 1}
  - {name: relu1, type: relu}
  - {name: pool1, type: maxpool, size: 2, stride: 2}
  - {name: fc, type: fc, outputs: 10}
  - {name: softmax, type: softmax}
""")
put("netdef/graph.yaml", HEAD + """preprocess: {mean: [0.49, 0.48, 0.45], std: [0.25, 0.24, 0.26]}
weights: {format: safetensors, path: w.safetensors}
data: {format: idx, images: i-images-idx3-ubyte.gz, labels: i-labels-idx1-ubyte.gz}
output: prob
layers:
  - {name: stem, type: conv, filters: 8, kernel: [3, 1], pad: [1, 0], bias: false, algo: implicit}
  - {name: bn, type: batchnorm, eps: 0.001}
  - {name: act, type: tanh}
  - {name: left, type: conv, filters: 8, kernel: 1, inputs: act}
  - {name: right, type: sigmoid, inputs: [act]}
  - {name: sum, type: add, inputs: [left, right]}
  - {name: cat, type: concat, inputs: [sum, act, input]}
  - {name: avg, type: avgpool, size: [3, 2], stride: [2, 1], pad: 1, count_pad: false}
  - {name: gap, type: maxpool, global: true}
  - {name: flat, type: flatten}
  - {name: drop, type: dropout, rate: 0.25}
  - {name: fc, type: fc, outputs: 10}
  - {name: prob, type: softmax}
""")
put("netdef/block.yaml", """name: block
input:
  channels: 1
  height: 28
  width: 28
classes:
  - zero
  - one
layers:
  - name: c
    type: conv
    filters: 2
    kernel: 5
  - type: relu
  - {type: avgpool, size: 2}
  - {type: fc, outputs: 2}
""")

# safetensors for the fuzzer's network: conv c [4,3,3,3], batchnorm b [4] (with PyTorch's I64
# counter), fc f [10,4].
def st(entries):
    header, data = {}, b""
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


vals = [((i * 37) % 11 - 5) / 10 for i in range(108)]
put("safetensors/net.safetensors", st([
    ("c.weight", "F32", [4, 3, 3, 3], f32(vals)), ("c.bias", "F32", [4], f32([0.1, 0.2, 0.3, 0.4])),
    ("b.weight", "F32", [4], f32([1, 1, 1, 1])), ("b.bias", "F32", [4], f32([0, 0, 0, 0])),
    ("b.running_mean", "F32", [4], f32([0.5] * 4)), ("b.running_var", "F32", [4], f32([2] * 4)),
    ("b.num_batches_tracked", "I64", [], struct.pack("<q", 100)),
    ("f.weight", "F32", [10, 4], f32(vals[:40])), ("f.bias", "F32", [10], f32(vals[:10]))]))
put("safetensors/scalar.safetensors", st([("x", "F32", [], f32([1.5])), ("y", "F32", [2, 0], b"")]))

put("convnetjs/conv.txt", " ".join(str(x) for x in [3, 3, 2, 2] + vals[:36] + [0.5, -0.5]) + "\n")
put("convnetjs/fc.txt", " ".join(str(x) for x in [24, 2] + vals[:48] + [1e-3, -2.5e+2]) + "\n")

rec = lambda label: bytes([label]) + bytes((i * 13 + label) % 256 for i in range(3072))
put("cifar10/two.bin", rec(0) + rec(9))

img = struct.pack(">IIII", 0x803, 2, 3, 4) + bytes(range(24))
lab = struct.pack(">II", 0x801, 2) + bytes([1, 9])
put("idx/images-idx3-ubyte", img)
put("idx/labels-idx1-ubyte", lab)
put("idx/images-idx3-ubyte.gz", gzip.compress(img, mtime=0))

# ONNX models (python3-onnx, test-only): a small CNN as torch.onnx.export writes one (Conv, BN,
# Relu, MaxPool, the Shape -> Gather -> Unsqueeze -> Concat -> Reshape flatten, MatMul + Add,
# Softmax) and a branching one (Add, Concat, GlobalAveragePool, Flatten, Gemm, Dropout).
try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    onnx = None
if onnx is not None:
    def t(name, shape, seed):
        return numpy_helper.from_array(
            np.random.RandomState(seed).uniform(-1, 1, shape).astype(np.float32), name)

    def i64(name, v, scalar=False):
        a = np.array(v[0] if scalar else v, dtype=np.int64)
        return numpy_helper.from_array(a, name)

    N = helper.make_node
    g = helper.make_graph([
        N("Conv", ["x", "c.w", "c.b"], ["a"], "conv", pads=[1, 1, 1, 1]),
        N("BatchNormalization", ["a", "bn.s", "bn.b", "bn.m", "bn.v"], ["b"], "bn", epsilon=1e-5),
        N("Relu", ["b"], ["c"], "relu"),
        N("MaxPool", ["c"], ["d"], "pool", kernel_shape=[2, 2], strides=[2, 2]),
        N("Shape", ["d"], ["s"], "shape"),
        N("Gather", ["s", "zero"], ["n"], "gather", axis=0),
        N("Unsqueeze", ["n", "ax"], ["n1"], "unsqueeze"),
        N("Concat", ["n1", "m1"], ["shp"], "cat", axis=0),
        N("Reshape", ["d", "shp"], ["e"], "flat"),
        N("MatMul", ["e", "fc.w"], ["f"], "fc"),
        N("Add", ["f", "fc.b"], ["g"], "fc_add"),
        N("Softmax", ["g"], ["y"], "prob", axis=-1),
    ], "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [t("c.w", [4, 3, 3, 3], 1), t("c.b", [4], 2), t("bn.s", [4], 3), t("bn.b", [4], 4), t("bn.m", [4], 5),
         numpy_helper.from_array(np.full([4], 1.5, np.float32), "bn.v"), i64("zero", [0], True), i64("ax", [0]),
         i64("m1", [-1]), t("fc.w", [16, 10], 6), t("fc.b", [10], 7)])
    put("onnx/small.onnx", helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    g = helper.make_graph([
        N("Conv", ["x", "c1.w"], ["a"], "c1", pads=[1, 1, 1, 1]),
        N("Conv", ["x", "c2.w"], ["b"], "c2", pads=[1, 1, 1, 1]),
        N("Add", ["a", "b"], ["s"], "sum"),
        N("Concat", ["s", "a"], ["c"], "cat", axis=1),
        N("AveragePool", ["c"], ["p"], "avg", kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
        N("GlobalAveragePool", ["p"], ["q"], "gap"),
        N("Flatten", ["q"], ["r"], "flatten", axis=1),
        N("Dropout", ["r"], ["u"], "drop", ratio=0.25),
        N("Gemm", ["u", "g.w", "g.b"], ["y"], "gemm", transB=1, alpha=0.5),
    ], "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [t("c1.w", [4, 3, 3, 3], 8), t("c2.w", [4, 3, 3, 3], 9), t("g.w", [10, 8], 10), t("g.b", [10], 11)])
    put("onnx/branches.onnx", helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)],
                                                ir_version=6).SerializeToString())

# npy: uint8 N x C x H x W and N x H x W x C images, float32 values, and int64 labels.
try:
    import numpy as np
except ImportError:
    np = None
if np is not None:
    import io

    def npy(a):
        b = io.BytesIO()
        np.save(b, a)
        return b.getvalue()

    r = np.random.default_rng(5)
    put("npy/nchw_u8.npy", npy(r.integers(0, 256, (2, 3, 4, 4), dtype=np.uint8)))
    put("npy/nhwc_u8.npy", npy(r.integers(0, 256, (2, 4, 4, 3), dtype=np.uint8)))
    put("npy/grey_u8.npy", npy(r.integers(0, 256, (3, 5, 5), dtype=np.uint8)))
    put("npy/values_f32.npy", npy(r.standard_normal((2, 3, 4, 4)).astype(np.float32)))
    put("npy/labels_i64.npy", npy(np.array([1, 0, 9, 3], dtype=np.int64)))

# image: a PNG (palette and RGBA) and a JPEG (baseline and progressive, grey), small.
try:
    from PIL import Image
except ImportError:
    Image = None
if Image is not None and np is not None:
    import io

    def img(im, fmt, **kw):
        b = io.BytesIO()
        im.save(b, fmt, **kw)
        return b.getvalue()

    r = np.random.default_rng(6)
    rgb = Image.fromarray(r.integers(0, 256, (9, 12, 3), dtype=np.uint8), "RGB")
    put("image/rgb.png", img(rgb, "PNG"))
    put("image/rgba.png", img(rgb.convert("RGBA"), "PNG"))
    put("image/palette.png", img(rgb.convert("P"), "PNG"))
    put("image/baseline.jpg", img(rgb, "JPEG", quality=80))
    put("image/progressive.jpg", img(rgb, "JPEG", quality=80, progressive=True))
    put("image/grey.jpg", img(rgb.convert("L"), "JPEG", quality=80))
