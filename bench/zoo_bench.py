#!/usr/bin/env python3
"""The model-zoo benchmark (issue 13): every zoo network cnnrun can express, on the GPU, at each
--precision, against PyTorch's fastest way to run it at that precision, with the same weights and
the same images, all in one run. Started by bench/zoo_bench.sh (which finds cnnrun, PyTorch and
its cuDNN); prints ONE table last (also $OUT/zoo_table.md) and writes every measurement to
zoo_results.json.

Networks (NETS, default all, in this order): thesis (netdefs/cifar10.yaml, the ConvNetJS weights
from the shared assets when present), fashion (netdefs/fashion-mnist.yaml and its committed
weights), lenet5 (netdefs/lenet5.yaml), and torchvision's resnet18, vgg11_bn, squeezenet1_1,
googlenet, mobilenet_v2, efficientnet_b0, each at every SIZES entry (default "32 224") as RGB
(mobilenet_v3_small too when NETS names it). A network's netdef is the netdefs/**/*.yaml whose
name, without case and punctuation, is the network's (torchvision/resnet18.yaml, vgg11_bn.yaml,
mobilenet-v2.yaml, ...). Whether cnnrun can run it is
found by trying: a CPU probe on a few images; a network without a netdef, or whose probe fails,
gets a "not expressible yet" row with cnnrun's own message.

Weights and images are made here, from fixed seeds: the torchvision models with their own random
initialisation and perturbed batchnorm statistics (running mean/var, weight, bias), written as
safetensors under the netdef's layer names (= torchvision's state_dict keys); random uint8 images
as CIFAR-10 records (3x32x32), IDX (one channel) or .npy (anything else), a few hundred distinct
images cycled to the row's image count on both sides. The input size of a torchvision netdef is
changed by rewriting its `input:` block into a copy (docs/netdef.md: the netdef declares it).

Per (network, input): the probe (cnnrun --engine cpu on PROBE images against the PyTorch model on
the CPU in float32: the "x-check" column, max |difference| over max |value| of the outputs), then
per precision:
- cnnrun: --engine gpu --resident --batch N --cycle --warmup 2 --repeat R --precision P (default
  algorithm choice), --validate --validate-images V: the median forward time of the R runs after
  two warm-up runs, as PyTorch's below (input already on the GPU,
  predictions copied back), its first run's GPU setup (weights, workspaces and the algorithm
  search, where cuDNN's graph API compiles kernels; not in the forward time), the validation's
  max relative error over all layers against the CPU reference at that precision's tolerance,
  the convolution algorithms that ran, and the peak GPU
  memory: nvidia-smi's memory.used sampled every 50 ms during the process, minus its value just
  before (so it includes cnnrun's CUDA context and library handles).
- PyTorch: cudnn.benchmark, input already on the GPU, the median of R runs after two warm-ups
  (CUDA events) of one forward over the N images plus argmax (and softmax where the netdef ends
  in one), for each way: fp32 and tf32 eager NCHW and channels_last; fp16/bf16 as .half() /
  .bfloat16() and as autocast, each NCHW and channels_last; then a CUDA graph of the fastest of
  those; torch.compile of it too (COMPILE: its modes, default "default"; 0: none), weights frozen
  (inductor's freezing: batchnorm folded), static shapes, its compile time (the first call) recorded
  apart from the forward time, its predictions compared with the first eager way's (the share of
  images given the same class: a compile that computed something else would show); a compile
  longer than COMPILE_TIMEOUT seconds (default 300) is a row that says so. The row shows the fastest.
  Its peak GPU memory: the same nvidia-smi sampling during the way that was fastest, plus the size
  of PyTorch's CUDA context and libraries measured when they were first loaded, so that both
  figures are whole-process memory.
Ratio = PyTorch's time / cnnrun's (above 1: cnnrun is faster).

DRY=1 (--dry): the same on the CPU (cnnrun --engine cpu without --resident, PyTorch on the CPU,
tiny image counts, no memory column) to exercise the whole script on a machine without a GPU.

A time budget (BUDGET seconds, default 480) keeps the run inside one device call: what would
start after it is listed as skipped, and the table is printed anyway.
"""
import argparse
import copy
import gc
import glob
import json
import math
import os
import re
import shlex
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
import traceback

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
from report_notes import setup_seconds  # noqa: E402  (this script's own folder)
from pytorch_crosscheck import (read_convnetjs_conv, read_convnetjs_fc, read_safetensors,  # noqa: E402
                                write_safetensors)
from zoo_table import DEFAULT_NETS, NETS, PRECISIONS, header as make_header, table, warmup_note  # noqa: E402


# ---------------------------------------------------------------------------------------------
# The networks.


class Thesis(nn.Module):
    """netdefs/cifar10.yaml: three conv 5x5 + ReLU + max-pool 2 blocks, fc 320 -> 10, softmax."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 20, 5, padding=2)
        self.conv3 = nn.Conv2d(20, 20, 5, padding=2)
        self.fc = nn.Linear(320, 10)

    def forward(self, x):
        for c in (self.conv1, self.conv2, self.conv3):
            x = F.max_pool2d(F.relu(c(x)), 2)
        return F.softmax(self.fc(x.flatten(1)), dim=1)


class Fashion(nn.Module):
    """netdefs/fashion-mnist.yaml."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 12, 5, padding=2)
        self.conv2 = nn.Conv2d(12, 24, 5, padding=2)
        self.fc1 = nn.Linear(24 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return F.softmax(self.fc2(F.relu(self.fc1(x.flatten(1)))), dim=1)


class LeNet5(nn.Module):
    """netdefs/lenet5.yaml: LeCun et al. 1998 on 28x28 (conv1 padded to the paper's 32x32)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.avg_pool2d(torch.tanh(self.conv1(x)), 2)
        x = F.avg_pool2d(torch.tanh(self.conv2(x)), 2)
        x = torch.tanh(self.fc2(torch.tanh(self.fc1(x.flatten(1)))))
        return F.softmax(self.fc3(x), dim=1)


def seed_of(key):
    return sum((i + 1) * ord(c) for i, c in enumerate(key)) % 100003


def torchvision_model(key, classes):
    import torchvision

    kw = {"weights": None, "num_classes": classes}
    if key == "googlenet":
        kw.update(aux_logits=False, init_weights=False, transform_input=False)
    try:
        m = getattr(torchvision.models, key)(**kw)
    except TypeError:  # torchvision before 0.13 spelled weights=None as pretrained=False
        kw.pop("weights")
        m = getattr(torchvision.models, key)(pretrained=False, **kw)
    g = torch.Generator().manual_seed(seed_of(key) + 1)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):  # statistics that make batchnorm do something
                c = mod.num_features
                mod.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                mod.weight.copy_(torch.rand(c, generator=g) + 0.5)
                mod.bias.copy_(torch.randn(c, generator=g) * 0.1)
    return m


def build_model(key, classes, shared):
    """(model in eval mode on the CPU, where its weights came from)."""
    torch.manual_seed(seed_of(key))
    if key == "thesis":
        m = Thesis()
        d = os.path.join(shared, "models", "convnetjs-cifar10") if shared else ""
        if d and os.path.isdir(d):
            with torch.no_grad():
                for layer, f in (("conv1", "layer1_conv.txt"), ("conv2", "layer4_conv.txt"),
                                 ("conv3", "layer7_conv.txt")):
                    w, b = read_convnetjs_conv(os.path.join(d, f))
                    getattr(m, layer).weight.copy_(w)
                    getattr(m, layer).bias.copy_(b)
                w, b = read_convnetjs_fc(os.path.join(d, "layer10_fc.txt"), 20, 4, 4)
                m.fc.weight.copy_(w)
                m.fc.bias.copy_(b)
            src = f"the thesis's ConvNetJS weights ({d})"
        else:
            src = "random weights (no shared/models/convnetjs-cifar10 found)"
    elif key == "fashion":
        m = Fashion()
        path = os.path.join(ROOT, "netdefs", "weights", "fashion-mnist.safetensors")
        m.load_state_dict(read_safetensors(path))
        src = "netdefs/weights/fashion-mnist.safetensors"
    elif key == "lenet5":
        m = LeNet5()
        src = "random weights (PyTorch's default initialisation)"
    else:
        m = torchvision_model(key, classes)
        src = "torchvision's random initialisation, perturbed batchnorm statistics"
    return m.eval(), src


def write_state(path, state):
    """The float tensors of a state_dict as safetensors (num_batches_tracked left out: cnnrun ignores it)."""
    write_safetensors(path, {k: v for k, v in state.items() if v.is_floating_point()})


# ---------------------------------------------------------------------------------------------
# Netdefs: found by name, read for input / classes / preprocess, the input size rewritten.


def norm(name):
    return re.sub(r"[^a-z0-9]", "", name.lower())


def find_netdef(netdefs_dir, want):
    """The netdefs_dir/**/*.yaml named `want` (ignoring case and punctuation), shallowest first."""
    paths = glob.glob(os.path.join(netdefs_dir, "**", "*.yaml"), recursive=True)
    for path in sorted(paths, key=lambda p: (p.count(os.sep), p)):
        if norm(os.path.splitext(os.path.basename(path))[0]) == want:
            return path
    return None


def flow_value(text):
    """A YAML flow value of numbers and plain words ({a: 1, b: [2, 3]}) as Python."""
    s = re.sub(r"#.*", "", text).strip()
    s = re.sub(r"([A-Za-z_][\w-]*)\s*:", r'"\1":', s)
    s = re.sub(r'(?<=[\[,])\s*([A-Za-z_/][^,\]"]*?)\s*(?=[,\]])', r' "\1"', s)
    return json.loads(s)


def top_level(text, key):
    """A top-level key's value: the flow text on its line, or its indented block as a dict."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(rf"^{key}:\s*(.*?)\s*(#.*)?$", line)
        if not m:
            continue
        if m.group(1):
            return m.group(1)
        block = {}
        for nxt in lines[i + 1:]:
            if nxt.strip() == "" or nxt.lstrip().startswith("#"):
                continue
            if not nxt.startswith((" ", "\t")):
                break
            kv = re.match(r"^\s+-\s*(.*)$", nxt)
            if kv:
                block.setdefault("-", []).append(kv.group(1))
                continue
            kv = re.match(r"^\s+([\w-]+):\s*(.*?)\s*(#.*)?$", nxt)
            if kv:
                block[kv.group(1)] = kv.group(2)
        return block
    return None


def parse_netdef(path):
    """input (c, h, w), class count and preprocess (scale[c], shift[c]) of a netdef, with PyYAML
    when it is there (Debian's python3-yaml), else by reading the few top-level keys it needs."""
    text = open(path).read()
    try:
        import yaml

        d = yaml.safe_load(text)
        inp, classes, pre = d["input"], d.get("classes"), d.get("preprocess") or {}
    except ImportError:
        inp = top_level(text, "input")
        inp = flow_value(inp) if isinstance(inp, str) else {k: int(v) for k, v in inp.items()}
        classes = top_level(text, "classes")
        if isinstance(classes, dict):
            classes = classes.get("-", [])
        elif isinstance(classes, str) and classes.startswith("["):
            classes = [c for c in re.split(r",(?=(?:[^\"']*[\"'][^\"']*[\"'])*[^\"']*$)", classes.strip("[] "))
                       if c.strip()]
        pre = top_level(text, "preprocess") or {}
        pre = flow_value(pre) if isinstance(pre, str) else {k: flow_value(v) for k, v in pre.items()}
    c, h, w = int(inp["channels"]), int(inp["height"]), int(inp["width"])
    if isinstance(classes, list):
        count = len(classes)
    elif isinstance(classes, int) or (isinstance(classes, str) and classes.strip().isdigit()):
        count = int(classes)
    elif isinstance(classes, str):  # a file of names, one per line
        f = os.path.join(os.path.dirname(path), classes.strip().strip("\"'"))
        count = sum(1 for line in open(f) if line.strip()) if os.path.isfile(f) else 1000
    else:
        count = 1000

    def per_channel(v, default):
        v = default if v is None else v
        v = v if isinstance(v, list) else [v] * c
        return np.array([float(x) for x in v], dtype=np.float64)

    if "mean" in pre or "std" in pre:
        mean, std = per_channel(pre.get("mean"), 0.0), per_channel(pre.get("std"), 1.0)
        scale, shift = 1.0 / (255.0 * std), -mean / std
    else:
        scale, shift = per_channel(pre.get("scale"), 1.0 / 255.0), per_channel(pre.get("shift"), 0.0)
    return {"input": (c, h, w), "classes": count, "scale": scale.astype(np.float32),
            "shift": shift.astype(np.float32)}


def rewrite_input(text, h, w):
    """The netdef's text with its input height and width set to h, w (flow or block style)."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if re.match(r"^input:\s*\{", line):
            line = re.sub(r"(height:\s*)\d+", rf"\g<1>{h}", line)
            lines[i] = re.sub(r"(width:\s*)\d+", rf"\g<1>{w}", line)
            return "".join(lines)
        if re.match(r"^input:\s*(#.*)?$", line):
            for j in range(i + 1, len(lines)):
                if lines[j].strip() and not lines[j].startswith((" ", "\t")):
                    break
                lines[j] = re.sub(r"^(\s+height:\s*)\d+", rf"\g<1>{h}", lines[j])
                lines[j] = re.sub(r"^(\s+width:\s*)\d+", rf"\g<1>{w}", lines[j])
            return "".join(lines)
    raise ValueError("no top-level 'input:' key")


# ---------------------------------------------------------------------------------------------
# Images: random uint8, in a format cnnrun reads for that shape.


def write_images(work, shape, count, classes):
    """(pixels N x C x H x W uint8, cnnrun's --data argument) for `count` distinct images."""
    c, h, w = shape
    rng = np.random.default_rng(1000 + c * 7 + h * 13 + w)
    px = rng.integers(0, 256, size=(count, c, h, w), dtype=np.uint8)
    labels = rng.integers(0, min(classes, 10), size=count).astype(np.uint8)
    base = os.path.join(work, f"images_{c}x{h}x{w}_{count}")
    if (c, h, w) == (3, 32, 32):
        path = base + ".bin"
        rec = np.concatenate([labels[:, None], px.reshape(count, -1)], axis=1)
        rec.tofile(path)
        return px, path
    if c == 1:
        path = base + "-images-idx3-ubyte"
        with open(path, "wb") as f:
            f.write(struct.pack(">IIII", 0x803, count, h, w))
            f.write(px.tobytes())
        with open(base + "-labels-idx1-ubyte", "wb") as f:
            f.write(struct.pack(">II", 0x801, count))
            f.write(labels.tobytes())
        return px, path
    np.save(base + ".npy", px)
    np.save(base + "_labels.npy", labels.astype("<i8"))
    return px, f"{base}.npy,{base}_labels.npy"


def preprocess(u8, scale, shift):
    """float32 NCHW from uint8 as cnnrun's preprocess: x * scale + shift per channel."""
    s = torch.from_numpy(scale).to(u8.device).view(1, -1, 1, 1)
    t = torch.from_numpy(shift).to(u8.device).view(1, -1, 1, 1)
    return u8.float() * s + t


# ---------------------------------------------------------------------------------------------
# GPU memory: nvidia-smi's memory.used, sampled in the background.


class MemorySampler:
    """gpu: the nvidia-smi index to sample; None: no sampling (ok() is False)."""

    def __init__(self, gpu):
        self.samples = []  # (time, MiB)
        self.lock = threading.Lock()
        self.proc = None
        if gpu is None:
            return
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", gpu,
                 "-lms", "50"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
            return
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.time() + 5
        while time.time() < deadline and not self.samples and self.proc.poll() is None:
            time.sleep(0.05)
        if not self.samples:
            self.close()

    def _read(self):
        for line in self.proc.stdout:
            try:
                v = float(line.strip())
            except ValueError:
                continue
            with self.lock:
                self.samples.append((time.time(), v))
                if len(self.samples) > 100000:
                    del self.samples[:50000]

    def ok(self):
        return self.proc is not None

    def _after(self, t):
        """Waits (at most 2 s) for a sample taken after time t."""
        deadline = time.time() + 2
        while time.time() < deadline:
            with self.lock:
                if self.samples and self.samples[-1][0] > t:
                    return True
            time.sleep(0.01)
        return False

    def now(self):
        """The first sample taken after this call, so that it sees what came before."""
        t = time.time()
        self._after(t)
        with self.lock:
            return self.samples[-1][1] if self.samples else None

    def peak(self, t0, t1):
        """The largest sample from t0 to the first one after t1."""
        self._after(t1)
        with self.lock:
            vs = [v for t, v in self.samples if t >= t0]
        return max(vs) if vs else None

    def close(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
            self.proc = None


# ---------------------------------------------------------------------------------------------
# cnnrun.


def first_error(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower() or line.startswith("cnnrun:"):
            return line[:300]
    return lines[-1][:300] if lines else "no message"


def run_cnnrun(a, args, log, timeout):
    cmd = [a.cnnrun] + args
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc, err = 124, f"cnnrun: timed out after {timeout:.0f} s"
    t1 = time.time()
    with open(log, "w") as f:
        f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + f"\n# exit {rc}, {t1 - t0:.1f} s\n")
        f.write(out)
        f.write(err)
    return rc, out, err, t0, t1


def algo_summary(j):
    """'cudnn 12, implicit 3' for the conv layers (what ran where)."""
    counts = {}
    for layer in j.get("layers", []):
        if layer.get("type") in ("conv", "fc") and layer.get("algo"):
            k = f"{layer['type']}:{layer['algo']}"
            counts[k] = counts.get(k, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def validation_max_rel(v):
    """The largest layer error of a report's validation, NaN where a layer's is not finite (the
    JSON writes a NaN or infinite max_rel as null), None without any."""
    rels = [c["max_rel"] for c in v.get("layers", []) if "max_rel" in c]
    if any(r is None or not math.isfinite(r) for r in rels):
        return float("nan")
    return max(rels) if rels else None


_HAS_WARMUP = {}


def has_warmup(binary):
    """Whether this cnnrun knows --warmup (baselines may be older)."""
    if binary not in _HAS_WARMUP:
        try:
            text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            text = ""
        _HAS_WARMUP[binary] = "--warmup" in text
    return _HAS_WARMUP[binary]


def cnnrun_row(a, netdef, extra, weights, data, n, validate, precision, tag, mem):
    j_path = os.path.join(a.logs, f"cnnrun_{tag}_{precision}.json")
    if os.path.exists(j_path):
        os.remove(j_path)
    # Two warm-up runs, as PyTorch's Timer makes; a binary from before --warmup has none.
    warm = ["--warmup", "2"] if has_warmup(a.cnnrun) else []
    args = [netdef, "--batch", str(n), "--cycle"] + warm + ["--repeat", str(a.repeats), "--precision", precision,
            "--validate", "--validate-images", str(validate), "--weights", weights, "--data", data,
            "--json", j_path, "--quiet"] + extra + shlex.split(a.cnnrun_args)
    args += ["--engine", "cpu"] if a.dry else ["--engine", "gpu", "--resident"]
    base = mem.now() if mem.ok() else None
    rc, out, err, t0, t1 = run_cnnrun(a, args, os.path.join(a.logs, f"cnnrun_{tag}_{precision}.log"),
                                      a.timeout())
    row = {"rc": rc, "wall_s": round(t1 - t0, 2), "warmup": 2 if warm else 0}
    if rc not in (0, 3) or not os.path.exists(j_path):
        row["error"] = first_error(err + "\n" + out)
        return row
    j = json.load(open(j_path))
    times = next((x for x in j.get("notes", []) if x.startswith("--repeat")), "")
    ts = [float(v) for v in times.split("(ms)")[1].split(";")[0].split()] if "(ms)" in times else []
    v = j.get("validation", {})
    row.update({
        "median_ms": j["times"]["forward_s"] * 1e3, "min_ms": min(ts) if ts else None,
        "max_ms": max(ts) if ts else None, "runs": len(ts), "images": j.get("images"),
        "validate_max_rel": validation_max_rel(v), "validate_pass": bool(v.get("pass")),
        "validate_tolerance": v.get("tolerance"), "validate_images": v.get("images"),
        "algos": algo_summary(j), "version": j.get("cnnrun_version"),
        "resident": any("input resident on GPU" in x for x in j.get("notes", [])),
        "gpu_note": next((x for x in j.get("notes", []) if x.startswith("gpu:")), None),
        "setup_s": setup_seconds(j.get("notes", [])),
        "flops_per_s": j.get("flops_per_s"),
    })
    if base is not None:
        p = mem.peak(t0, t1)
        row["peak_mib"] = p - base if p is not None else None
    return row


# ---------------------------------------------------------------------------------------------
# PyTorch.


class Timer:
    def __init__(self, cuda):
        self.cuda = cuda

    def __call__(self, fn, repeats):
        fn()
        fn()
        self.sync()
        times = []
        for _ in range(repeats):
            if self.cuda:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return times

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


def set_tf32(on):
    torch.backends.cudnn.allow_tf32 = on
    torch.backends.cuda.matmul.allow_tf32 = on


def ways(precision):
    """(name, weight dtype, channels_last, autocast dtype) of each eager way at a precision."""
    if precision in ("fp32", "tf32"):
        return [(f"eager {precision} NCHW", torch.float32, False, None),
                (f"eager {precision} channels_last", torch.float32, True, None)]
    dt = torch.float16 if precision == "fp16" else torch.bfloat16
    cast = ".half()" if precision == "fp16" else ".bfloat16()"
    return [(f"{cast} NCHW", dt, False, None), (f"{cast} channels_last", dt, True, None),
            (f"autocast {precision} NCHW", torch.float32, False, dt),
            (f"autocast {precision} channels_last", torch.float32, True, dt)]


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile_modes(text):
    """--compile's list of modes; "1" is default, "0" or "none" none. The default mode compiles in
    seconds; max-autotune (autotuned kernels, CUDA graphs) takes minutes a network and is not always
    faster (docs/performance.md, Session 29)."""
    modes = [m for m in re.split(r"[,\s]+", text.strip()) if m and m not in ("0", "none")]
    modes = ["default" if m == "1" else m for m in modes]
    bad = [m for m in modes if m not in COMPILE_MODES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown torch.compile mode {bad[0]!r} (one of {', '.join(COMPILE_MODES)}, or 1)")
    return modes


class time_limit:
    """Raises TimeoutError(message) in the main thread after `seconds` (SIGALRM): a torch.compile
    that takes longer than is reasonable becomes a row that says so, not the end of the run."""

    def __init__(self, seconds, message):
        self.seconds, self.message = seconds, message

    def _expired(self, signum, frame):
        raise TimeoutError(self.message)

    def __enter__(self):
        self.old = signal.signal(signal.SIGALRM, self._expired)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)
        return False


def compile_model(m, mode):
    """torch.compile for inference: weights frozen into the graph (batchnorm folded into the
    convolutions, constant layouts), static shapes; what PyTorch's own inference benchmarks use."""
    if not hasattr(torch, "compile"):
        raise RuntimeError(f"torch {torch.__version__} has no torch.compile")
    import torch._inductor.config as inductor_config
    inductor_config.freezing = True
    return torch.compile(m, mode=mode, dynamic=False)


def agreement(a, b):
    """The fraction of images whose predicted class is the same in `a` and `b` (1-D tensors)."""
    if a.shape != b.shape or a.numel() == 0:
        return 0.0
    return float((a == b).float().mean())


def is_oom(e):
    return "out of memory" in str(e).lower()


def torch_rows(a, model, x32, precisions, softmax, mem, torch_ctx_mib):
    """{precision: {"best": way, "ways": [...]}} for one network and input."""
    dev = x32.device
    cuda = dev.type == "cuda"
    timer = Timer(cuda)
    n = x32.shape[0]
    results = {}

    def release():
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()

    for p in precisions:
        if a.over_budget():
            results[p] = {"skipped": "over the time budget"}
            continue
        set_tf32(p == "tf32")
        rows = []
        best = None
        ref = {"preds": None, "way": None}  # the first eager way's predictions

        def measure(name, dtype, cl, cast, kind="eager", mode=None):
            nonlocal best
            chunk = n
            while True:
                m = x = g = chunks = out = None
                try:
                    if cast == torch.float16 and not cuda:
                        raise RuntimeError("PyTorch's CPU autocast has no float16")
                    release()
                    mf = torch.channels_last if cl else torch.contiguous_format
                    x = x32.to(dtype).contiguous(memory_format=mf)
                    base = mem.now() if mem.ok() else None  # the input is not counted, as cnnrun's copies are
                    if cuda:
                        torch.cuda.reset_peak_memory_stats()
                    m = copy.deepcopy(model).to(device=dev, dtype=dtype).to(memory_format=mf).eval()
                    m.requires_grad_(False)
                    chunks = [x[i:i + chunk] for i in range(0, n, chunk)]
                    out = {}

                    def fwd():
                        preds = []
                        # autocast's cast-weight cache must be off inside a CUDA graph capture
                        with torch.autocast(dev.type, dtype=cast, enabled=cast is not None,
                                            cache_enabled=kind != "graph"):
                            for c in chunks:
                                y = m(c)
                                if softmax:
                                    y = torch.softmax(y, dim=1)
                                preds.append(y.argmax(1))
                        out["preds"] = preds

                    compile_s = None
                    if kind == "compile":
                        m = compile_model(m, mode)
                        c0 = time.time()
                        with time_limit(a.compile_timeout, f"did not compile in {a.compile_timeout:.0f} s"):
                            fwd()  # the compile (and max-autotune's search), outside the timed runs
                            timer.sync()
                        compile_s = time.time() - c0
                    t0 = time.time()
                    if kind == "graph":
                        s = torch.cuda.Stream()
                        s.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(s):
                            fwd()
                            fwd()
                        torch.cuda.current_stream().wait_stream(s)
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g):
                            fwd()
                        times = timer(g.replay, a.repeats)
                    else:
                        times = timer(fwd, a.repeats)
                    t1 = time.time()
                    row = {"way": name + ("" if chunk == n else f" (chunks of {chunk})"), "kind": kind,
                           "median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
                           "runs": len(times), "dtype": str(dtype), "channels_last": cl,
                           "autocast": str(cast) if cast else None}
                    if compile_s is not None:
                        row["compile_s"] = round(compile_s, 1)
                    if kind == "eager" and ref["preds"] is None:
                        ref["preds"], ref["way"] = torch.cat(out["preds"]).cpu(), name
                    elif kind == "compile" and ref["preds"] is not None:  # the same classes as eager?
                        row["agree_with"] = ref["way"]
                        row["agree"] = agreement(torch.cat(out["preds"]).cpu(), ref["preds"])
                    if cuda:
                        row["allocator_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
                    if base is not None:
                        pk = mem.peak(t0, t1)
                        row["peak_mib"] = pk - base + torch_ctx_mib if pk is not None else None
                    rows.append(row)
                    if best is None or row["median_ms"] < best[0]["median_ms"]:
                        best = (row, (name, dtype, cl, cast))
                    return
                except Exception as e:  # noqa: BLE001 (a way that fails is a row, not the end)
                    if cuda and is_oom(e) and chunk > max(1, n // 64):
                        chunk = (chunk + 1) // 2
                        continue
                    rows.append({"way": name, "kind": kind, "error": str(e).strip().splitlines()[0][:200]
                                 if str(e).strip() else type(e).__name__})
                    return
                finally:
                    del m, x, g, chunks, out
                    if kind == "compile" and hasattr(torch, "compile"):
                        torch._dynamo.reset()  # frees the compiled graphs and their CUDA graph pools
                    release()

        with torch.inference_mode():
            for name, dtype, cl, cast in ways(p):
                if a.over_budget():
                    rows.append({"way": name, "error": "skipped: over the time budget"})
                    continue
                measure(name, dtype, cl, cast)
            eager = best[1] if best is not None else None  # the CUDA graph and torch.compile start from it
            # A way not run for the budget is a row that says so (the table then marks the ratio
            # as a bound).
            if eager is not None and cuda:
                name, dtype, cl, cast = eager
                if a.over_budget():
                    rows.append({"way": f"CUDA graph of {name}", "error": "skipped: over the time budget"})
                else:
                    measure(f"CUDA graph of {name}", dtype, cl, cast, kind="graph")
        if eager is not None and a.compile:
            name, dtype, cl, cast = eager
            for mode in a.compile:
                if a.over_budget():
                    rows.append({"way": f"torch.compile {mode} of {name}", "error": "skipped: over the time budget"})
                    continue
                with torch.no_grad():
                    measure(f"torch.compile {mode} of {name}", dtype, cl, cast, kind="compile", mode=mode)
        results[p] = {"best": best[0] if best else None, "ways": rows}
    set_tf32(False)
    return results


def compile_note(modes):
    if not modes:
        return ""
    return (f", and torch.compile ({', '.join(modes)}; freezing, static shapes) of that fastest eager way, "
            "its compile time not in the forward time")


def torch_context_mib(mem, dev):
    """What loading PyTorch's CUDA context, cuBLAS and cuDNN took, by the same nvidia-smi samples."""
    if not mem.ok():
        return 0.0
    before = mem.now()
    x = torch.randn(8, 3, 32, 32, device=dev)
    F.conv2d(x, torch.randn(4, 3, 3, 3, device=dev)).sum().item()
    (x.flatten(1) @ torch.randn(3072, 4, device=dev)).sum().item()
    del x
    torch.cuda.empty_cache()
    after = mem.now()
    return max(0.0, after - before) if before is not None and after is not None else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cnnrun", required=True)
    ap.add_argument("--netdefs", default=os.path.join(ROOT, "netdefs"))
    ap.add_argument("--shared", default="", help="the shared assets (models/convnetjs-cifar10)")
    ap.add_argument("--work", default="/tmp/zoo_bench", help="generated weights and images")
    ap.add_argument("--logs", default="", help="logs and JSON (default WORK/logs)")
    ap.add_argument("--out", default="", help="also write the table and results here")
    ap.add_argument("--nets", default="")
    ap.add_argument("--sizes", default="32 224")
    ap.add_argument("--precisions", default=" ".join(PRECISIONS))
    ap.add_argument("--images", default="", help="native:N,32:N,224:N... (images per row)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--budget", type=float, default=480.0, help="seconds; later rows are skipped")
    ap.add_argument("--compile", type=compile_modes, default=["default"],
                    help="torch.compile of the fastest eager way in these modes too (comma-separated, "
                         "default: default; 0 or none: no torch.compile)")
    ap.add_argument("--compile-timeout", type=float, default=300.0,
                    help="seconds a torch.compile (its first call) may take; longer is a row that says so")
    ap.add_argument("--dry", action="store_true", help="on the CPU, tiny image counts")
    ap.add_argument("--commit", default="")
    ap.add_argument("--baseline", default="",
                    help="a second cnnrun binary (an earlier commit's) timed on every row too, for before/after")
    ap.add_argument("--baseline-args", default="",
                    help="more cnnrun options for the baseline rows only, e.g. '--gpu-off stemrows'; without "
                         "--baseline the baseline is this cnnrun with them (a switch's before/after in one run)")
    ap.add_argument("--cnnrun-args", default="", help="more cnnrun options for the timed rows, e.g. '--streams 2'")
    a = ap.parse_args()
    if a.baseline_args and not a.baseline:
        a.baseline = a.cnnrun
    start = time.time()
    if a.repeats < 5:
        ap.error("--repeats must be at least 5 (the medians of fewer runs say little)")
    keys = [k for k, *_ in NETS]
    chosen = a.nets.replace(",", " ").split() or [k for k, *_ in DEFAULT_NETS]
    for k in chosen:
        if k not in keys:
            ap.error(f"--nets: unknown network '{k}' (known: {' '.join(keys)})")
    sizes = [int(s) for s in a.sizes.replace(",", " ").split()]
    precisions = a.precisions.replace(",", " ").split()
    for p in precisions:
        if p not in PRECISIONS:
            ap.error(f"--precisions: unknown precision '{p}' (known: {' '.join(PRECISIONS)})")
    images = {"native": 50000, "small": 10000, "large": 1000} if not a.dry else \
        {"native": 64, "small": 16, "large": 2}
    distinct_cap = {"native": 2000, "small": 2000, "large": 256}
    # --validate-images: the CPU reference runs these too, on every --precision row
    validate = {"native": 256, "small": 32, "large": 4} if not a.dry else {"native": 4, "small": 2, "large": 1}
    for item in a.images.replace(",", " ").split():
        k, _, v = item.partition(":")
        images[{"32": "small", "224": "large"}.get(k, k)] = int(v)

    def size_class(shape):
        return "small" if shape[1] * shape[2] <= 64 * 64 else "large"

    a.logs = a.logs or os.path.join(a.work, "logs")
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.logs, exist_ok=True)
    a.over_budget = lambda: time.time() - start > a.budget
    a.timeout = lambda: max(60.0, min(300.0, a.budget - (time.time() - start) + 60.0))

    cuda = not a.dry and torch.cuda.is_available()
    if not a.dry and not cuda:
        sys.exit("zoo_bench: PyTorch sees no CUDA device (use DRY=1 for the CPU dry run)")
    dev = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.backends.cudnn.benchmark = True
    set_tf32(False)
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    mem = MemorySampler(gpu if cuda else None)
    ctx = torch_context_mib(mem, dev) if cuda else 0.0

    rows, results = [], []
    cache_images = {}
    def say(msg):
        print(f"[{time.time() - start:6.1f} s] {msg}", flush=True)

    def bench_net(key, title, nd_key, tv):
        """The rows of one network (appended to rows and results)."""
        netdef = find_netdef(a.netdefs, nd_key)
        if netdef is None:
            rows.append({"title": title, "input": "-", "unavailable":
                         f"not expressible yet: no netdef ({os.path.basename(a.netdefs)}/**/{key}.yaml or "
                         "the same name spelt with _ or -) in this checkout"})
            return
        if a.over_budget():
            rows.append({"title": title, "input": "-", "unavailable": "skipped: over the time budget"})
            return
        try:
            info = parse_netdef(netdef)
        except Exception as e:  # noqa: BLE001
            rows.append({"title": title, "input": "-", "unavailable": f"cannot read {netdef}: {e}"})
            return
        model, wsrc = build_model(key, info["classes"], a.shared)
        weights = os.path.join(a.work, f"{key}.safetensors")
        write_state(weights, model.state_dict())
        c = info["input"][0]
        shapes = [info["input"]] if not tv else [(c, s, s) for s in sizes]
        for shape in shapes:
            label = f"{shape[0]}x{shape[1]}x{shape[2]}"
            cls = "native" if not tv else size_class(shape)
            n = images[cls]
            d = min(n, distinct_cap[cls])
            tag = f"{key}_{shape[1]}"
            if a.over_budget():
                rows.append({"title": title, "input": label, "unavailable": "skipped: over the time budget"})
                continue
            nd, extra = netdef, []
            if shape != info["input"]:
                nd = os.path.join(a.work, f"{key}_{shape[1]}x{shape[2]}.yaml")
                with open(nd, "w") as f:
                    f.write(rewrite_input(open(netdef).read(), shape[1], shape[2]))
                extra = ["--assets", os.path.dirname(os.path.abspath(netdef))]
            if (shape, d) not in cache_images:
                cache_images[(shape, d)] = write_images(a.work, shape, d, info["classes"])
            px, data = cache_images[(shape, d)]

            # The probe: can cnnrun run it at all, and does it compute what PyTorch computes?
            k = min(d, 2 if shape[1] * shape[2] > 64 * 64 else 8)
            probe = os.path.join(a.logs, f"probe_{tag}.npy")
            rc, out, err, _, _ = run_cnnrun(a, [nd, "--engine", "cpu", "--batch", str(k), "--weights", weights,
                                                "--data", data, "--dump", probe, "--quiet"] + extra,
                                            os.path.join(a.logs, f"probe_{tag}.log"), a.timeout())
            if rc != 0:
                why = first_error(err + "\n" + out)
                rows.append({"title": title, "input": label, "unavailable": f"not expressible yet: {why}"})
                say(f"{key} {label}: not expressible yet: {why}")
                results.append({"net": key, "input": label, "netdef": netdef, "probe_rc": rc, "probe_error": why})
                continue
            ours = np.load(probe)
            with torch.no_grad():
                theirs = model(preprocess(torch.from_numpy(px[:k]), info["scale"], info["shift"])).numpy()
            probs = bool((ours >= 0).all() and np.allclose(ours.sum(1), 1.0, atol=1e-4))
            softmax = tv and probs
            if softmax:
                theirs = torch.softmax(torch.from_numpy(theirs), 1).numpy()
            xcheck = float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-30)) \
                if ours.shape == theirs.shape else float("nan")

            cn = {}
            for p in precisions:
                if a.over_budget():
                    cn[p] = {"skipped": "skipped: over the time budget"}
                    continue
                cn[p] = cnnrun_row(a, nd, extra, weights, data, n, min(d, validate[cls]), p, tag, mem)
                if a.baseline:  # the same row on the earlier binary, right after
                    base = argparse.Namespace(**{**vars(a), "cnnrun": a.baseline,
                                                 "cnnrun_args": f"{a.cnnrun_args} {a.baseline_args}".strip()})
                    cn[p]["baseline"] = cnnrun_row(base, nd, extra, weights, data, n, min(d, validate[cls]), p,
                                                   tag + "_baseline", mem)
                r = cn[p]
                say(f"{key} {label} {p}: cnnrun " + (f"{r['median_ms']:.2f} ms" if "median_ms" in r else
                                                     f"failed: {r.get('error')}") + f" ({r['wall_s']} s)")
            tr = {}
            if not a.over_budget():
                idx = np.arange(n) % d
                x32 = preprocess(torch.from_numpy(px[idx]).to(dev), info["scale"], info["shift"])
                t_torch = time.time()
                tr = torch_rows(a, model, x32, precisions, softmax, mem, ctx)
                say(f"{key} {label}: PyTorch " + ", ".join(
                    f"{p} {v['best']['median_ms']:.2f} ms" if v.get("best") else f"{p} -" for p, v in tr.items()) +
                    f" ({time.time() - t_torch:.1f} s)")
                for p, v in tr.items():
                    for w in v.get("ways", []):
                        if w.get("way", "").startswith("torch.compile"):  # timed, failed or skipped
                            say(f"{key} {label} {p}: {w['way']}: " + (
                                f"{w['median_ms']:.2f} ms, compiled in {w.get('compile_s')} s, the same class as "
                                f"{w.get('agree_with')} for {100 * w.get('agree', 0):.2f} % of the images"
                                if "median_ms" in w
                                else f"failed: {w.get('error')}"))
                del x32
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
            for p in precisions:
                rows.append({"title": title, "input": label, "images": n, "precision": p, "cnnrun": cn[p],
                             "torch": tr.get(p, {"skipped": "skipped: over the time budget"}), "xcheck": xcheck})
            results.append({"net": key, "input": label, "netdef": netdef, "weights": wsrc, "images": n,
                            "distinct_images": d, "softmax_in_netdef": probs, "xcheck_images": k,
                            "xcheck_max_rel": xcheck, "cnnrun": cn, "torch": tr})
        del model
        gc.collect()

    for key, title, nd_key, tv in NETS:
        if key not in chosen:
            continue
        try:
            bench_net(key, title, nd_key, tv)
        except Exception as e:  # noqa: BLE001 (one network's surprise must not cost the table)
            rows.append({"title": title, "input": "-", "unavailable": f"bench error: {type(e).__name__}: {str(e)[:200]}"})
            results.append({"net": key, "bench_error": traceback.format_exc()})
            print(traceback.format_exc(), file=sys.stderr)
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
    sampled = mem.ok()
    mem.close()

    # Header and notes.
    dev_name, driver = "CPU (dry run)", ""
    if cuda:
        dev_name = torch.cuda.get_device_name(0)
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", gpu],
                                    capture_output=True, text=True).stdout.strip()
        except OSError:
            pass
    version = next((c.get("version") for r in rows for c in [r.get("cnnrun", {})] if c.get("version")), "?")
    cudnn_note = next((c.get("gpu_note") for r in rows for c in [r.get("cnnrun", {})] if c.get("gpu_note")), None)
    commit = a.commit or "unknown (set COMMIT=)"
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = make_header(f"{dev_name}{', driver ' + driver if driver else ''}", date, version, commit,
                         f"PyTorch {torch.__version__}"
                         f"{', cuDNN ' + str(torch.backends.cudnn.version()) if cuda else ''}")
    where = "on the CPU (dry run: cnnrun --engine cpu)" if a.dry else "input already on the GPU (cnnrun `--resident`)"
    warm_note = warmup_note({2 if has_warmup(a.cnnrun) else 0})
    if a.baseline and not has_warmup(a.baseline):
        warm_note += "; the baseline's include its first run (no --warmup)"
    notes = [f"Medians of {a.repeats} runs {warm_note}; {where}, cnnrun's default algorithm "
             "choice; ratio = PyTorch / cnnrun (above 1: cnnrun faster). PyTorch's fastest way at each "
             "precision of eager NCHW / channels_last, `.half()`/`.bfloat16()` / autocast, and a CUDA graph of the "
             f"fastest{compile_note(a.compile)}; fp32 with TF32 off."]
    if a.cnnrun_args:
        notes.append(f"cnnrun's timed rows also had `{a.cnnrun_args}`.")
    if a.baseline_args:
        same = " (the same binary)" if a.baseline == a.cnnrun else ""
        notes.append(f"The baseline rows{same} also had `{a.baseline_args}`.")
    if cudnn_note:
        notes.append(f"cnnrun's {cudnn_note}")
    if cuda and not sampled:
        notes.append("Peak GPU memory: not measured (nvidia-smi could not be started or printed nothing).")
    if sampled:
        notes.append("Peak GPU memory: nvidia-smi memory.used sampled every 50 ms, minus the value before the run; "
                     f"PyTorch's plus its CUDA context and libraries ({ctx:.0f} MiB), so both are whole-process; "
                     "PyTorch's input tensor is not counted, cnnrun's resident uint8 images are.")
    notes.append("cnnrun TFLOP/s: twice the netdef's conv and fc multiply-adds an image (as torchvision's "
                 "documentation counts them) times the images, over cnnrun's forward time; beside the GPU's "
                 "dense tensor-core rate (an H100/H200: about 495 TF32, 989 FP16/BF16) it says how much of it "
                 "the whole forward used.")
    notes.append("x-check: cnnrun's CPU engine against the same PyTorch model on the CPU in fp32 on the first "
                 "few images (max |diff| / max |value| of the outputs): the same weights and images on both sides.")
    notes.append(f"Whole run {time.time() - start:.0f} s (budget {a.budget:.0f} s); logs in {a.logs}.")
    a.notes_text = "\n".join(f"- {x}" for x in notes)
    t = table(a, rows, header)
    print("\n" + t)
    for d in [a.logs] + ([a.out] if a.out else []):
        with open(os.path.join(d, "zoo_table.md"), "w") as f:
            f.write(t + "\n")
        with open(os.path.join(d, "zoo_results.json"), "w") as f:
            json.dump({"header": header, "args": {k: v for k, v in vars(a).items() if not callable(v)},
                       "torch_context_mib": ctx, "results": results}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
