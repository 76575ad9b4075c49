#!/usr/bin/env python3
"""cnnrun's upsample layer against PyTorch's F.interpolate (CPU, float32) on many shapes: whole and
fractional scale factors (up and down, one or per axis, among them PyTorch's out = 2 * in special
case), output sizes (multiples and not), nearest and bilinear, align_corners. Each case is a
one-layer netdef run by cnnrun on a float32 .npy (taken as already preprocessed) with --dump.
Nearest must be the same values; bilinear within 1e-6 + 1e-5 |value|.

usage: upsample_crosscheck.py CNNRUN [--engine cpu|gpu]   (exit 77: no PyTorch, or no GPU)"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: no PyTorch (Debian's python3-torch)")
    sys.exit(77)

ap = argparse.ArgumentParser()
ap.add_argument("cnnrun")
ap.add_argument("--engine", default="cpu")
args = ap.parse_args()

# (C, H, W), scale (number or [h, w]) or size ([h, w]), mode, align_corners
cases = []
for shape in [(2, 5, 7), (3, 4, 4), (1, 9, 3), (2, 1, 6)]:
    for mode in ["nearest", "bilinear"]:
        for ac in ([False, True] if mode == "bilinear" else [False]):
            for scale in [2, [3, 2], 1.5, 0.5, 2.4, 1.3333, [1.7, 2.5], [0.6, 3], 1]:
                cases.append((shape, ("scale", scale), mode, ac))
            for size in [[7, 9], [3, 5], [10, 14], [1, 1], [6, 2]]:
                cases.append((shape, ("size", size), mode, ac))

tmp = tempfile.mkdtemp(prefix="cnnrun-upsample-")
rng = np.random.default_rng(5)
fails, skipped_gpu = [], None
for i, (shape, (kind, v), mode, ac) in enumerate(cases):
    x = rng.uniform(-2, 2, size=(3,) + shape).astype(np.float32)
    kw = {"mode": mode}
    if mode == "bilinear":
        kw["align_corners"] = ac
    if kind == "scale":
        sf = tuple(float(s) for s in v) if isinstance(v, list) else float(v)
        try:
            want = F.interpolate(torch.from_numpy(x), scale_factor=sf, **kw).numpy()
        except RuntimeError as e:  # PyTorch refuses an empty output: so must cnnrun
            want = e
    else:
        want = F.interpolate(torch.from_numpy(x), size=tuple(v), **kw).numpy()
    value = str(v).replace(" ", "")
    opts = f", mode: {mode}" + (", align_corners: true" if ac else "")
    what = f"{shape} {kind} {value} {mode}{' align_corners' if ac else ''}"
    classes = 1 if isinstance(want, Exception) else int(np.prod(want.shape[1:]))
    netdef = (f"name: up{i}\ninput: {{channels: {shape[0]}, height: {shape[1]}, width: {shape[2]}}}\n"
              f"classes: {classes}\nlayers:\n  - {{name: up, type: upsample, {kind}: {value}{opts}}}\n")
    nd, xin, dump = f"{tmp}/n{i}.yaml", f"{tmp}/x{i}.npy", f"{tmp}/y{i}.npy"
    open(nd, "w").write(netdef)
    np.save(xin, x)
    r = subprocess.run([args.cnnrun, nd, "--data", xin, "--data-format", "npy", "--engine", args.engine, "--dump",
                        dump, "--quiet"], capture_output=True, text=True)
    if isinstance(want, Exception):  # an empty output: cnnrun must refuse it too, naming the layer
        if r.returncode == 0 or "gives no output" not in r.stderr or "'up'" not in r.stderr:
            fails.append(f"{what}: PyTorch refuses it ({want}); cnnrun: exit {r.returncode} {r.stderr.strip()}")
        continue
    if r.returncode != 0:
        if args.engine == "gpu" and "no usable GPU" in r.stderr:
            print("SKIP: " + r.stderr.strip())
            sys.exit(77)
        fails.append(f"{what}: cnnrun failed: {r.stderr.strip()}")
        continue
    got = np.load(dump).reshape(want.shape)
    if mode == "nearest":
        ok = np.array_equal(got, want)
    else:
        ok = np.all(np.abs(got - want) <= 1e-6 + 1e-5 * np.abs(want))
    if not ok:
        fails.append(f"{what}: max |diff| {np.abs(got - want).max():.3g}, output {want.shape[1:]}")
print(f"upsample vs F.interpolate ({args.engine}): {len(cases) - len(fails)}/{len(cases)} cases agree")
for f in fails:
    print("FAIL", f)
sys.exit(1 if fails else 0)
