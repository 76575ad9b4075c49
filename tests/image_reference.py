#!/usr/bin/env python3
"""Writes the image files the image-folder tests decode, and what Pillow and torchvision make of
them, so the C++ side can compare pixel by pixel. Uses Debian's python3-pil, python3-numpy and
python3-torchvision (the transforms only).

  image_reference.py decode DIR     varied PNG/JPEG files + DIR/<name>.rgb.npy / .l.npy (Pillow's
                                    convert("RGB") / convert("L") pixels, uint8 as float32)
  image_reference.py resize DIR     photographs-like JPEG/PNG files of several sizes + DIR/<name>.
                                    <size>.npy: torchvision Resize(size) + CenterCrop(crop) pixels
  image_reference.py cifar BIN DIR N  the first N CIFAR-10 records as a PNG class folder, files
                                    named by record index
"""
import os
import sys

import numpy as np
from PIL import Image


def save_ref(path, img):
    np.save(path, np.asarray(img, dtype=np.uint8).astype(np.float32))


def pattern(w, h, seed):
    # Smooth gradients plus noise: JPEG-like content with edges and texture.
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 / max(w - 1, 1))
    g = (y * 255 / max(h - 1, 1))
    b = 128 + 100 * np.sin(x / 7.0 + seed) * np.cos(y / 5.0)
    a = np.stack([r, g, b], -1) + rng.normal(0, 25, (h, w, 3))
    return np.clip(a, 0, 255).astype(np.uint8)


def decode_set(out):
    os.makedirs(out, exist_ok=True)
    rgb = Image.fromarray(pattern(37, 23, 1))
    rgb.save(f"{out}/rgb.png")
    rgba = rgb.copy(); rgba.putalpha(Image.fromarray((pattern(37, 23, 2)[:, :, 0])))
    rgba.save(f"{out}/rgba.png")
    grey = rgb.convert("L"); grey.save(f"{out}/grey.png")
    la = grey.copy(); la.putalpha(128); la.save(f"{out}/la.png")
    grey.convert("1").save(f"{out}/grey1.png")
    for bits in (2, 4):  # Pillow writes low-bit grey from a palette image with that many colours
        grey.quantize(2 ** bits).save(f"{out}/pal{bits}bit.png", bits=bits)
    pal = rgb.convert("P", palette=Image.ADAPTIVE, colors=200); pal.save(f"{out}/palette.png")
    palt = pal.copy(); palt.info["transparency"] = 3; palt.save(f"{out}/palette_trns.png", transparency=3)
    for sub, name in ((0, "444"), (1, "422"), (2, "420")):
        rgb.save(f"{out}/j{name}.jpg", quality=85, subsampling=sub)
    rgb.save(f"{out}/progressive.jpg", quality=90, progressive=True)
    grey.save(f"{out}/grey.jpg", quality=90)
    Image.fromarray(pattern(64, 48, 3)).save(f"{out}/big420.jpg", quality=75)
    for f in sorted(os.listdir(out)):
        if f.endswith(".npy"):
            continue
        im = Image.open(f"{out}/{f}")
        save_ref(f"{out}/{f}.rgb.npy", im.convert("RGB"))
        save_ref(f"{out}/{f}.l.npy", im.convert("L"))


def resize_set(out):
    import torchvision.transforms as T
    os.makedirs(out, exist_ok=True)
    sizes = [(500, 375), (375, 500), (640, 427), (300, 300), (255, 257), (224, 224), (97, 131), (1024, 683)]
    for i, (w, h) in enumerate(sizes):
        img = Image.fromarray(pattern(w, h, 10 + i))
        name = f"s{i}_{w}x{h}." + ("jpg" if i % 2 == 0 else "png")
        if name.endswith("jpg"):
            img.save(f"{out}/{name}", quality=90)
        else:
            img.save(f"{out}/{name}")
        im = Image.open(f"{out}/{name}").convert("RGB")
        for size, crop in ((256, 224), (224, 224), (36, 32)):
            ref = T.CenterCrop(crop)(T.Resize(size)(im))
            save_ref(f"{out}/{name}.{size}.{crop}.npy", ref)
        save_ref(f"{out}/{name}.grey.256.224.npy", T.CenterCrop(224)(T.Resize(256)(Image.open(f"{out}/{name}").convert("L"))))


def cifar_set(binfile, out, n):
    r = np.fromfile(binfile, np.uint8).reshape(-1, 3073)[:n]
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    for i, rec in enumerate(r):
        d = os.path.join(out, names[rec[0]])
        os.makedirs(d, exist_ok=True)
        Image.fromarray(rec[1:].reshape(3, 32, 32).transpose(1, 2, 0)).save(os.path.join(d, "%05d.png" % i))


if __name__ == "__main__":
    if sys.argv[1] == "decode":
        decode_set(sys.argv[2])
    elif sys.argv[1] == "resize":
        resize_set(sys.argv[2])
    elif sys.argv[1] == "png16":
        Image.fromarray(np.arange(20, dtype=np.uint16).reshape(4, 5) * 3000, mode="I;16").save(sys.argv[2])
    elif sys.argv[1] == "cifar":
        cifar_set(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit("unknown mode " + sys.argv[1])
