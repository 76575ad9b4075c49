#!/usr/bin/python3
"""ONNX's own test cases (Debian's libonnx-testdata) through `cnnrun MODEL.onnx`.

A case is a directory with model.onnx and test_data_set_*/ holding input_K.pb and output_0.pb
(TensorProto files). ONNX's node tests pass weights as graph inputs; cnnrun networks have one
input and constant weights, so the inputs after the first become initializers holding that data
set's values (a rewritten model per data set). The first input is written as float32 .npy
(N x C x H x W or N x F, taken as already preprocessed); cnnrun imports the model in memory,
runs it (--dump) and the output must match output_0.pb: |ours - expected| <= 1e-6 + 1e-5 |expected|
everywhere.

usage:
  onnx_conformance.py CNNRUN CASE_DIR [--engine cpu|gpu]   one case: exit 0 pass, 1 fail, 77 skipped
  onnx_conformance.py CNNRUN --table ROOT... --doc FILE --list FILE
      every case under the roots: the Markdown table (docs/onnx-conformance.md) and the list of
      cases that import (tests/onnx_cases.txt, one ctest entry each)
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

RTOL, ATOL = 1e-5, 1e-6
SKIP = 77


class Skip(Exception):
    pass


def load_pb(path):
    import onnx
    from onnx import numpy_helper
    t = onnx.TensorProto()
    try:
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        return numpy_helper.to_array(t)
    except Exception as e:  # sequences, optionals, strings: not tensors cnnrun could take
        raise Skip(f"{os.path.basename(path)} is not a numeric tensor ({type(e).__name__})")


def data_sets(case):
    sets = sorted(d for d in os.listdir(case) if d.startswith("test_data_set_"))
    for d in sets:
        p = os.path.join(case, d)
        ins = sorted((f for f in os.listdir(p) if f.startswith("input_")), key=lambda f: int(f[6:-3]))
        outs = sorted((f for f in os.listdir(p) if f.startswith("output_")), key=lambda f: int(f[7:-3]))
        yield d, [load_pb(os.path.join(p, f)) for f in ins], [load_pb(os.path.join(p, f)) for f in outs]


def npy_header_ok(x):
    return x.dtype == np.float32 and x.ndim in (2, 4) and x.shape[0] >= 1


def prepare_sets(case, out):
    """Writes each data set of `case` under out/<set>/ as model.onnx (the graph's other inputs made
    initializers), x.npy (the first input) and want.npy (the expected output); raises Skip where
    cnnrun cannot take the case. Needs the onnx package; checking the result needs only NumPy."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(os.path.join(case, "model.onnx"))
    init_names = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in init_names]
    sets = list(data_sets(case))
    if not sets:
        raise Skip("no test data set")
    written = []
    for set_name, ins, outs in sets:
        if not ins:
            raise Skip("the case has no input")
        if len(ins) != len(graph_inputs):
            raise Skip(f"{len(ins)} input files for {len(graph_inputs)} graph inputs")
        if len(outs) != 1:
            raise Skip(f"{len(outs)} outputs (a cnnrun network has one)")
        x = ins[0]
        if not (isinstance(x, np.ndarray) and npy_header_ok(x)):
            raise Skip(f"input {getattr(x, 'dtype', type(x))} {list(getattr(x, 'shape', []))} is not a float32 "
                       "N x C x H x W or N x F batch")
        m = onnx.ModelProto()
        m.CopyFrom(model)
        for gi, v in zip(graph_inputs[1:], ins[1:]):
            if not isinstance(v, np.ndarray):
                raise Skip(f"input '{gi.name}' is not a tensor")
            m.graph.initializer.append(numpy_helper.from_array(v, gi.name))
        d = os.path.join(out, set_name)
        os.makedirs(d, exist_ok=True)
        onnx.save(m, os.path.join(d, "model.onnx"))
        # cnnrun holds an N x F batch as N x F x 1 x 1.
        np.save(os.path.join(d, "x.npy"), np.ascontiguousarray(x.reshape(x.shape + (1, 1)) if x.ndim == 2 else x))
        np.save(os.path.join(d, "want.npy"), outs[0].astype(np.float32))
        written.append(d)
    return written


def check_prepared(binary, engine, set_dirs):
    """Imports and runs each prepared data set (prepare_sets) on `engine`: (status, detail)."""
    worst = 0.0
    for d in set_dirs:
        set_name = os.path.basename(d)
        path = os.path.join(d, "model.onnx")
        xin, want = os.path.join(d, "x.npy"), np.load(os.path.join(d, "want.npy"))
        # Import first: a refusal (every message starting with the model's path) is a skip with its
        # reason; a netdef the importer wrote that does not load or run is a failure.
        netdef = os.path.join(d, "net.yaml")
        r = subprocess.run([binary, "import", path, netdef], capture_output=True, text=True)
        if r.returncode != 0:
            msg = r.stderr.strip()
            if msg.startswith("cnnrun: " + path + ": "):
                raise Skip(msg[len("cnnrun: " + path + ": "):])
            return "fail", f"{set_name}: import failed: {msg}"
        dump = os.path.join(d, "y.npy")
        r = subprocess.run([binary, netdef, "--data", xin, "--data-format", "npy", "--engine", engine, "--dump", dump,
                            "--quiet"], capture_output=True, text=True)
        if r.returncode != 0:
            msg = r.stderr.strip()
            if "no usable GPU" in msg:
                raise Skip(msg)
            return "fail", f"{set_name}: cnnrun failed: {msg}"
        ours = np.load(dump)
        n = np.load(xin, mmap_mode="r").shape[0]
        if want.ndim < 1 or want.shape[0] != n or ours.size != want.size:
            return "fail", f"{set_name}: output {list(ours.shape)}, expected {list(want.shape)}"
        ours = ours.reshape(want.shape)
        bad = ~(np.abs(ours - want) <= ATOL + RTOL * np.abs(want))
        err = float(np.max(np.abs(ours - want))) if want.size else 0.0
        worst = max(worst, err)
        if bad.any():
            i = np.unravel_index(int(np.argmax(bad)), want.shape)
            return "fail", (f"{set_name}: {int(bad.sum())}/{want.size} values off, first at {list(i)}: "
                            f"{ours[i]:.9g} vs {want[i]:.9g}")
    return "pass", f"{len(set_dirs)} data set(s), max abs error {worst:.2e}"


def run_case(binary, case, engine, tmp):
    """Returns (status, detail): status pass | fail | skip."""
    return check_prepared(binary, engine, prepare_sets(case, tmp))


def one(binary, case, engine):
    with tempfile.TemporaryDirectory() as tmp:
        try:
            status, detail = run_case(binary, case, engine, tmp)
        except Skip as s:
            status, detail = "skip", str(s)
    return status, detail


def table(binary, roots, doc, listing):
    rows, supported = [], []
    for root in roots:
        for name in sorted(os.listdir(root)):
            case = os.path.join(root, name)
            if not os.path.exists(os.path.join(case, "model.onnx")):
                rows.append((os.path.basename(root), name, "skip", "no model.onnx in the package (a download URL only)"))
                continue
            status, detail = one(binary, case, "cpu")
            rows.append((os.path.basename(root), name, status, detail))
            if status != "skip":
                supported.append(f"{os.path.basename(root)}/{name}")
            print(f"{status:4} {name}: {detail}", file=sys.stderr)
    n_pass = sum(r[2] == "pass" for r in rows)
    n_fail = sum(r[2] == "fail" for r in rows)
    n_skip = sum(r[2] == "skip" for r in rows)
    with open(doc, "w") as f:
        f.write("# ONNX conformance\n\n")
        f.write("Generated by `tests/onnx_conformance.py --table` (see docs/onnx.md) from Debian's "
                "libonnx-testdata (`/usr/include/onnx/backend/test/data/`), on the CPU engine: each case's "
                "model imported in memory, its first input as float32 .npy, the output against ONNX's expected "
                f"output with rtol {RTOL:g}, atol {ATOL:g}. Do not edit by hand.\n\n")
        f.write(f"**{len(rows)} cases: {n_pass} passed, {n_fail} failed, {n_skip} skipped.**\n\n")
        reasons = {}
        for r in rows:
            if r[2] != "skip":
                continue
            d = r[3]
            key = ("input is not a float32 N x C x H x W or N x F batch" if "is not a float32 N x C" in d or
                   "is not a numeric tensor" in d or "cnnrun networks take" in d else
                   "ops or attributes cnnrun has no layer for" if "cannot import" in d else
                   "opset or IR version outside 7-21 / 3-10" if "is not supported (" in d and ("opset" in d or "IR" in d)
                   else "several outputs or inputs" if "outputs" in d or "inputs" in d else
                   "no model in the package" if "download" in d else "other (see the row)")
            reasons[key] = reasons.get(key, 0) + 1
        f.write("| skipped because | cases |\n| --- | --- |\n")
        for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]):
            f.write(f"| {k} | {v} |\n")
        f.write("\n")
        f.write("| suite | case | result | detail |\n| --- | --- | --- | --- |\n")
        for suite, name, status, detail in rows:
            d = detail.replace("|", "\\|").replace("\n", " ")
            if len(d) > 300:
                d = d[:297] + "..."
            f.write(f"| {suite} | {name} | {status} | {d} |\n")
    with open(listing, "w") as f:
        f.write("# Cases that import (generated by tests/onnx_conformance.py --table); one ctest entry each.\n")
        for s in supported:
            f.write(s + "\n")
    print(f"{len(rows)} cases: {n_pass} passed, {n_fail} failed, {n_skip} skipped", file=sys.stderr)
    return 0 if n_fail == 0 else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("case", nargs="?")
    ap.add_argument("--engine", default="cpu")
    ap.add_argument("--table", nargs="+")
    ap.add_argument("--doc")
    ap.add_argument("--list")
    ap.add_argument("--export", metavar="DIR",
                    help="write the cases of tests/onnx_cases.txt (CASE is their root) as model.onnx, x.npy and "
                         "want.npy under DIR, for a machine without the onnx package or libonnx-testdata")
    ap.add_argument("--exported", metavar="DIR", help="check every case --export wrote under DIR (NumPy only)")
    a = ap.parse_args()
    if a.export:
        listing = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx_cases.txt")
        names = [ln.strip() for ln in open(listing) if ln.strip() and not ln.startswith("#")]
        for n in names:
            try:
                prepare_sets(os.path.join(a.case, n), os.path.join(a.export, n.replace("/", "_")))
            except Skip as e:
                print(f"{n}: skipped: {e}", file=sys.stderr)
        print(f"{len(names)} cases written under {a.export}")
        return 0
    if a.exported:
        counts = {"pass": 0, "fail": 0, "skip": 0}
        for name in sorted(os.listdir(a.exported)):
            root = os.path.join(a.exported, name)
            try:
                status, detail = check_prepared(a.binary, a.engine,
                                                sorted(os.path.join(root, d) for d in os.listdir(root)))
            except Skip as e:
                status, detail = "skip", str(e)
            counts[status] += 1
            print(f"{status:4} {name}: {detail}")
        print(f"{sum(counts.values())} cases on the {a.engine} engine: {counts['pass']} passed, {counts['fail']} failed, "
              f"{counts['skip']} skipped")
        return 1 if counts["fail"] else 0
    if a.table:
        return table(a.binary, a.table, a.doc, a.list)
    if not os.path.exists(os.path.join(a.case, "model.onnx")):
        print(f"skipped: {a.case} is not installed (libonnx-testdata)")
        return SKIP
    status, detail = one(a.binary, a.case, a.engine)
    print(f"{os.path.basename(a.case)}: {status}: {detail}")
    return {"pass": 0, "fail": 1, "skip": SKIP}[status]


if __name__ == "__main__":
    sys.exit(main())
