#!/usr/bin/python3
"""Cross-check against PyTorch: runs cnnrun with --dump on the Fashion-MNIST, CIFAR-10 and LeNet-5
netdefs (LeNet-5 with random weights written here as safetensors) and the same networks in PyTorch (Debian's python3-torch, CPU, float32) built from the
same weight files, on the same images, and compares the output probabilities: max abs
difference <= 1e-5 and identical predicted classes.

usage: pytorch_crosscheck.py CNNRUN_BINARY SOURCE_DIR SHARED_DIR [--engine cpu|gpu|auto]
"""
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

TOL = 1e-5


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", name
        b, e = t["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(raw[base + b:base + e], "<f4").reshape(t["shape"]).copy())
    return out


def write_safetensors(path, tensors):
    """name -> float tensor, as an F32 safetensors file (header padded to 8 bytes, as the format asks)."""
    arrays = [(k, np.ascontiguousarray(v.detach().cpu().float().numpy(), "<f4")) for k, v in tensors.items()]
    header, offset = {}, 0
    for k, a in arrays:
        header[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, a in arrays:
            f.write(a.tobytes())


def read_convnetjs_conv(path):
    v = np.array(open(path).read().split(), dtype=np.float64)
    kw, kh, depth, filters = (int(x) for x in v[:4])
    w = v[4:4 + filters * kw * kh * depth].reshape(filters, kw, kh, depth).transpose(0, 3, 2, 1)
    b = v[4 + filters * kw * kh * depth:]
    assert b.size == filters
    return torch.tensor(w, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)


def read_convnetjs_fc(path, c, h, w):
    v = np.array(open(path).read().split(), dtype=np.float64)
    inputs, outputs = int(v[0]), int(v[1])
    wt = v[2:2 + inputs * outputs].reshape(outputs, h, w, c).transpose(0, 3, 1, 2).reshape(outputs, inputs)
    b = v[2 + inputs * outputs:]
    assert b.size == outputs
    return torch.tensor(wt, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)


def cnnrun(binary, args, dump):
    r = subprocess.run([binary] + args + ["--dump", dump, "--quiet"], capture_output=True, text=True)
    if r.returncode != 0 and "no usable GPU" in r.stderr:
        print(f"skipped: {r.stderr.strip()}")
        sys.exit(77)  # ctest: Skipped
    if r.returncode != 0:
        sys.exit(f"cnnrun failed ({r.returncode}): {r.stderr.strip()}")
    print("  cnnrun:", r.stdout.strip())
    return np.load(dump)


def compare(name, ours, theirs):
    theirs = theirs.numpy()
    diff = float(np.abs(ours - theirs).max())
    same = int((ours.argmax(1) == theirs.argmax(1)).sum())
    ok = diff <= TOL and same == len(ours)
    print(f"{name}: {len(ours)} images, max abs difference {diff:.3e} (limit {TOL:g}), "
          f"identical predictions {same}/{len(ours)}: {'PASS' if ok else 'FAIL'}")
    return ok


def fashion(binary, src, engine, tmp):
    d = "/usr/share/datasets/fashion-mnist"
    with gzip.open(f"{d}/t10k-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    ours = cnnrun(binary, [f"{src}/netdefs/fashion-mnist.yaml", "--engine", engine], f"{tmp}/fm.npy")
    w = read_safetensors(f"{src}/netdefs/weights/fashion-mnist.safetensors")
    mean, std = 0.2860, 0.3530  # netdefs/fashion-mnist.yaml
    scale, shift = np.float32(1.0 / (255.0 * std)), np.float32(-mean / std)
    t = torch.from_numpy(x.astype(np.float32)) * torch.tensor(scale) + torch.tensor(shift)
    with torch.no_grad():
        t = F.max_pool2d(F.relu(F.conv2d(t, w["conv1.weight"], w["conv1.bias"], padding=2)), 2)
        t = F.max_pool2d(F.relu(F.conv2d(t, w["conv2.weight"], w["conv2.bias"], padding=2)), 2)
        t = F.relu(F.linear(torch.flatten(t, 1), w["fc1.weight"], w["fc1.bias"]))
        t = F.softmax(F.linear(t, w["fc2.weight"], w["fc2.bias"]), dim=1)
    return compare("fashion-mnist", ours, t)


def lenet5(binary, src, engine, tmp):
    """netdefs/lenet5.yaml with random weights on the Fashion-MNIST test images (28x28, as MNIST)."""
    d = "/usr/share/datasets/fashion-mnist"
    with gzip.open(f"{d}/t10k-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    g = torch.Generator().manual_seed(5)
    shapes = {"conv1": (6, 1, 5, 5), "conv2": (16, 6, 5, 5), "fc1": (120, 400), "fc2": (84, 120), "fc3": (10, 84)}
    w = {}
    for name, shape in shapes.items():
        fan_in = int(np.prod(shape[1:]))
        w[f"{name}.weight"] = torch.randn(shape, generator=g) * (3 / np.sqrt(fan_in))  # outputs far from uniform
        w[f"{name}.bias"] = torch.randn(shape[0], generator=g) * 0.1
    write_safetensors(f"{tmp}/lenet5.safetensors", w)
    ours = cnnrun(binary, [f"{src}/netdefs/lenet5.yaml", "--engine", engine, "--weights", f"{tmp}/lenet5.safetensors",
                           "--data", f"{d}/t10k-images-idx3-ubyte.gz"], f"{tmp}/lenet5.npy")
    mean, std = 0.1307, 0.3081  # netdefs/lenet5.yaml
    scale, shift = np.float32(1.0 / (255.0 * std)), np.float32(-mean / std)
    t = torch.from_numpy(x.astype(np.float32)) * torch.tensor(scale) + torch.tensor(shift)
    with torch.no_grad():
        t = F.avg_pool2d(torch.tanh(F.conv2d(t, w["conv1.weight"], w["conv1.bias"], padding=2)), 2)
        t = F.avg_pool2d(torch.tanh(F.conv2d(t, w["conv2.weight"], w["conv2.bias"])), 2)
        t = torch.tanh(F.linear(torch.flatten(t, 1), w["fc1.weight"], w["fc1.bias"]))
        t = torch.tanh(F.linear(t, w["fc2.weight"], w["fc2.bias"]))
        t = F.softmax(F.linear(t, w["fc3.weight"], w["fc3.bias"]), dim=1)
    return compare("lenet5", ours, t)


def cifar(binary, src, shared, engine, tmp):
    raw = np.fromfile(f"{shared}/data/cifar10-sample/train_2000.bin", np.uint8).reshape(-1, 3073)
    x = raw[:, 1:].reshape(-1, 3, 32, 32)
    ours = cnnrun(binary, [f"{src}/netdefs/cifar10.yaml", "--assets", shared, "--engine", engine], f"{tmp}/c.npy")
    m = f"{shared}/models/convnetjs-cifar10"
    convs = [read_convnetjs_conv(f"{m}/layer{i}_conv.txt") for i in (1, 4, 7)]
    fw, fb = read_convnetjs_fc(f"{m}/layer10_fc.txt", 20, 4, 4)
    t = torch.from_numpy(x.astype(np.float32)) * torch.tensor(np.float32(0.00392156862745098)) + torch.tensor(np.float32(-0.5))
    with torch.no_grad():
        for w, b in convs:
            t = F.max_pool2d(F.relu(F.conv2d(t, w, b, padding=2)), 2)
        t = F.softmax(F.linear(torch.flatten(t, 1), fw, fb), dim=1)
    return compare("cifar10", ours, t)


def main():
    binary, src, shared = sys.argv[1:4]
    engine = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--engine" else "cpu"
    torch.set_num_threads(2)
    print(f"PyTorch {torch.__version__} vs cnnrun --engine {engine}")
    with tempfile.TemporaryDirectory() as tmp:
        results = [fashion(binary, src, engine, tmp), cifar(binary, src, shared, engine, tmp),
                   lenet5(binary, src, engine, tmp)]
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
