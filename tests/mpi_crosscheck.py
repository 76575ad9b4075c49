#!/usr/bin/env python3
"""mpirun -np N cnnrun against one process: the same --dump bytes, the same --predictions file,
the same counts, per-class figures and confusion matrix (issue 18's promise: results as if one
process had run). Cases: the CIFAR-10 sample (whole; a --batch; cycled past its end, so that a
shard wraps), a uint8 .npy with labels, Fashion-MNIST's gzip IDX files, and an image folder
(the predictions file's paths and indices); --validate on every rank; and an error on one rank
(a bad label in its shard only), which stops every rank with that rank's message, once.

usage: mpi_crosscheck.py CNNRUN SRC SHARED [--engine cpu|gpu] [--np 2,3] [--big]
Exit 77 (skipped) without mpirun, or with --engine gpu and no GPU."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("cnnrun")
ap.add_argument("src")
ap.add_argument("shared")
ap.add_argument("--engine", default="cpu")
ap.add_argument("--np", default="2,3")
ap.add_argument("--mpirun", default=shutil.which("mpirun") or "")
args = ap.parse_args()

if not args.mpirun:
    print("SKIP: no mpirun (Debian's openmpi-bin)")
    sys.exit(77)
env = dict(os.environ)
# CI runs as root, on 2 cores, for 3 ranks.
env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
if args.engine == "gpu":
    probe = subprocess.run([args.cnnrun, f"{args.src}/netdefs/cifar10.yaml", "--assets", args.shared,
                            "--engine", "gpu", "--batch", "1", "--quiet"], capture_output=True, text=True)
    if probe.returncode != 0:
        print("SKIP: no usable GPU:", probe.stderr.strip())
        sys.exit(77)

tmp = tempfile.mkdtemp(prefix="cnnrun-mpi-")
failures = []
SCORE_KEYS = ["images", "correct", "accuracy_percent", "top_k", "per_class", "confusion_matrix", "labelled",
              "distinct_images"]


def run(ranks, argv, tag):
    """Runs cnnrun (under mpirun for ranks > 1) with --dump/--predictions/--json into tmp."""
    out = {k: f"{tmp}/{tag}-{ranks}.{ext}" for k, ext in [("dump", "npy"), ("pred", "csv"), ("json", "json")]}
    cmd = [args.cnnrun] + argv + ["--engine", args.engine, "--dump", out["dump"], "--predictions", out["pred"],
                                  "--json", out["json"], "--quiet"]
    if ranks > 1:
        cmd = [args.mpirun, "-np", str(ranks)] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    return out, p.stdout


def check(tag, argv, ranks_list, cut=None):
    one, text1 = run(1, argv, tag)
    j1 = json.load(open(one["json"]))
    for ranks in ranks_list:
        many, text = run(ranks, argv, tag)
        jn = json.load(open(many["json"]))
        problems = []
        if args.engine == "cpu":  # the CPU reference: the same bits
            if open(one["dump"], "rb").read() != open(many["dump"], "rb").read():
                a, b = np.load(one["dump"]), np.load(many["dump"])
                problems.append(f"--dump differs ({a.shape} vs {b.shape}, max diff "
                                f"{np.abs(a - b).max() if a.shape == b.shape else 'n/a'})")
            if open(one["pred"], "rb").read() != open(many["pred"], "rb").read():
                problems.append("--predictions differs")
        else:  # each GPU measures its own algorithm choice for its block: FP32-close, same predictions
            a, b = np.load(one["dump"]), np.load(many["dump"])
            if a.shape != b.shape or not np.allclose(a, b, rtol=1e-4, atol=1e-6):
                problems.append(f"--dump differs beyond FP32 tolerance ({a.shape} vs {b.shape})")
            key = lambda path: [l.split(",")[:4] for l in open(path).read().splitlines()]  # noqa: E731
            if key(one["pred"]) != key(many["pred"]):
                problems.append("--predictions: index, path, label or top-1 differs")
        for k in SCORE_KEYS:
            if j1.get(k) != jn.get(k):
                problems.append(f"json {k}: {j1.get(k)} vs {jn.get(k)}")
        if text1 != text:
            problems.append(f"accuracy line: {text1.strip()!r} vs {text.strip()!r}")
        parts = jn.get("mpi_ranks", [])
        if len(parts) != ranks or sum(p["images"] for p in parts) != j1["images"] or \
                [p["first_image"] for p in parts] != [sum(q["images"] for q in parts[:i]) for i in range(ranks)]:
            problems.append(f"mpi_ranks: {parts}")
        if cut:  # rank 0's data description: it read its shard only
            want = f"(the first {-(-cut // ranks)} read)"
            if want not in jn["data"]:
                problems.append(f"rank 0 read more than its shard: {jn['data']!r} lacks {want!r}")
        status = "ok" if not problems else "FAIL: " + "; ".join(problems)
        print(f"{tag:28s} np {ranks}: {j1['images']} images, {j1.get('accuracy_percent', '-')} % -> {status}")
        if problems:
            failures.append(f"{tag} np {ranks}")


nps = [int(x) for x in args.np.split(",")]
cifar = [f"{args.src}/netdefs/cifar10.yaml", "--assets", args.shared]
sample = f"{args.shared}/data/cifar10-sample/train_2000.bin"
check("cifar10 sample", cifar, nps, cut=2000)
check("cifar10 --batch 1201", cifar + ["--batch", "1201"], nps)
check("cifar10 cycled to 5003", cifar + ["--batch", "5003", "--cycle"], nps)

# A uint8 .npy (channels last) with labels, from the sample's records.
rec = np.fromfile(sample, dtype=np.uint8).reshape(-1, 3073)[:700]
np.save(f"{tmp}/x.npy", rec[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy())
np.save(f"{tmp}/y.npy", rec[:, 0].astype(np.int64))
check("npy (channels last)", cifar + ["--data", f"{tmp}/x.npy,{tmp}/y.npy"], nps)

fm = "/usr/share/datasets/fashion-mnist"
if os.path.exists(f"{fm}/t10k-images-idx3-ubyte.gz"):
    check("fashion-mnist gzip idx", [f"{args.src}/netdefs/fashion-mnist.yaml", "--batch", "3001",
                                     "--data", f"{fm}/t10k-images-idx3-ubyte.gz,{fm}/t10k-labels-idx1-ubyte.gz"], nps)
else:
    print("fashion-mnist gzip idx: skipped (no dataset-fashion-mnist)")

# An image folder in class folders (PNG, from the sample's pixels).
try:
    from PIL import Image
    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    for i, r in enumerate(rec[:97]):
        d = f"{tmp}/folder/{classes[r[0]]}"
        os.makedirs(d, exist_ok=True)
        Image.fromarray(r[1:].reshape(3, 32, 32).transpose(1, 2, 0)).save(f"{d}/img{i:03d}.png")
    check("image folder", cifar + ["--data", f"{tmp}/folder", "--data-format", "images"], nps)
except ImportError:
    print("image folder: skipped (no Pillow)")

# --validate on every rank: the merged validation covers every rank's images.
for ranks in nps:
    cmd = [args.mpirun, "-np", str(ranks), args.cnnrun] + cifar + [
        "--batch", "300", "--engine", args.engine, "--validate", "--json", f"{tmp}/v.json", "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    v = json.load(open(f"{tmp}/v.json")).get("validation", {}) if p.returncode == 0 else {}
    ok = p.returncode == 0 and v.get("images") == 300 and v.get("pass") is True
    print(f"{'--validate on every rank':28s} np {ranks}: exit {p.returncode}, {v.get('images')} images validated "
          f"-> {'ok' if ok else 'FAIL: ' + p.stderr.strip()}")
    if not ok:
        failures.append(f"validate np {ranks}")

# An error on one rank only: a label out of range in the last image, which only the last rank reads.
bad = rec.copy()
bad[-1, 0] = 200
bad.tofile(f"{tmp}/bad.bin")
for ranks in nps:
    cmd = [args.mpirun, "-np", str(ranks), args.cnnrun] + cifar + [
        "--data", f"{tmp}/bad.bin", "--engine", args.engine, "--quiet", "--json", f"{tmp}/never.json"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [l for l in p.stderr.splitlines() if l.startswith("cnnrun:")]
    want = f"cnnrun: rank {ranks - 1} of {ranks} ("
    ok = p.returncode != 0 and len(lines) == 1 and lines[0].startswith(want) and "label 200 of record 699" in lines[0] \
        and not os.path.exists(f"{tmp}/never.json")
    print(f"{'an error on the last rank':28s} np {ranks}: exit {p.returncode}, {lines} -> {'ok' if ok else 'FAIL'}")
    if not ok:
        failures.append(f"error np {ranks}")

shutil.rmtree(tmp, ignore_errors=True)
if failures:
    print("FAILED:", ", ".join(failures))
    sys.exit(1)
print("mpi crosscheck: every case identical to one process")
