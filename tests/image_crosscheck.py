#!/usr/bin/python3
"""The JPEG pipeline against PyTorch: a folder of JPEG photographs (the CIFAR-10 test sample's
real photographs, enlarged by Pillow to several sizes and aspect ratios and saved as JPEG) goes
through cnnrun (decode, Resize(256), CenterCrop(224), Normalize, a 1000-class network) and
through Pillow + torchvision transforms + the same network in PyTorch (random weights, batchnorm
statistics perturbed, exported as safetensors). Top-1 and top-5 must agree on at least 99 % of
the images, and the output values within 1e-4.

The network is a small residual network of cnnrun's own (conv 7x7/2, batchnorm, max-pool, one
basic block, global average pool, fc 1000): the pipeline, not the architecture, is under test.

usage: image_crosscheck.py CNNRUN_BINARY SHARED_DIR [--engine cpu|gpu|auto] [--images N]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torchvision.transforms as T
from PIL import Image

NETDEF = """name: jpeg-crosscheck
input: {channels: 3, height: 224, width: 224}
preprocess: {resize: 256, crop: 224, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}
classes: 1000
weights: {format: safetensors, path: weights.safetensors}
layers:
  - {name: conv1, type: conv, filters: 16, kernel: 7, stride: 2, pad: 3, bias: false}
  - {name: bn1, type: batchnorm}
  - {name: relu1, type: relu}
  - {name: pool1, type: maxpool, size: 3, stride: 2, pad: 1}
  - {name: conv2, type: conv, filters: 16, kernel: 3, pad: 1, bias: false}
  - {name: bn2, type: batchnorm}
  - {name: relu2, type: relu}
  - {name: conv3, type: conv, filters: 16, kernel: 3, pad: 1, bias: false}
  - {name: bn3, type: batchnorm}
  - {name: add, type: add, inputs: [bn3, pool1]}
  - {name: relu3, type: relu}
  - {name: gap, type: avgpool, global: true}
  - {name: fc, type: fc, outputs: 1000}
"""


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.pool1 = nn.MaxPool2d(3, 2, 1)
        self.conv2 = nn.Conv2d(16, 16, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.conv3 = nn.Conv2d(16, 16, 3, 1, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 1000)

    def forward(self, x):
        p = self.pool1(torch.relu(self.bn1(self.conv1(x))))
        y = self.bn3(self.conv3(torch.relu(self.bn2(self.conv2(p)))))
        y = torch.relu(y + p)
        return self.fc(y.mean((2, 3)))


def save_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def make_folder(shared, out, n):
    recs = np.fromfile(os.path.join(shared, "data/cifar10-sample/test_1000.bin"), np.uint8).reshape(-1, 3073)[:n]
    sizes = [(320, 240), (240, 320), (256, 256), (500, 375), (300, 260), (229, 229)]
    paths = []
    for i, r in enumerate(recs):
        d = os.path.join(out, str(int(r[0])))  # class folders named after classes "0".."9" of 1000
        os.makedirs(d, exist_ok=True)
        img = Image.fromarray(r[1:].reshape(3, 32, 32).transpose(1, 2, 0)).resize(sizes[i % len(sizes)],
                                                                               Image.BICUBIC)
        p = os.path.join(d, "%04d.jpg" % i)
        img.save(p, quality=(75, 90, 95)[i % 3], subsampling=(2, 0, 1)[i % 3])
        paths.append(p)
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("shared")
    ap.add_argument("--engine", default="cpu")
    ap.add_argument("--images", type=int, default=300)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.shared, "data/cifar10-sample/test_1000.bin")):
        print("skipped: no CIFAR-10 sample")
        sys.exit(77)
    torch.manual_seed(14)
    net = Net().eval()
    with torch.no_grad():
        for bn in (net.bn1, net.bn2, net.bn3):
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.normal_(0, 0.2)
            bn.running_mean.normal_(0, 0.3)
            bn.running_var.uniform_(0.5, 2.0)
    with tempfile.TemporaryDirectory() as tmp:
        save_safetensors(os.path.join(tmp, "weights.safetensors"),
                         {k: v for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")})
        with open(os.path.join(tmp, "net.yaml"), "w") as f:
            f.write(NETDEF)
        paths = make_folder(a.shared, os.path.join(tmp, "photos"), a.images)
        csv = os.path.join(tmp, "p.csv")
        r = subprocess.run([a.binary, os.path.join(tmp, "net.yaml"), "--engine", a.engine, "--data",
                            os.path.join(tmp, "photos"), "--predictions", csv, "--dump",
                            os.path.join(tmp, "v.npy")], capture_output=True, text=True)
        if r.returncode != 0 and "no usable GPU" in r.stderr:
            print(f"skipped: {r.stderr.strip()}")
            sys.exit(77)
        if r.returncode != 0:
            sys.exit(f"cnnrun failed ({r.returncode}): {r.stderr.strip()}")
        print("\n".join(l for l in r.stdout.splitlines() if "accuracy" in l or "Pipeline" in l or "Decoding" in l))
        ours = np.load(os.path.join(tmp, "v.npy"))
        rows = [l.split(",") for l in open(csv).read().splitlines()[1:]]
        our_paths = [row[1] for row in rows]
        tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        order = sorted(paths)  # cnnrun's order: class folders in sorted order, files sorted
        assert our_paths == order, "cnnrun's image order differs from the sorted folder"
        with torch.no_grad():
            x = torch.stack([tf(Image.open(p).convert("RGB")) for p in order])
            theirs = net(x).numpy()
    top1 = (ours.argmax(1) == theirs.argmax(1)).mean()
    t5o = np.argsort(-ours, 1, kind="stable")[:, :5]
    t5t = np.argsort(-theirs, 1, kind="stable")[:, :5]
    top5 = np.mean([set(p) == set(q) for p, q in zip(t5o, t5t)])
    diff = float(np.abs(ours - theirs).max())
    ok = top1 >= 0.99 and top5 >= 0.99 and diff <= 1e-4
    print(f"{len(order)} JPEG photographs: top-1 agrees on {top1 * 100:.2f} %, top-5 set on {top5 * 100:.2f} %, "
          f"max abs difference of the 1000 outputs {diff:.2e}: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
