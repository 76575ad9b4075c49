#!/usr/bin/env python3
"""PyTorch's side of bench/depthwise_bench.cpp (a benchmark, not a test): MobileNetV2's 17
depthwise 3x3 convolutions (torchvision's layer shapes) at a given input size, each followed by
ReLU6 as in MobileNetV2, FP32 NCHW on the GPU, timed with CUDA events as the median of --repeats
runs after a warm-up: the convolution alone (what PyTorch dispatches depthwise FP32 to: its own
depthwise kernel or cuDNN, with cudnn.benchmark on) and the convolution + ReLU6.

    python3 bench/depthwise_torch.py [--images 256] [--input 224] [--repeats 20]
                                     [--dtype fp32|fp16|bf16] [--channels-last]

--dtype and --channels-last: the tensors in that format and layout (bench/depthwise_bench.cpp's
FORMAT fp16, bf16 or fp32-nhwc is cnnrun's side).
"""
import argparse

import torch
import torch.nn.functional as F


def mobilenet_v2(inp):
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    out, c, h = [], 32, (inp + 1) // 2
    for t, ch, n, s in settings:
        for i in range(n):
            stride = s if i == 0 else 1
            out.append((c * t, h, stride))
            h = (h + 2 - 3) // stride + 1
            c = ch
    return out


def median_ms(f, repeats):
    f()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--input", type=int, default=224)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default="fp32")
    ap.add_argument("--channels-last", action="store_true")
    a = ap.parse_args()
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    print(f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    layout = "NHWC" if a.channels_last else "NCHW"
    print(f"MobileNetV2 depthwise 3x3, {a.images} images at {a.input}x{a.input}, {a.dtype} {layout}, "
          f"median of {a.repeats} (ms)")
    print(f"{'#':4} {'ch':>5} {'in':>4} {'s':>2} | {'conv':>9} {'conv+relu6':>10}")
    tot, tot_act = 0.0, 0.0
    with torch.no_grad():
        for i, (c, h, s) in enumerate(mobilenet_v2(a.input)):
            x = torch.randn(a.images, c, h, h, device=dev, dtype=dtype).to(memory_format=fmt)
            w = torch.randn(c, 1, 3, 3, device=dev, dtype=dtype).to(memory_format=fmt)
            b = torch.randn(c, device=dev, dtype=dtype)
            t = median_ms(lambda: F.conv2d(x, w, b, stride=s, padding=1, groups=c), a.repeats)
            t_act = median_ms(lambda: F.relu6(F.conv2d(x, w, b, stride=s, padding=1, groups=c)), a.repeats)
            tot, tot_act = tot + t, tot_act + t_act
            print(f"{i:<4} {c:5} {h:4} {s:2} | {t:9.4f} {t_act:10.4f}")
    print(f"{'total':20} | {tot:9.4f} {tot_act:10.4f}")


if __name__ == "__main__":
    main()
