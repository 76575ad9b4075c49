#!/usr/bin/env python3
"""One model-zoo table from several bench/zoo_bench.py runs (issue 13): each device call holds a
few networks (BUDGET), so the whole zoo takes several runs; this joins their zoo_results.json into
the table one long run would print, in the zoo's order, and says which rows of the zoo are missing.

Refused (exit 2, one line): runs of different cnnrun commits, GPUs (with their drivers) or PyTorch
versions, since their ratios could not stand in one table, and runs whose commit is unknown (no
COMMIT= and a binary that does not name its own), which cannot be shown to be of one commit; and a
row (network, input, precision) present in two runs, since which one counts would be a choice the
table hides.

  bench/zoo_merge.py RUN1/zoo_results.json RUN2/zoo_results.json ... [--out DIR] [--sizes "32 224"]
  bench/zoo_merge.py CALL1/zoo_jobs.tgz CALL2/zoo_jobs.tgz ...   (bench/zoo_parallel.py's archives)
"""
import argparse
import json
import os
import re
import sys
import tarfile
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_table import DEFAULT_NETS, NETS, PRECISIONS, header, header_parts, table, warmup_note  # noqa: E402


class MergeError(Exception):
    pass


def load(path, f=None):
    """One zoo_results.json: the file at path, or (f) a member of an archive that path names."""
    try:
        if f is not None:
            d = json.load(f)
        else:
            with open(path) as fh:
                d = json.load(fh)
    except (OSError, ValueError) as e:
        raise MergeError(f"{path}: cannot read it as JSON: {e}") from None
    if not isinstance(d, dict) or "header" not in d or not isinstance(d.get("results"), list):
        raise MergeError(f"{path}: not a zoo_results.json (no header and results)")
    d["parts"] = header_parts(d["header"])
    if d["parts"] is None:
        raise MergeError(f"{path}: not a zoo_bench.py header: {d['header']!r}")
    return d


def load_all(path):
    """[(name, results)]: the zoo_results.json at path, or each job's in an archive of them
    (bench/zoo_parallel.py's OUT/zoo_jobs.tgz: TAG.json a job), named ARCHIVE:TAG.json."""
    if path.endswith((".tgz", ".tar.gz", ".tar")):
        try:
            with tarfile.open(path) as tar:
                members = sorted((m for m in tar.getmembers() if m.isfile() and m.name.endswith(".json")),
                                 key=lambda m: m.name)
                if not members:
                    raise MergeError(f"{path}: an archive with no .json member")
                return [(f"{path}:{m.name}", load(f"{path}:{m.name}", tar.extractfile(m))) for m in members]
        except (OSError, tarfile.TarError) as e:
            first = (str(e).splitlines() or [type(e).__name__])[0].rstrip(":")
            raise MergeError(f"{path}: not a readable tar archive ({first})") from None
    return [(path, load(path))]


def merge(paths, sizes):
    """The merged table: a namespace of text (the Markdown), header (its header line), missing (the
    zoo's rows no run measured) and runs (each path's loaded zoo_results.json, in order; an archive
    of them, as bench/zoo_parallel.py writes, counts as its jobs' runs)."""
    runs = [run for p in paths for run in load_all(p)]
    first_path, first = runs[0]
    h0 = first["parts"]
    for p, d in runs:
        if len(runs) > 1 and d["parts"]["commit"].startswith("unknown"):
            raise MergeError(f"{p}: cnnrun commit '{d['parts']['commit']}': runs of unknown commits cannot be "
                             "shown to be of one commit (rerun with COMMIT= set)")
    for p, d in runs[1:]:
        for what, key in (("cnnrun commit", "commit"), ("device", "device"), ("PyTorch", "torch")):
            if d["parts"][key] != h0[key]:
                raise MergeError(f"{p}: {what} '{d['parts'][key]}', but {first_path} has '{h0[key]}': "
                                 "one table needs one of each")
    titles = {k: t for k, t, _, _ in NETS}
    order = {k: i for i, (k, *_) in enumerate(NETS)}
    found, seen = [], {}
    for p, d in runs:
        for r in d["results"]:
            key, inp = r.get("net"), r.get("input")
            if key not in titles:
                raise MergeError(f"{p}: unknown network '{key}'")
            if "probe_error" in r:
                found.append((key, inp, "", {"title": titles[key], "input": inp,
                                             "unavailable": f"not expressible yet: {r['probe_error']}"}))
                continue
            for prec, c in r.get("cnnrun", {}).items():
                where = seen.get((key, inp, prec))
                if where:
                    raise MergeError(f"{titles[key]} {inp} {prec} is in both {where} and {p}: merge one of them")
                seen[(key, inp, prec)] = p
                found.append((key, inp, prec, {
                    "title": titles[key], "input": inp, "images": r.get("images"), "precision": prec, "cnnrun": c,
                    "torch": (r.get("torch") or {}).get(prec, {"skipped": "not run"}),
                    "xcheck": r.get("xcheck_max_rel")}))

    def size_of(inp):
        m = re.match(r"\d+x(\d+)x\d+", inp or "")
        return int(m.group(1)) if m else 0

    prec_order = {q: i for i, q in enumerate(PRECISIONS)}
    found.sort(key=lambda f: (order[f[0]], size_of(f[1]), prec_order.get(f[2], -1)))
    rows = [f[3] for f in found]
    # What the zoo has that no run measured: the default networks, torchvision's at each size.
    have = {(k, size_of(i), q) for k, i, q, _ in found}
    have_net = {(k, size_of(i)) for k, i, q, _ in found if not q}  # a probe failure covers its input
    missing = []
    for k, t, _, tv in DEFAULT_NETS:
        native = {size_of(i) for kk, i, _, _ in found if kk == k} if not tv else set()
        for s in (sizes if tv else (native or {0})):
            if (k, s) in have_net:
                continue
            gone = [q for q in PRECISIONS if (k, s, q) not in have]
            if gone:
                missing.append(f"{t}{f' {s}x{s}' if tv else ''} {'/'.join(gone)}")
    dates = sorted(d["parts"]["date"] for _, d in runs)
    repeats = sorted({str(d.get("args", {}).get("repeats")) for _, d in runs})
    # Rows from before --warmup (no "warmup" key) had none: their medians include the first run.
    warm_text = warmup_note({c.get("warmup", 0) for r in rows for c in [r.get("cnnrun", {})] if "median_ms" in c})
    notes = [f"Merged by bench/zoo_merge.py from {len(runs)} zoo_bench.py runs of {dates[0]} to {dates[-1]}: "
             + ", ".join(os.path.relpath(p) for p, _ in runs) + ".",
             f"Medians of {'/'.join(repeats)} runs {warm_text}; "
             + ("on the CPU (dry run: cnnrun --engine cpu), " if all(d.get("args", {}).get("dry") for _, d in runs)
                else "input already on the GPU (cnnrun `--resident`), ") +
             "cnnrun's default algorithm choice; ratio = PyTorch / cnnrun (above 1: cnnrun faster); "
             "PyTorch's fastest way at each precision (see bench/zoo_bench.py).",
             "Missing from the zoo: " + ("; ".join(missing) if missing else "nothing") + "."]
    head = header(h0["device"], f"{dates[0]} to {dates[-1]}", h0["version"], h0["commit"], h0["torch"])
    a = types.SimpleNamespace(baseline=any(d.get("args", {}).get("baseline") for _, d in runs),
                              dry=all(d.get("args", {}).get("dry") for _, d in runs),
                              notes_text="\n".join(f"- {x}" for x in notes))
    return types.SimpleNamespace(text=table(a, rows, head), header=head, missing=missing,
                                 runs=[d for _, d in runs])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+",
                    help="zoo_results.json files of zoo_bench.py runs, or zoo_jobs.tgz archives of them")
    ap.add_argument("--out", default="", help="also write zoo_table.md here")
    ap.add_argument("--sizes", default="32 224", help="the torchvision input sizes the zoo has")
    a = ap.parse_args()
    try:
        sizes = [int(s) for s in a.sizes.replace(",", " ").split()]
        text = merge(a.results, sizes).text
    except (MergeError, ValueError) as e:
        print(f"zoo_merge: {e}", file=sys.stderr)
        return 2
    print(text)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "zoo_table.md"), "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
