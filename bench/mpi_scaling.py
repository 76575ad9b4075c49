#!/usr/bin/env python3
"""Benchmark (not a test) for issue 18: the throughput of `mpirun -np N cnnrun ... --engine gpu`
against one process on one GPU of the same host, in one run, with the same predictions.

Jobs (the issue's): the thesis network over 10^6 images (the 2000-image CIFAR-10 sample cycled),
and torchvision's ResNet-18 at 3x224x224 over 50000 images (2000 distinct random uint8 images in
an .npy, cycled; weights: torchvision's random initialisation with perturbed batchnorm
statistics, as bench/zoo_bench.py makes them). Each is run as one process (plain cnnrun) and as
N ranks for every N in NPS that the host has GPUs for: `--batch B --cycle --repeat R --engine gpu`
end to end from the uint8 pixels in host memory to the predictions in host memory. The
throughput is the report's: images over the slowest rank's forward time (each rank's the median
of R runs). The wall column is the whole command (start-up, loading, cuDNN's search, MPI), for
honesty about what a short job pays. Predictions: each run's --predictions file, the top-1
column compared with the one-process run's (every image must agree).

usage: mpi_scaling.py CNNRUN SHARED MPIRUN [--nps 2,4] [--repeats 3] [--work DIR]
Prints ONE table last (also $OUT/mpi_table.md when OUT is set)."""
import argparse
import csv
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from zoo_bench import torchvision_model, write_state  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("cnnrun")
ap.add_argument("shared")
ap.add_argument("mpirun")
ap.add_argument("--nps", default="2,4")
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--work", default="/tmp/mpi_scaling")
ap.add_argument("--jobs", default="thesis,resnet18")
a = ap.parse_args()
os.makedirs(a.work, exist_ok=True)
gpus = torch.cuda.device_count()
nps = [n for n in (int(x) for x in a.nps.split(",")) if n <= gpus]
skipped_nps = [n for n in (int(x) for x in a.nps.split(",")) if n > gpus]

jobs = []
if "thesis" in a.jobs:
    jobs.append(("thesis net, 10^6 images (3x32x32)",
                 [f"{ROOT}/netdefs/cifar10.yaml", "--assets", a.shared, "--batch", "1000000", "--cycle"]))
if "resnet18" in a.jobs:
    w = f"{a.work}/resnet18.safetensors"
    if not os.path.exists(w):
        write_state(w, torchvision_model("resnet18", 1000).state_dict())
    x = f"{a.work}/r224.npy"
    if not os.path.exists(x):
        g = np.random.default_rng(18)
        np.save(x, g.integers(0, 256, size=(2000, 3, 224, 224), dtype=np.uint8))
        np.save(f"{a.work}/r224_labels.npy", g.integers(0, 1000, size=2000, dtype=np.int64))
    jobs.append(("ResNet-18, 50000 images (3x224x224)",
                 [f"{ROOT}/netdefs/torchvision/resnet18.yaml", "--weights", w, "--data",
                  f"{x},{a.work}/r224_labels.npy", "--batch", "50000", "--cycle"]))


def top1(path):
    with open(path) as f:
        return [row["top1"] for row in csv.DictReader(f)]


rows = []
for title, argv in jobs:
    base = None
    for n in [1] + nps:
        tag = f"{a.work}/{len(rows)}"
        cmd = [a.cnnrun] + argv + ["--engine", "gpu", "--repeat", str(a.repeats), "--json", tag + ".json",
                                   "--predictions", tag + ".csv", "--quiet"]
        if n > 1:
            cmd = [a.mpirun, "-np", str(n), "--bind-to", "none"] + cmd
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        if p.returncode != 0:
            rows.append((title, n, None, None, wall, "FAILED: " + p.stderr.strip().splitlines()[-1]))
            continue
        j = json.load(open(tag + ".json"))
        thr = j["throughput_images_per_s"]
        preds = top1(tag + ".csv")
        if n == 1:
            base = (thr, preds)
            same = "reference"
        else:
            diff = sum(x != y for x, y in zip(preds, base[1])) + abs(len(preds) - len(base[1]))
            same = "identical" if diff == 0 else f"{diff} differ"
        per = ", ".join(f"{r['images_per_s']:.0f}" for r in j.get("mpi_ranks", []))
        rows.append((title, n, thr, thr / base[0] if base else None, wall,
                     same + (f"; per rank {per} img/s" if per else "")))
        print(f"{title} np {n}: {thr:.0f} images/s, wall {wall:.1f} s, {same}", flush=True)

dev = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                     text=True).stdout.strip().splitlines()
lines = [f"GPUs: {len(dev)} x {dev[0] if dev else '?'}; repeats {a.repeats}"
         + (f"; not run (too few GPUs): np {skipped_nps}" if skipped_nps else ""),
         "", "| job | ranks (GPUs) | images/s | vs 1 GPU | whole command | predictions |", "|---|---|---|---|---|---|"]
for title, n, thr, ratio, wall, note in rows:
    lines.append(f"| {title} | {n} | {thr:.0f} | {ratio:.2f}x | {wall:.1f} s | {note} |" if thr else
                 f"| {title} | {n} | - | - | {wall:.1f} s | {note} |")
table = "\n".join(lines)
if os.environ.get("OUT"):
    open(os.path.join(os.environ["OUT"], "mpi_table.md"), "w").write(table + "\n")
print(table)
