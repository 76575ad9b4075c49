#!/usr/bin/python3
"""Writes a torchvision network's state_dict as safetensors, for the netdefs in
netdefs/torchvision/ (whose layer names are the state_dict keys, so the file loads as it is).

    /usr/bin/python3 tools/torchvision_export.py resnet18 OUT.safetensors [--state-dict W.pth]

Without --state-dict the weights are torchvision's random initialisation (seeded, --seed) with
perturbed batchnorm statistics, so that a comparison exercises them; with it, the given
state_dict (e.g. torchvision's pretrained file, downloaded elsewhere) is written instead.
The file is written with numpy (the `safetensors` package is not in Debian): an 8-byte
little-endian header length, a JSON header, then the tensors' bytes in header order.
"""
import argparse
import json
import struct
import sys

import numpy as np
import torch
import torchvision.models as models

# The torchvision constructors the netdefs describe, with the arguments they need.
NETWORKS = {
    "resnet18": lambda: models.resnet18(),
    "mobilenet_v2": lambda: models.mobilenet_v2(),
    "mobilenet_v3_small": lambda: models.mobilenet_v3_small(),
    "efficientnet_b0": lambda: models.efficientnet_b0(),
    "googlenet": lambda: models.googlenet(aux_logits=False, init_weights=False, transform_input=False),
    "squeezenet1_1": lambda: models.squeezenet1_1(),
    "vgg11_bn": lambda: models.vgg11_bn(),
}


def build(name, seed=0):
    """The network in eval mode with seeded random weights and perturbed batchnorm statistics
    (running mean and variance, scale and shift far from their 0/1 initial values)."""
    torch.manual_seed(seed)
    net = NETWORKS[name]()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(c, generator=g) * 1.5 + 0.5)
                m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                m.bias.copy_(torch.randn(c, generator=g) * 0.2)
    return net.eval()


def save_safetensors(state_dict, path):
    """Every tensor (F32; integer counters as I64) in state_dict order."""
    header, blobs, offset = {}, [], 0
    for k, v in state_dict.items():
        a = v.detach().cpu().numpy()
        if a.dtype == np.float32:
            dtype, a = "F32", a.astype("<f4")
        elif a.dtype == np.int64:
            dtype, a = "I64", a.astype("<i8")
        else:
            sys.exit(f"{k}: dtype {a.dtype} is neither float32 nor int64")
        b = np.ascontiguousarray(a).tobytes()
        header[k] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data buffer starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("network", choices=sorted(NETWORKS))
    ap.add_argument("out")
    ap.add_argument("--state-dict", help="a .pth state_dict to write instead of random weights")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.state_dict:
        net = NETWORKS[a.network]()
        net.load_state_dict(torch.load(a.state_dict, map_location="cpu"))
    else:
        net = build(a.network, a.seed)
    save_safetensors(net.state_dict(), a.out)


if __name__ == "__main__":
    main()
