"""Readers of the notes in a cnnrun JSON report (engine/report.cpp writes them), shared by the
bench scripts; standard library only, so that a script without PyTorch can use them."""

import re


def setup_seconds(notes):
    """The GPU setup of the timed process's first run (weights, workspaces, the algorithm search:
    cuDNN's graph API compiles kernels there), from its report's "gpu: setup (...) X ms" note;
    None on the CPU."""
    for x in notes:
        m = re.match(r"gpu: setup \(.*\) ([0-9.]+) ms, not in the forward time", x)
        if m:
            return float(m.group(1)) / 1e3
    return None
