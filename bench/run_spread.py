#!/usr/bin/env python3
"""How much one cnnrun command's forward time moves between runs, and which layers' algorithms
moved with it.

The same binary, netdef, weights and images run as separate processes can time differently:
auto's search times each candidate alone, and near-ties fall either way (docs/performance.md,
Sessions 22-23). This runs a cnnrun command K times (each with --json), or reads JSON reports
that exist already (--from), and prints:

- a row a run: its forward time (the report's median over --repeat), setup time, and how many
  layers ran a different algorithm (the report's LayerTime::algo) than the first run;
- the spread: (slowest - fastest) / median of the forward times;
- each layer whose algorithm differs between runs, with what each run ran and auto's timings of
  its candidates (the report's "gpu: auto LAYER (N images): ... -> ALGO" notes);
- with --moved N, the N layers whose time (the report's per-layer seconds) moved most between the
  first report and the last, with both times, the change and each one's algorithm: a kernel
  change's before and after, layer by layer (two binaries' reports of the same netdef, e.g. the
  zoo benchmark's row and its BASELINE row).

A benchmark, not a test: it prints times and never judges them.

  bench/run_spread.py --runs 4 --out DIR -- cnnrun NETDEF --batch N ... (no --json: added here)
  bench/run_spread.py --from A.json B.json ...
  bench/run_spread.py --moved 15 --from BEFORE.json AFTER.json
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

from report_notes import setup_seconds

AUTO_NOTE = re.compile(r"gpu: auto (\S+) \((\d+) images\): (.*) -> (\S+)")
CANDIDATE = re.compile(r"(\S+) ([0-9.]+) ms")


def auto_timings(report):
    """{layer: ({candidate: ms}, chosen)} from a report's auto notes."""
    out = {}
    for note in report.get("notes", []):
        m = AUTO_NOTE.match(note)
        if not m:
            continue
        cands = {}
        for part in m.group(3).split("; "):
            c = CANDIDATE.fullmatch(part.strip())
            if c:
                cands[c.group(1)] = float(c.group(2))
        out[m.group(1)] = (cands, m.group(4))
    return out


def summary(report):
    """(forward ms, setup s or None, {layer: algo}) of one report."""
    forward_ms = report["times"]["forward_s"] * 1e3
    setup = setup_seconds(report.get("notes", []))
    algos = {layer["name"]: layer.get("algo", "") for layer in report.get("layers", [])}
    return forward_ms, setup, algos


def differing_layers(algos):
    """Layers (in the first report's order) whose algorithm is not the same in every report."""
    first = algos[0]
    return [name for name in first if any(a.get(name) != first[name] for a in algos[1:])]


def spread(times):
    """(slowest - fastest) / median, or 0 for fewer than two times."""
    if len(times) < 2:
        return 0.0
    return (max(times) - min(times)) / statistics.median(times)


def moved_layers(first, last, count):
    """Rows (name, ms before, ms after, algo before, algo after) of the `count` layers timed in both
    reports whose time changed most (by its size, the larger first)."""
    before = {layer["name"]: layer for layer in first.get("layers", []) if "seconds" in layer}
    rows = []
    for layer in last.get("layers", []):
        old = before.get(layer["name"])
        if old is None or "seconds" not in layer:
            continue
        rows.append((layer["name"], old["seconds"] * 1e3, layer["seconds"] * 1e3, old.get("algo", ""),
                     layer.get("algo", "")))
    rows.sort(key=lambda r: -abs(r[2] - r[1]))
    return rows[:count]


def moved_text(names, reports, count):
    lines = [f"layers whose time moved most, run 1 -> run {len(reports)} ({os.path.basename(names[-1])}):",
             "| layer | run 1 ms | last ms | change | algorithm (run 1 / last) |",
             "| --- | ---: | ---: | ---: | --- |"]
    for name, t0, t1, a0, a1 in moved_layers(reports[0], reports[-1], count):
        change = f"{100 * (t1 - t0) / t0:+.1f} %" if t0 > 0 else "-"
        algo = a0 if a0 == a1 else f"{a0} / {a1}"
        lines.append(f"| {name} | {t0:.3f} | {t1:.3f} | {change} | {algo} |")
    return "\n".join(lines)


def report_text(names, reports, max_layers):
    lines = []
    rows = [summary(r) for r in reports]
    algos = [row[2] for row in rows]
    lines.append("| run | forward ms | setup s | layers unlike run 1 |")
    lines.append("| --- | ---: | ---: | ---: |")
    for i, (name, (fwd, setup, al)) in enumerate(zip(names, rows)):
        unlike = sum(1 for k in algos[0] if al.get(k) != algos[0][k])
        setup_s = "-" if setup is None else f"{setup:.1f}"
        lines.append(f"| {i + 1} ({os.path.basename(name)}) | {fwd:.3f} | {setup_s} | {unlike} |")
    times = [row[0] for row in rows]
    lines.append("")
    lines.append(f"forward: median {statistics.median(times):.3f} ms, fastest {min(times):.3f}, "
                 f"slowest {max(times):.3f}, spread {100 * spread(times):.1f} %")
    diff = differing_layers(algos)
    lines.append(f"layers whose algorithm differs between runs: {len(diff)} of {len(algos[0])}")
    timings = [auto_timings(r) for r in reports]
    for name in diff[:max_layers]:
        lines.append(f"- {name}")
        for i, (al, t) in enumerate(zip(algos, timings)):
            cands, chosen = t.get(name, ({}, "-"))
            cand = ", ".join(f"{k} {v:.3f}" for k, v in cands.items())
            auto = f"  [auto: {cand} -> {chosen}]" if cands else ""
            lines.append(f"  run {i + 1}: {al.get(name, '(absent)')}{auto}")
    if len(diff) > max_layers:
        lines.append(f"- ... {len(diff) - max_layers} more")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="how many times to run the command (default 3)")
    ap.add_argument("--out", default="run_spread", help="folder for the runs' JSON reports and logs")
    ap.add_argument("--from", dest="reports", nargs="+", help="read these JSON reports instead of running")
    ap.add_argument("--layers", type=int, default=40, help="most differing layers to list (default 40)")
    ap.add_argument("--moved", type=int, default=0,
                    help="also list this many layers whose time moved most between the first and the last run")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- cnnrun and its arguments")
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if a.reports:
        if cmd:
            ap.error("give either --from reports or a command, not both")
        names = a.reports
    else:
        if not cmd:
            ap.error("no command to run (after --) and no --from reports")
        if "--json" in cmd:
            ap.error("the command must not have --json: each run writes its own")
        if a.runs < 1:
            ap.error("--runs must be at least 1")
        os.makedirs(a.out, exist_ok=True)
        names = []
        for i in range(a.runs):
            path = os.path.join(a.out, f"run_{i + 1}.json")
            if os.path.exists(path):
                os.remove(path)
            with open(os.path.join(a.out, f"run_{i + 1}.log"), "w") as log:
                rc = subprocess.call(cmd + ["--json", path], stdout=log, stderr=subprocess.STDOUT)
            if rc != 0:
                sys.exit(f"run_spread: run {i + 1} exited {rc} (log: {log.name})")
            names.append(path)
    reports = []
    for n in names:
        try:
            with open(n) as f:
                reports.append(json.load(f))
        except (OSError, ValueError) as e:
            sys.exit(f"run_spread: {n}: {e}")
    for n, r in zip(names, reports):
        if "times" not in r or "forward_s" not in r["times"]:
            sys.exit(f"run_spread: {n}: not a cnnrun report (no times.forward_s)")
    print(report_text(names, reports, a.layers))
    if a.moved > 0 and len(reports) > 1:
        print()
        print(moved_text(names, reports, a.moved))


if __name__ == "__main__":
    main()
