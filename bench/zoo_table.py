"""The model-zoo table (issue 13): the zoo's networks and precisions, and the Markdown table of
bench/zoo_bench.py's rows, shared with bench/zoo_merge.py (which builds one table from several runs'
zoo_results.json). No PyTorch here: merging needs only the JSON."""
import re

PRECISIONS = ["fp32", "tf32", "fp16", "bf16"]

# key, title, netdef name (lower case, letters and digits only), torchvision or not; the zoo of
# issue 13, then networks run only when NETS names them
NETS = [
    ("thesis", "thesis CIFAR-10 net", "cifar10", False),
    ("fashion", "Fashion-MNIST net", "fashionmnist", False),
    ("lenet5", "LeNet-5", "lenet5", False),
    ("resnet18", "ResNet-18", "resnet18", True),
    ("vgg11_bn", "VGG-11-BN", "vgg11bn", True),
    ("squeezenet1_1", "SqueezeNet 1.1", "squeezenet11", True),
    ("googlenet", "GoogLeNet", "googlenet", True),
    ("mobilenet_v2", "MobileNetV2", "mobilenetv2", True),
    ("efficientnet_b0", "EfficientNet-B0", "efficientnetb0", True),
    ("mobilenet_v3_small", "MobileNetV3-Small", "mobilenetv3small", True),
]
DEFAULT_NETS = NETS[:9]


def header(device, date, version, commit, torch_text):
    """A table's header: 'DEVICE[, driver D]; DATE; cnnrun V commit C; PyTorch P[, cuDNN N]'."""
    return f"{device}; {date}; cnnrun {version} commit {commit}; {torch_text}"


def header_parts(text):
    """header()'s fields back as a dict (device, date, version, commit, torch); None if it is not one."""
    m = re.fullmatch(r"(?P<device>[^;]*); (?P<date>[^;]*); cnnrun (?P<version>\S+) commit (?P<commit>[^;]*); "
                     r"(?P<torch>PyTorch [^;]*)", text)
    return m.groupdict() if m else None


def warmup_note(counts):
    """What the medians come after, from the set of cnnrun's --warmup counts in the rows (PyTorch's
    timer always makes two)."""
    if counts == {2}:
        return "after two warm-up runs on both sides"
    if counts == {0}:
        return "after PyTorch's two warm-up runs; cnnrun's include each process's first run (no --warmup)"
    if counts:
        return "after PyTorch's two warm-up runs; cnnrun's after two in some rows and none in others"
    return "(no cnnrun row ran)"


def fmt_ms(v):
    return "-" if v is None else (f"{v:.2f}" if v < 100 else f"{v:.1f}")


def fmt_rate(n, ms):
    if not ms:
        return "-"
    r = n / (ms / 1e3)
    return f"{r / 1e6:.2f}M" if r >= 1e6 else f"{r / 1e3:.1f}k" if r >= 1e3 else f"{r:.0f}"


def table(a, rows, header):
    """The Markdown table of `rows` (zoo_bench.py's: title, input, images, precision, cnnrun, torch,
    xcheck; or title, input, unavailable) under `header`; a.baseline adds the baseline column, a.dry
    marks a CPU run, a.notes_text follows the table."""
    mem_col = "peak GPU MiB cnnrun / PyTorch"
    out = [f"## Model zoo: {header}", "",
           "| network | input | images | precision | cnnrun ms | PyTorch ms (fastest way) | ratio | cnnrun img/s "
           "| cnnrun TFLOP/s | cnnrun setup s | validation max rel (tolerance) | "
           f"{mem_col} | x-check | cnnrun conv/fc algorithms |",
           "| --- | --- | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- |"]
    if a.baseline:  # one more column: the earlier binary's median, and this one's speedup over it
        out[2] = out[2].replace("| ratio |", "| ratio | baseline ms (speedup) |")
        out[3] = out[3].replace("| ---: | ---: | ---: |", "| ---: | ---: | ---: | ---: |", 1)
    for r in rows:
        if "unavailable" in r:
            out.append(f"| {r['title']} | {r['input']} | - | - | {r['unavailable']} | | | | | | | | | |" +
                       (" |" if a.baseline else ""))
            continue
        c, t = r["cnnrun"], r.get("torch") or {}
        best = t.get("best")
        if "error" in c:
            cn = f"failed (exit {c['rc']}): {c['error']}"
        elif "skipped" in c:
            cn = c["skipped"]
        else:
            cn = fmt_ms(c["median_ms"]) + ("" if a.dry or c.get("resident") else " (NOT resident: see its log)")
        if best:
            tv = f"{fmt_ms(best['median_ms'])} ({best['way']})"
        elif t.get("skipped"):
            tv = t["skipped"]
        else:
            errs = "; ".join(f"{w['way']}: {w.get('error')}" for w in t.get("ways", []))
            tv = f"no way ran ({errs[:200]})" if errs else "-"
        ok = best and "median_ms" in c
        ratio = f"{best['median_ms'] / c['median_ms']:.2f}x" if ok else "-"
        skipped = sum(1 for w in t.get("ways", []) if str(w.get("error", "")).startswith("skipped"))
        if ok and skipped:  # PyTorch's fastest way may be among those not run: the ratio is a bound
            ratio = f"{ratio} at most ({skipped} of PyTorch's ways skipped: over the time budget)"
        rate = fmt_rate(r["images"], c.get("median_ms"))
        # twice the netdef's multiply-adds an image, over the forward (cnnrun's report)
        flops = c.get("flops_per_s")
        tflops = f"{flops / 1e12:.3g}" if flops else "-"
        if c.get("validate_max_rel") is not None:
            val = (f"{c['validate_max_rel']:.1e} ({c['validate_tolerance']:.1e}, "
                   f"{'pass' if c['validate_pass'] else 'FAIL'}, {c['validate_images']} img)")
        else:
            val = "-"
        cm = c.get("peak_mib")
        tm = best.get("peak_mib") if best else None
        mem = f"{cm:.0f} / {tm:.0f}" if cm is not None and tm is not None else (
            f"{cm:.0f} / -" if cm is not None else "-")
        xc = "-" if r.get("xcheck") is None else f"{r['xcheck']:.1e}"
        if r.get("xcheck") is not None and not r["xcheck"] <= 1e-4:  # NaN: output shapes differ
            xc += " MISMATCH"
        setup = "-" if c.get("setup_s") is None else f"{c['setup_s']:.1f}"
        if a.baseline:
            b = c.get("baseline") or {}
            ratio += " | " + (f"{fmt_ms(b['median_ms'])} ({b['median_ms'] / c['median_ms']:.2f}x)"
                              if "median_ms" in b and "median_ms" in c else
                              f"failed (exit {b.get('rc')}): {str(b.get('error'))[:120]}" if "error" in b else "-")
        out.append(f"| {r['title']} | {r['input']} | {r['images']} | {r['precision']} | {cn} | {tv} | {ratio} | "
                   f"{rate} | {tflops} | {setup} | {val} | {mem} | {xc} | {c.get('algos', '-') or '-'} |")
    out += ["", a.notes_text, ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
