#!/usr/bin/env python3
"""The networks of netdefs/cifar10.yaml and netdefs/fashion-mnist.yaml in PyTorch on the GPU, for
bench/gpu_bench.sh: same weights, same images, same preprocessing (float(byte) * scale + shift).

  --net cifar10 (default): the ConvNetJS CIFAR-10 network; --models: the ConvNetJS text files
      (read by bench/pytorch_cpu.py's functions, with the ordering documented in
      ../shared/README.md), --data: a CIFAR-10 binary file (the sample, cycled to N);
      scale = 1/255, shift = -0.5.
  --net fashion: the Fashion-MNIST network; --weights: netdefs/weights/fashion-mnist.safetensors
      (read by tests/pytorch_crosscheck.py's reader, the network built as there), --data: the IDX
      images, plain or gzip (labels: the same name with images-idx3 -> labels-idx1, or --labels);
      mean 0.2860, std 0.3530 as in the netdef: scale = 1/(255 std), shift = -mean/std.

cudnn.benchmark = True; TF32 off except in the row that says tf32. Variants, each timed with
CUDA events as the median of --repeats runs after two warm-ups:
  eager fp32 / cuda graph fp32 / eager tf32 / eager fp16: the input already on the GPU as
      float32 (fp16: as half), one forward over all N images to probabilities and argmax;
  e2e fp32: from N images of uint8 in pinned host memory to int64 predictions in host memory
      (H2D copy, normalise, forward, argmax, D2H), eager.
Each variant's error is the max abs difference of its probabilities from the CPU reference's
(--ref: cnnrun --engine cpu --dump over the data set's distinct images), over all N images.
Prints one JSON line per (variant, N).

--check N times nothing: it runs the first N distinct images through the network on --device
(cpu works without a GPU) and compares with --ref: max abs difference of the probabilities at
most 1e-5 and identical predictions, else exit 1. For example, on the development machine:

    build-h2/cnnrun netdefs/fashion-mnist.yaml --engine cpu --batch 500 --dump /tmp/fm.npy --quiet
    /usr/bin/python3 bench/pytorch_gpu.py --net fashion --device cpu --check 500 --ref /tmp/fm.npy \\
        --weights netdefs/weights/fashion-mnist.safetensors \\
        --data /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz
"""
import argparse
import gzip
import json
import os
import statistics
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from pytorch_cpu import read_cifar10, read_conv, read_fc  # noqa: E402
from pytorch_crosscheck import read_safetensors  # noqa: E402

SCALE = 0.00392156862745098
SHIFT = -0.5
FASHION_MEAN, FASHION_STD = 0.2860, 0.3530  # netdefs/fashion-mnist.yaml
CHECK_TOL = 1e-5  # as tests/pytorch_crosscheck.py


def read_idx(path):
    """An IDX file (plain or gzip) as a uint8 array of its dimensions."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        sys.exit(f"{path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def cifar10_net(a):
    """(weights, forward, scale, shift, pixels N x 3 x 32 x 32, labels) of the CIFAR-10 network."""
    w = {}
    w["w1"], w["b1"] = read_conv(f"{a.models}/layer1_conv.txt")
    w["w2"], w["b2"] = read_conv(f"{a.models}/layer4_conv.txt")
    w["w3"], w["b3"] = read_conv(f"{a.models}/layer7_conv.txt")
    w["wf"], w["bf"] = read_fc(f"{a.models}/layer10_fc.txt", 20, 4, 4)

    def forward(x, p):
        x = F.max_pool2d(F.relu(F.conv2d(x, p["w1"], p["b1"], padding=2)), 2)
        x = F.max_pool2d(F.relu(F.conv2d(x, p["w2"], p["b2"], padding=2)), 2)
        x = F.max_pool2d(F.relu(F.conv2d(x, p["w3"], p["b3"], padding=2)), 2)
        return F.softmax(F.linear(x.flatten(1), p["wf"], p["bf"]), dim=1)

    pixels, labels = read_cifar10(a.data)
    return w, forward, SCALE, SHIFT, pixels, labels


def fashion_net(a):
    """The same for the Fashion-MNIST network (as tests/pytorch_crosscheck.py builds it)."""
    w = read_safetensors(a.weights)

    def forward(x, p):
        x = F.max_pool2d(F.relu(F.conv2d(x, p["conv1.weight"], p["conv1.bias"], padding=2)), 2)
        x = F.max_pool2d(F.relu(F.conv2d(x, p["conv2.weight"], p["conv2.bias"], padding=2)), 2)
        x = F.relu(F.linear(x.flatten(1), p["fc1.weight"], p["fc1.bias"]))
        return F.softmax(F.linear(x, p["fc2.weight"], p["fc2.bias"]), dim=1)

    images = read_idx(a.data)
    labels_path = a.labels
    if not labels_path:
        head, name = os.path.split(a.data)
        if "images-idx3" not in name:
            sys.exit(f"{a.data}: no 'images-idx3' in the name to find the labels by; give --labels")
        labels_path = os.path.join(head, name.replace("images-idx3", "labels-idx1"))
    labels = read_idx(labels_path).astype(np.int64)
    if images.ndim != 3 or images.shape[1:] != (28, 28) or len(labels) != len(images):
        sys.exit(f"{a.data}: {images.shape} images and {labels.shape} labels, expected N x 28 x 28 and N")
    # Both float32 constants as cnnrun computes them (1/(255 std) and -mean/std in double, rounded).
    scale = float(np.float32(1.0 / (255.0 * FASHION_STD)))
    shift = float(np.float32(-FASHION_MEAN / FASHION_STD))
    return w, forward, scale, shift, images.reshape(-1, 1, 28, 28).copy(), labels


def check(a, w, forward, scale, shift, pixels, labels):
    """--check: the first N distinct images on --device against --ref, no timing."""
    if not a.ref:
        sys.exit("--check needs --ref")
    dev = torch.device(a.device)
    n = min(a.check, len(labels))
    ref = np.load(a.ref)
    if ref.shape[0] < n:
        sys.exit(f"{a.ref}: {ref.shape[0]} rows, --check wants {n}")
    p = {k: v.to(dev) for k, v in w.items()}
    with torch.inference_mode():
        x = torch.from_numpy(pixels[:n]).to(dev).float() * scale + shift
        probs = forward(x, p).cpu().numpy()
    diff = float(np.abs(probs - ref[:n]).max())
    same = int((probs.argmax(1) == ref[:n].argmax(1)).sum())
    acc = 100.0 * float((probs.argmax(1) == labels[:n]).sum()) / n
    ok = diff <= CHECK_TOL and same == n
    print(json.dumps({"net": a.net, "device": a.device, "images": n, "max_abs_prob_diff": diff,
                      "identical_predictions": same, "accuracy_percent": acc, "tolerance": CHECK_TOL,
                      "pass": ok}))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--net", choices=["cifar10", "fashion"], default="cifar10")
    ap.add_argument("--models", help="cifar10: directory of the ConvNetJS weight files")
    ap.add_argument("--weights", help="fashion: the safetensors weights")
    ap.add_argument("--data", required=True, help="cifar10: CIFAR-10 binary file; fashion: IDX images file")
    ap.add_argument("--labels", help="fashion: IDX labels file (default: from the images file's name)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 50000])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--ref", help="CPU reference probabilities (.npy, images x 10) for the distinct images")
    ap.add_argument("--variants", default="eager,graph,tf32,fp16,e2e")
    ap.add_argument("--device", default="cuda", help="cuda (timing) or cpu (--check only)")
    ap.add_argument("--check", type=int, default=0, metavar="N",
                    help="no timing: compare the first N images' probabilities with --ref")
    a = ap.parse_args()
    if a.net == "cifar10" and not a.models:
        ap.error("--net cifar10 needs --models")
    if a.net == "fashion" and not a.weights:
        ap.error("--net fashion needs --weights")
    if not a.check and a.device != "cuda":
        ap.error("timing needs --device cuda (use --check N on the CPU)")
    w, forward, scale, shift, pixels, labels = (cifar10_net if a.net == "cifar10" else fashion_net)(a)
    if a.check:
        return check(a, w, forward, scale, shift, pixels, labels)
    variants = a.variants.split(",")

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")

    w32 = {k: v.to(dev) for k, v in w.items()}
    w16 = {k: v.to(dev).half() for k, v in w.items()}
    count = len(labels)
    ref = torch.from_numpy(np.load(a.ref)).to(dev) if a.ref else None
    if ref is not None and ref.shape[0] < count:
        sys.exit(f"{a.ref}: {ref.shape[0]} rows, the data has {count} images")

    def timed(fn, repeats):
        fn()
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1))
        return times

    def report(name, what, n, times, probs, preds, idx):
        row = {"variant": name, "what": what, "images": n, "median_ms": statistics.median(times),
               "min_ms": min(times), "max_ms": max(times), "runs": len(times),
               "accuracy_percent": 100.0 * float((preds.cpu() == torch.from_numpy(labels)[idx]).sum()) / n}
        if ref is not None:
            row["max_abs_prob_diff"] = float((probs.float() - ref[idx.to(dev)]).abs().max())
        print(json.dumps(row), flush=True)

    with torch.inference_mode():
        for n in a.sizes:
            idx = torch.arange(n) % count
            host_u8 = torch.from_numpy(pixels)[idx].contiguous().pin_memory()
            x32 = host_u8.to(dev).float() * scale + shift
            out = {}

            def run(x, p):
                probs = forward(x, p)
                out["probs"], out["preds"] = probs, probs.argmax(1)

            if "eager" in variants:
                t = timed(lambda: run(x32, w32), a.repeats)
                report("pytorch eager fp32", "forward, input on GPU", n, t, out["probs"], out["preds"], idx)
            if "graph" in variants:
                g = torch.cuda.CUDAGraph()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(2):
                        run(x32, w32)  # warm-up (cudnn.benchmark's search) before capture
                torch.cuda.current_stream().wait_stream(s)
                with torch.cuda.graph(g):
                    run(x32, w32)
                t = timed(g.replay, a.repeats)
                report("pytorch cuda graph fp32", "forward, input on GPU", n, t, out["probs"], out["preds"],
                       idx)
                del g
            if "tf32" in variants:
                torch.backends.cudnn.allow_tf32 = True
                torch.backends.cuda.matmul.allow_tf32 = True
                t = timed(lambda: run(x32, w32), a.repeats)
                report("pytorch eager tf32", "forward, input on GPU", n, t, out["probs"], out["preds"], idx)
                torch.backends.cudnn.allow_tf32 = False
                torch.backends.cuda.matmul.allow_tf32 = False
            if "fp16" in variants:
                x16 = x32.half()
                t = timed(lambda: run(x16, w16), a.repeats)
                report("pytorch eager fp16", "forward, input on GPU (half)", n, t, out["probs"], out["preds"],
                       idx)
                del x16
            if "e2e" in variants:
                preds_host = torch.empty(n, dtype=torch.int64).pin_memory()

                def e2e():
                    x = host_u8.to(dev, non_blocking=True).float() * scale + shift
                    run(x, w32)
                    preds_host.copy_(out["preds"], non_blocking=True)

                t = timed(e2e, a.repeats)
                torch.cuda.synchronize()
                report("pytorch e2e fp32", "pinned uint8 host -> host preds", n, t, out["probs"],
                       preds_host, idx)
            del x32, host_u8, out
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
