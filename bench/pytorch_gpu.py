#!/usr/bin/env python3
"""The ConvNetJS CIFAR-10 network (netdefs/cifar10.yaml) in PyTorch on the GPU, for
bench/gpu_bench.sh: same weights (the ConvNetJS text files, read by bench/pytorch_cpu.py's
functions with the ordering documented in ../shared/README.md), same images (the CIFAR-10 sample
cycled to N), same preprocessing (float(byte) * scale + shift, scale = 1/255, shift = -0.5).

cudnn.benchmark = True; TF32 off except in the row that says tf32. Variants, each timed with
CUDA events as the median of --repeats runs after two warm-ups:
  eager fp32 / cuda graph fp32 / eager tf32 / eager fp16: the input already on the GPU as
      float32 (fp16: as half), one forward over all N images to probabilities and argmax;
  e2e fp32: from N images of uint8 in pinned host memory to int64 predictions in host memory
      (H2D copy, normalise, forward, argmax, D2H), eager.
Each variant's error is the max abs difference of its probabilities from the CPU reference's
(--ref: cnnrun --engine cpu --dump over the sample's distinct images), over all N images.
Prints one JSON line per (variant, N).
"""
import argparse
import json
import os
import statistics
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_cpu import read_cifar10, read_conv, read_fc  # noqa: E402

SCALE = 0.00392156862745098
SHIFT = -0.5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="directory of the ConvNetJS weight files")
    ap.add_argument("--data", required=True, help="CIFAR-10 binary file")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 50000])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--ref", help="CPU reference probabilities (.npy, images x 10) for the distinct images")
    ap.add_argument("--variants", default="eager,graph,tf32,fp16,e2e")
    a = ap.parse_args()
    variants = a.variants.split(",")

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")

    w = {}
    w["w1"], w["b1"] = read_conv(f"{a.models}/layer1_conv.txt")
    w["w2"], w["b2"] = read_conv(f"{a.models}/layer4_conv.txt")
    w["w3"], w["b3"] = read_conv(f"{a.models}/layer7_conv.txt")
    w["wf"], w["bf"] = read_fc(f"{a.models}/layer10_fc.txt", 20, 4, 4)
    w32 = {k: v.to(dev) for k, v in w.items()}
    w16 = {k: v.to(dev).half() for k, v in w.items()}
    pixels, labels = read_cifar10(a.data)
    count = len(labels)
    ref = torch.from_numpy(np.load(a.ref)).to(dev) if a.ref else None
    if ref is not None and ref.shape[0] < count:
        sys.exit(f"{a.ref}: {ref.shape[0]} rows, the data has {count} images")

    def forward(x, p):
        x = F.max_pool2d(F.relu(F.conv2d(x, p["w1"], p["b1"], padding=2)), 2)
        x = F.max_pool2d(F.relu(F.conv2d(x, p["w2"], p["b2"], padding=2)), 2)
        x = F.max_pool2d(F.relu(F.conv2d(x, p["w3"], p["b3"], padding=2)), 2)
        return F.softmax(F.linear(x.flatten(1), p["wf"], p["bf"]), dim=1)

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
            x32 = host_u8.to(dev).float() * SCALE + SHIFT
            out = {}

            def run(x, p):
                probs = forward(x, p)
                out["probs"], out["preds"] = probs, probs.argmax(1)

            if "eager" in variants:
                t = timed(lambda: run(x32, w32), a.repeats)
                report(f"pytorch eager fp32", "forward, input on GPU", n, t, out["probs"], out["preds"], idx)
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
                    x = host_u8.to(dev, non_blocking=True).float() * SCALE + SHIFT
                    run(x, w32)
                    preds_host.copy_(out["preds"], non_blocking=True)

                t = timed(e2e, a.repeats)
                torch.cuda.synchronize()
                report("pytorch e2e fp32", "pinned uint8 host -> host preds", n, t, out["probs"],
                       preds_host, idx)
            del x32, host_u8, out
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
