#!/usr/bin/python3
"""Cross-check of netdefs/torchvision/NETWORK.yaml against torchvision (Debian's python3-torch
1.13 and python3-torchvision 0.14, CPU, float32): the same random weights with perturbed
batchnorm statistics (tools/torchvision_export.py), written as safetensors where the netdef's
weights entry finds them, and the same random uint8 images as a .npy data set. Passes when
every image's outputs agree within 1e-5 relative (max |cnnrun - torch| <= 1e-5 * max |torch|
over the image's 1000 outputs) and every predicted class is identical.

usage: torchvision_crosscheck.py CNNRUN_BINARY SOURCE_DIR NETWORK [--engine cpu|gpu]
                                 [--images N] [--size S]

--size S runs the netdef with its input set to 3 x S x S (the network's layers, weights and
names unchanged; every one of these networks takes any size from 32 up, through its adaptive
pooling) so that CI can afford N images; the default is the netdef's own 224.
Exit 77 (ctest: skipped) when torch or torchvision is missing, or for --engine gpu without a GPU.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    import torchvision  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (install Debian's python3-torchvision)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import torchvision_export  # noqa: E402

TOL = 1e-5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("src")
    ap.add_argument("network", choices=sorted(torchvision_export.NETWORKS))
    ap.add_argument("--engine", default="cpu")
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    a = ap.parse_args()
    torch.set_num_threads(2)

    netdef = os.path.join(a.src, "netdefs", "torchvision", a.network + ".yaml")
    with tempfile.TemporaryDirectory() as tmp:
        text = open(netdef).read()
        if a.size != 224:
            text, n = re.subn(r"input: \{channels: 3, height: 224, width: 224\}",
                              f"input: {{channels: 3, height: {a.size}, width: {a.size}}}", text)
            assert n == 1, "the netdef's input line changed; update this script"
        nd = os.path.join(tmp, a.network + ".yaml")
        open(nd, "w").write(text)
        # The netdef's weights entry (torchvision/NETWORK.safetensors) resolves in --assets tmp.
        os.makedirs(os.path.join(tmp, "torchvision"))
        net = torchvision_export.build(a.network)
        torchvision_export.save_safetensors(net.state_dict(), os.path.join(tmp, "torchvision", a.network + ".safetensors"))
        x = np.random.RandomState(1).randint(0, 256, (a.images, 3, a.size, a.size), dtype=np.uint8)
        np.save(os.path.join(tmp, "images.npy"), x)

        dump = os.path.join(tmp, "out.npy")
        r = subprocess.run([a.binary, nd, "--assets", tmp, "--data", os.path.join(tmp, "images.npy"), "--engine",
                            a.engine, "--dump", dump, "--quiet"], capture_output=True, text=True)
        if r.returncode != 0 and "no usable GPU" in r.stderr:
            print(f"skipped: {r.stderr.strip()}")
            return 77
        if r.returncode != 0:
            print(f"cnnrun failed ({r.returncode}): {r.stderr.strip()}")
            return 1
        ours = np.load(dump).reshape(a.images, -1)

        # The preprocessing cnnrun applies, in float32: x * (1 / (255 std)) + (-mean / std).
        mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
        scale = (1.0 / (255.0 * std)).astype(np.float32).reshape(1, 3, 1, 1)
        shift = (-mean / std).astype(np.float32).reshape(1, 3, 1, 1)
        theirs = []
        with torch.no_grad():
            for i in range(0, a.images, 32):
                t = torch.from_numpy(x[i:i + 32].astype(np.float32) * scale + shift)
                theirs.append(net(t).numpy())
        theirs = np.concatenate(theirs)

    rel = np.abs(ours - theirs).max(axis=1) / np.abs(theirs).max(axis=1)
    same = int((ours.argmax(1) == theirs.argmax(1)).sum())
    ok = ours.shape == theirs.shape and float(rel.max()) <= TOL and same == a.images
    print(f"{a.network} ({a.engine}, {a.images} images of 3x{a.size}x{a.size}): max relative difference "
          f"{rel.max():.2e} (limit {TOL:g}), identical predictions {same}/{a.images}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
