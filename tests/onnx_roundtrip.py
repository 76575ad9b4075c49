#!/usr/bin/python3
"""ONNX round trip: a torchvision network (Debian's python3-torchvision, random weights from a
fixed seed, 10 classes, eval mode) is exported with torch.onnx.export (opset 17), imported with
`cnnrun import` (netdef + safetensors) and run by cnnrun on the first images of the CIFAR-10
sample; PyTorch runs the same network on the same preprocessed pixels. Passes when cnnrun's
outputs are within 1e-5 of PyTorch's relative to their largest magnitude, and every predicted
class is the same. The same model is also run directly (`cnnrun MODEL.onnx`, imported in memory)
and must give exactly the written netdef's outputs.

usage: onnx_roundtrip.py CNNRUN_BINARY SHARED_DIR MODEL [--engine cpu|gpu] [--images N]
MODEL: resnet18, squeezenet1_1, googlenet, mobilenet_v2
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision

REL_TOL = 1e-5
MEAN = [0.4914, 0.4822, 0.4465]
STD = [0.247, 0.243, 0.261]


def build(name):
    torch.manual_seed(17)
    m = getattr(torchvision.models, name)
    if name == "googlenet":
        net = m(num_classes=10, aux_logits=False, init_weights=True)
    else:
        net = m(num_classes=10)
    net.eval()
    # Random batchnorm statistics, so that folding them is tested with values that matter.
    with torch.no_grad():
        for mod in net.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
    return net


def cifar_pixels(path, n):
    raw = np.fromfile(path, dtype=np.uint8).reshape(-1, 3073)[:n]
    return raw[:, 1:].reshape(n, 3, 32, 32)


def preprocess(pixels):
    # cnnrun's definition: float(byte) * scale + shift, rounded after the multiply, in float32,
    # with scale = 1 / (255 std) and shift = -mean / std computed in double then rounded.
    scale = np.array([1.0 / (255.0 * np.float64(np.float32(s))) for s in STD], dtype=np.float32)
    shift = np.array([-np.float64(np.float32(m)) / np.float64(np.float32(s)) for m, s in zip(MEAN, STD)],
                     dtype=np.float32)
    x = pixels.astype(np.float32) * scale[None, :, None, None]
    return (x + shift[None, :, None, None]).astype(np.float32)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    # No GPU, or a layer whose GPU kernel has not landed yet (the GPU executor refuses it by name):
    # a visible skip, never a pass.
    if r.returncode != 0 and ("no usable GPU" in r.stderr or "has no GPU implementation yet" in r.stderr):
        print(f"skipped: {r.stderr.strip()}")
        sys.exit(77)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("shared")
    ap.add_argument("model")
    ap.add_argument("--engine", default="cpu")
    ap.add_argument("--images", type=int, default=32)
    a = ap.parse_args()
    data = os.path.join(a.shared, "data/cifar10-sample/test_1000.bin")
    if not os.path.exists(data):
        sys.exit(f"no CIFAR-10 sample at {data}")
    torch.set_num_threads(2)
    net = build(a.model)
    pixels = cifar_pixels(data, a.images)
    with torch.no_grad():
        ref = net(torch.from_numpy(preprocess(pixels))).numpy()

    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, a.model + ".onnx")
        torch.onnx.export(net, torch.zeros(1, 3, 32, 32), model, opset_version=17, input_names=["image"],
                          output_names=["logits"], dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}})
        netdef = os.path.join(tmp, a.model + ".yaml")
        print(run([a.binary, "import", model, netdef, "--mean", ",".join(map(str, MEAN)), "--std",
                   ",".join(map(str, STD)), "--data", data]).strip())
        if not os.path.exists(os.path.join(tmp, a.model + ".safetensors")):
            sys.exit("no safetensors file beside the netdef")
        dump = os.path.join(tmp, "out.npy")
        run([a.binary, netdef, "--engine", a.engine, "--batch", str(a.images), "--assets", a.shared, "--dump", dump,
             "--quiet"])
        ours = np.load(dump)
        dump2 = os.path.join(tmp, "out2.npy")
        run([a.binary, model, "--engine", a.engine, "--batch", str(a.images), "--data", data, "--mean",
             ",".join(map(str, MEAN)), "--std", ",".join(map(str, STD)), "--dump", dump2, "--quiet"])
        direct = np.load(dump2)

    if ours.shape != ref.shape:
        sys.exit(f"cnnrun gave {ours.shape}, PyTorch {ref.shape}")
    scale = float(np.abs(ref).max())
    diff = float(np.abs(ours - ref).max())
    same = int((ours.argmax(1) == ref.argmax(1)).sum())
    direct_same = bool(np.array_equal(direct, ours))
    ok = diff <= REL_TOL * scale and same == len(ours) and direct_same
    print(f"{a.model}: {len(ours)} images, max abs difference {diff:.3e} = {diff / scale:.2e} of the largest "
          f"output {scale:.3e} (limit {REL_TOL:g}), identical predictions {same}/{len(ours)}, "
          f"direct .onnx run identical: {direct_same}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
