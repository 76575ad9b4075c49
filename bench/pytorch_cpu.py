#!/usr/bin/python3
"""The ConvNetJS CIFAR-10 network (netdefs/cifar10.yaml) in PyTorch on the CPU, for
bench/cpu_reference.sh: same weights (the ConvNetJS text files, read with the ordering
documented in ../shared/README.md), same images (CIFAR-10 binary records, cycled), same
preprocessing (byte/255 - 0.5). Prints one JSON line: images, forward seconds, correct, accuracy.

    /usr/bin/python3 bench/pytorch_cpu.py --models ../shared/models/convnetjs-cifar10 \
        --data ../shared/data/cifar10-sample/train_2000.bin --images 50000 --threads 2
"""
import argparse
import json
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def read_numbers(path):
    with open(path) as f:
        return np.array(f.read().split(), dtype=np.float64)


def read_conv(path):
    v = read_numbers(path)
    kw, kh, depth, filters = (int(x) for x in v[:4])
    n = filters * kw * kh * depth
    # value ((f*KW + x)*KH + y)*DEPTH + d -> [F, KW(x), KH(y), D] -> PyTorch [F, D, KH, KW]
    w = v[4:4 + n].reshape(filters, kw, kh, depth).transpose(0, 3, 2, 1)
    b = v[4 + n:4 + n + filters]
    return torch.tensor(np.ascontiguousarray(w), dtype=torch.float32), torch.tensor(b, dtype=torch.float32)


def read_fc(path, c, h, w):
    v = read_numbers(path)
    inputs, outputs = int(v[0]), int(v[1])
    assert inputs == c * h * w, f"{path}: {inputs} inputs, the network gives {c}x{h}x{w}"
    n = inputs * outputs
    # each output's inputs ordered (y, x, d) -> [O, H, W, C] -> CHW order [O, C, H, W]
    wt = v[2:2 + n].reshape(outputs, h, w, c).transpose(0, 3, 1, 2).reshape(outputs, inputs)
    b = v[2 + n:2 + n + outputs]
    return torch.tensor(np.ascontiguousarray(wt), dtype=torch.float32), torch.tensor(b, dtype=torch.float32)


def read_cifar10(path):
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size % 3073:
        sys.exit(f"{path}: {raw.size} bytes is not a whole number of 3073-byte records")
    rec = raw.reshape(-1, 3073)
    return rec[:, 1:].reshape(-1, 3, 32, 32).copy(), rec[:, 0].astype(np.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="directory of the ConvNetJS weight files")
    ap.add_argument("--data", required=True, help="CIFAR-10 binary file")
    ap.add_argument("--images", type=int, default=50000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=500, help="images per forward call")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    w1, b1 = read_conv(f"{a.models}/layer1_conv.txt")
    w2, b2 = read_conv(f"{a.models}/layer4_conv.txt")
    w3, b3 = read_conv(f"{a.models}/layer7_conv.txt")
    wf, bf = read_fc(f"{a.models}/layer10_fc.txt", 20, 4, 4)
    pixels, labels = read_cifar10(a.data)
    count = len(labels)
    pixels_t = torch.from_numpy(pixels)

    def forward(x):
        x = F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=2)), 2)
        x = F.max_pool2d(F.relu(F.conv2d(x, w2, b2, padding=2)), 2)
        x = F.max_pool2d(F.relu(F.conv2d(x, w3, b3, padding=2)), 2)
        return F.softmax(F.linear(x.flatten(1), wf, bf), dim=1)

    preds = np.empty(a.images, dtype=np.int64)
    with torch.inference_mode():
        forward(pixels_t[:8].float() / 255 - 0.5)  # warm-up
        t0 = time.perf_counter()
        for start in range(0, a.images, a.batch):
            idx = torch.arange(start, min(start + a.batch, a.images)) % count
            x = pixels_t[idx].float() / 255.0 - 0.5
            preds[start:start + len(idx)] = forward(x).argmax(1).numpy()
        seconds = time.perf_counter() - t0
    correct = int((preds == labels[np.arange(a.images) % count]).sum())
    print(json.dumps({"engine": f"pytorch {torch.__version__} cpu, {torch.get_num_threads()} threads",
                      "images": a.images, "forward_s": seconds, "correct": correct,
                      "accuracy_percent": 100.0 * correct / a.images}))


if __name__ == "__main__":
    main()
