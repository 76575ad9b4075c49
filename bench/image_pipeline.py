#!/usr/bin/python3
"""Image-folder throughput: cnnrun's decoding pipeline against Pillow + torchvision's
DataLoader on the same JPEG folder, and (on a GPU host) cnnrun's end-to-end images per second
from the JPEG files to predictions. A benchmark, not a test: it prints a table, asserts nothing.

The folder: N JPEG files made from the CIFAR-10 test sample's photographs, enlarged by Pillow to
500x375 (ImageNet's typical size) and saved at quality 90, in 10 class folders. Both sides do the
same work per image: decode, convert to RGB, Resize(256) (antialiased bilinear), CenterCrop(224),
then normalise to float (torchvision: ToTensor + Normalize; cnnrun: the network's preprocess).

  decode rows: cnnrun on a network whose work is negligible (global average pool + fc 10), so
               the pipeline rate is the decoding rate; --decode-threads T.
               torchvision: ImageFolder + DataLoader(num_workers=T, batch_size=64), iterated
               to the end.
  end to end:  cnnrun --engine ENGINE on a 1000-class network (NETDEF, default the residual
               network of tests/image_crosscheck.py with random weights): the report's
               "Pipeline" images/s, files to predictions.

    /usr/bin/python3 bench/image_pipeline.py build/cnnrun ../shared --images 2000 --threads 2
    /usr/bin/python3 bench/image_pipeline.py build-gpu/cnnrun ../shared --images 20000 --threads 16 --engine gpu
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import image_crosscheck  # noqa: E402  (the crosscheck's network and safetensors writer)

TINY = """name: decode-only
input: {channels: 3, height: 224, width: 224}
preprocess: {resize: 256, crop: 224, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}
classes: 10
weights: {format: safetensors, path: tiny.safetensors}
layers:
  - {name: gap, type: avgpool, global: true}
  - {name: fc, type: fc, outputs: 10}
"""


def make_folder(shared, out, n):
    recs = np.fromfile(os.path.join(shared, "data/cifar10-sample/test_1000.bin"), np.uint8).reshape(-1, 3073)
    for i in range(n):
        r = recs[i % len(recs)]
        d = os.path.join(out, str(int(r[0])))
        os.makedirs(d, exist_ok=True)
        img = Image.fromarray(r[1:].reshape(3, 32, 32).transpose(1, 2, 0)).resize((500, 375), Image.BICUBIC)
        img.save(os.path.join(d, "%06d.jpg" % i), quality=90)


def cnnrun(binary, netdef, folder, threads, engine, tmp):
    js = os.path.join(tmp, "r.json")
    args = [binary, netdef, "--data", folder, "--engine", engine, "--decode-threads", str(threads), "--json", js,
            "--quiet"]
    if engine == "cpu":
        args += ["--threads", str(threads)]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"cnnrun failed: {r.stderr.strip()}")
    j = json.load(open(js))
    return j["pipeline"], j["environment"]["engine"]


def torchvision_loader(folder, threads):
    import torch
    import torchvision.datasets as D
    import torchvision.transforms as T
    torch.set_num_threads(1)
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = D.ImageFolder(folder, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=threads)
    t0 = time.perf_counter()
    n = 0
    for x, _ in dl:
        n += x.shape[0]
    return n, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("shared")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", default="cpu", help="engine of the end-to-end row (cpu, gpu)")
    ap.add_argument("--netdef", help="1000-class netdef for the end-to-end row (default: the crosscheck's network)")
    a = ap.parse_args()
    import torch
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "photos")
        make_folder(a.shared, folder, a.images)
        torch.manual_seed(0)
        image_crosscheck.save_safetensors(os.path.join(tmp, "tiny.safetensors"),
                                          {"fc.weight": torch.randn(10, 3), "fc.bias": torch.zeros(10)})
        open(os.path.join(tmp, "tiny.yaml"), "w").write(TINY)
        netdef = a.netdef
        if not netdef:
            net = image_crosscheck.Net().eval()
            image_crosscheck.save_safetensors(
                os.path.join(tmp, "weights.safetensors"),
                {k: v for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")})
            netdef = os.path.join(tmp, "net.yaml")
            open(netdef, "w").write(image_crosscheck.NETDEF)
        rows = []
        p, eng = cnnrun(a.binary, os.path.join(tmp, "tiny.yaml"), folder, a.threads, "cpu", tmp)
        rows.append((f"cnnrun decode ({a.threads} threads)", a.images, p["wall_s"], p["images_per_s"],
                     f"decode {p['decode_s']:.2f} s summed over threads"))
        n, s = torchvision_loader(folder, a.threads)
        rows.append((f"Pillow + torchvision DataLoader ({a.threads} workers)", n, s, n / s, ""))
        p, eng = cnnrun(a.binary, netdef, folder, a.threads, a.engine, tmp)
        rows.append((f"cnnrun end to end, {eng}", a.images, p["wall_s"], p["images_per_s"],
                     f"executor waited {p['wait_for_decode_s']:.2f} s for decoding"))
    print(f"{a.images} JPEG files 500x375 -> Resize(256) -> CenterCrop(224), {os.cpu_count()} cores here")
    print(f"| {'pipeline':<58} | images | seconds | images/s | note")
    for name, n, s, ips, note in rows:
        print(f"| {name:<58} | {n:6d} | {s:7.2f} | {ips:8.0f} | {note}")


if __name__ == "__main__":
    main()
