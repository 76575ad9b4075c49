#!/usr/bin/python3
"""Trains netdefs/fashion-mnist.yaml's network on Fashion-MNIST with PyTorch (CPU) and saves its
weights as safetensors, named as the netdef's layers (conv1.weight, ...).

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist). Deterministic: fixed
seed, one thread order (torch.use_deterministic_algorithms), 2 threads. Run:

    /usr/bin/python3 tools/train_fashion_mnist.py --out netdefs/weights/fashion-mnist.safetensors
"""
import argparse
import gzip
import json
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # the training images' pixel mean and std (of x/255)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    if magic == 0x803:
        h, w = struct.unpack(">II", raw[8:16])
        return np.frombuffer(raw, np.uint8, n * h * w, 16).reshape(n, 1, h, w)
    if magic == 0x801:
        return np.frombuffer(raw, np.uint8, n, 8)
    raise ValueError(f"{path}: bad IDX magic {magic:#x}")


class Net(nn.Module):
    """conv 5x5 x12 -> relu -> maxpool 2 -> conv 5x5 x24 -> relu -> maxpool 2 -> fc 128 -> relu -> fc 10.
    The course's network (two 5x5 convs with 12 and 24 maps), padded to keep the borders and with
    one hidden fc layer, which is what lifts it past 90 % test accuracy."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 12, 5, padding=2)
        self.conv2 = nn.Conv2d(12, 24, 5, padding=2)
        self.fc1 = nn.Linear(24 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)  # softmax is the netdef's last layer; cross_entropy applies its own


def save_safetensors(path, tensors, metadata):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name].detach().cpu().numpy().astype("<f4"))
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def normalise(x):
    return (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--seed", type=int, default=408)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)

    xtr = normalise(read_idx(f"{DATA}/train-images-idx3-ubyte.gz"))
    ytr = torch.from_numpy(read_idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64))
    xte = normalise(read_idx(f"{DATA}/t10k-images-idx3-ubyte.gz"))
    yte = torch.from_numpy(read_idx(f"{DATA}/t10k-labels-idx1-ubyte.gz").astype(np.int64))

    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=args.epochs * ((len(xtr) + 127) // 128))
    t0 = time.time()
    for epoch in range(args.epochs):
        net.train()
        perm = torch.randperm(len(xtr))
        for i in range(0, len(xtr), 128):
            idx = perm[i:i + 128]
            opt.zero_grad()
            loss = F.cross_entropy(net(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            sched.step()
        net.eval()
        with torch.no_grad():
            acc = (net(xte).argmax(1) == yte).float().mean().item() * 100
        print(f"epoch {epoch + 1}: loss {loss.item():.4f}  test accuracy {acc:.2f} %  ({time.time() - t0:.0f} s)", flush=True)
    meta = {"network": "fashion-mnist", "epochs": str(args.epochs), "seed": str(args.seed),
            "test_accuracy": f"{acc:.2f}", "torch": torch.__version__,
            "train_seconds": f"{time.time() - t0:.0f}"}
    save_safetensors(args.out, net.state_dict(), meta)
    print(f"saved {args.out}: test accuracy {acc:.2f} % in {time.time() - t0:.0f} s")
    return 0 if acc >= 89.0 else 1


if __name__ == "__main__":
    sys.exit(main())
