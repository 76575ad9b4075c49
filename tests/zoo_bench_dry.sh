#!/usr/bin/env bash
# ctest zoo_bench_dry: bench/zoo_bench.sh's CPU dry run (DRY=1) on LeNet-5 and ResNet-18 at 3x32x32,
# fp32 and fp16, checked through its zoo_results.json: both networks were expressible and ran,
# validated against the reference, matched PyTorch on the same weights and images (x-check), the
# fp16 rows carry cnnrun's own refusal (the CPU computes in FP32), and the header names the
# commit the binary says it was built from; the GPU setup column's parser reads the report's
# note as engine/report.cpp writes it; both sides had two warm-up runs. Then bench/zoo_merge.py joins
# it with a second run (the thesis network) into one table and refuses what it must. Times are
# printed by the script, never checked. torch.compile's rows (by default, in two modes, none with
# COMPILE=0) and the refusal of an unknown mode. Then GPUS=2 (bench/zoo_parallel.py) as two processes;
# last, BASELINE_ARGS (the same binary with other options as the baseline).
# Skipped (77) without a python3 that imports torch and torchvision.
#   tests/zoo_bench_dry.sh CNNRUN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1
src=$2
py=/usr/bin/python3
$py -c 'import torch, torchvision' 2>/dev/null || { echo "skipped: $py has no torch and torchvision"; exit 77; }
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
# bench/zoo_merge.py on the files after the first two arguments must refuse them (exit 2) with the
# first argument in its message; the second says what went wrong if it does not.
expect_refusal() {
  local what=$1 fail=$2 rc
  shift 2
  $py "$src/bench/zoo_merge.py" "$@" >"$w/refused.log" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q "$what" "$w/refused.log" || { cat "$w/refused.log"; echo "FAIL: $fail (exit $rc)"; exit 1; }
}
if ! DRY=1 CNNRUN="$bin" NETS="lenet5 resnet18" SIZES=32 PRECISIONS="fp32 fp16" PYTHON=$py WORK="$w/work" \
  OUT="$w/out" COMMIT= bash "$src/bench/zoo_bench.sh" >"$w/log" 2>&1; then
  cat "$w/log"
  echo "FAIL: bench/zoo_bench.sh exited non-zero"
  exit 1
fi
cat "$w/out/zoo_table.md"
grep -q "| cnnrun img/s | cnnrun TFLOP/s | cnnrun setup s | validation max rel" "$w/out/zoo_table.md" ||
  { echo "FAIL: the table's header lacks its columns"; exit 1; }
# Both sides' medians come after two warm-up runs: cnnrun's with --warmup 2, in its report.
grep -q "after two warm-up runs on both sides" "$w/out/zoo_table.md" ||
  { echo "FAIL: the table does not say that both sides had two warm-up runs"; exit 1; }
grep -q '"--warmup 2: forward times (ms) ' "$w/work/logs/cnnrun_lenet5_28_fp32.json" ||
  { echo "FAIL: cnnrun's report of the lenet5 fp32 row has no --warmup 2 note"; exit 1; }
# The GPU setup column's parser, on the report note's exact wording (engine/report.cpp).
$py -c "
import sys
sys.path.insert(0, '$src/bench')
import zoo_bench
note = 'gpu: setup (weights, workspaces, algorithm search, upload of the resident pixels) 3361.316 ms, not in the forward time'
assert zoo_bench.setup_seconds(['gpu: 3 blocks', note]) == 3.361316, 'setup note not parsed'
assert zoo_bench.setup_seconds(['gpu: 3 blocks']) is None
# A validation whose layer error is NaN (JSON null) is a NaN row, not a crash of the whole network.
import math
assert zoo_bench.validation_max_rel({'layers': [{'max_rel': 0.5}, {'name': 'f'}, {'max_rel': 0.25}]}) == 0.5
assert math.isnan(zoo_bench.validation_max_rel({'layers': [{'max_rel': 0.5}, {'max_rel': None}]}))
assert zoo_bench.validation_max_rel({}) is None
# A row whose PyTorch ways were cut short by the time budget has its ratio marked as a bound.
import argparse, zoo_table
row = {'title': 'N', 'input': '3x8x8', 'images': 10, 'precision': 'fp16', 'xcheck': 0.0,
       'cnnrun': {'median_ms': 1.0, 'resident': True},
       'torch': {'best': {'median_ms': 3.0, 'way': 'w'}, 'ways': [{'way': 'w', 'median_ms': 3.0}]}}
ns = argparse.Namespace(baseline='', dry=False, notes_text='')
assert '| 3.00x |' in zoo_table.table(ns, [row], 'h'), 'a whole row lost its ratio'
# The arithmetic rate from cnnrun's report: 10 images of 12.5 M multiply-adds in 1 ms is 0.25 TFLOP/s.
row['cnnrun']['flops_per_s'] = 2 * 12.5e6 * 10 / 1e-3
assert '| 0.25 |' in zoo_table.table(ns, [row], 'h'), 'the TFLOP/s column is missing'
del row['cnnrun']['flops_per_s']
row['torch']['ways'].append({'way': 'v', 'error': 'skipped: over the time budget'})
assert '| 3.00x at most (1 of PyTorch' in zoo_table.table(ns, [row], 'h'), 'a cut-short row is not marked'
# The compiled predictions' agreement with eager's.
import torch
assert zoo_bench.agreement(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 0, 4])) == 0.75
assert zoo_bench.agreement(torch.tensor([1, 2]), torch.tensor([1, 2, 3])) == 0.0
# Ways not run for the time budget are rows that say so: here the budget runs out after the first
# eager way, so the second and torch.compile are skipped rows (and the table marks the ratio).
class NoMem:
    def ok(self):
        return False
calls = [0]
def spent():
    calls[0] += 1
    return calls[0] > 2  # the precision and its first way start, nothing after
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5)).eval()
ns = argparse.Namespace(repeats=5, compile=['default'], compile_timeout=60.0, over_budget=spent)
got = [(w['way'], 'median_ms' in w, w.get('error')) for w in
       zoo_bench.torch_rows(ns, model, torch.rand(6, 3, 8, 8), ['fp32'], False, NoMem(), 0)['fp32']['ways']]
skip = 'skipped: over the time budget'
assert got == [('eager fp32 NCHW', True, None), ('eager fp32 channels_last', False, skip),
               ('torch.compile default of eager fp32 NCHW', False, skip)], got
# A compile that takes too long is stopped with the row's message (a sleep far beyond the limit).
import time
try:
    with zoo_bench.time_limit(0.2, 'did not compile in 0 s'):
        time.sleep(30)
    raise AssertionError('time_limit did not stop the sleep')
except TimeoutError as e:
    assert str(e) == 'did not compile in 0 s', e
with zoo_bench.time_limit(30, 'x'):
    pass
time.sleep(0.3)  # the timer was cancelled on leaving: no late TimeoutError
" || { echo "FAIL: setup_seconds, validation_max_rel, the skipped ways or time_limit"; exit 1; }
grep -q '"gpu: setup (weights, workspaces, algorithm search, "' "$src/engine/report.cpp" &&
  grep -q '", not in the forward time"' "$src/engine/report.cpp" ||
  { echo "FAIL: engine/report.cpp's setup note changed: update bench/report_notes.py's setup_seconds"; exit 1; }
version=$("$bin" --version)
$py - "$w/out/zoo_results.json" "$version" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
commit = re.search(r"\(commit ([^)]*)\)", sys.argv[2]).group(1)
errors = []
if f"commit {commit};" not in d["header"]:
    errors.append(f"header {d['header']!r} does not name the binary's commit {commit}")
rows = {r["net"]: r for r in d["results"]}
for net, size in (("lenet5", "1x28x28"), ("resnet18", "3x32x32")):
    r = rows.get(net)
    if r is None:
        errors.append(f"{net}: no row")
        continue
    if r["input"] != size:
        errors.append(f"{net}: input {r['input']}, expected {size}")
    c = r["cnnrun"].get("fp32", {})
    if c.get("rc") != 0 or not c.get("validate_pass") or c.get("median_ms", 0) <= 0 or c.get("runs") != 5 \
            or "setup_s" not in c or c["setup_s"] is not None:  # the CPU engine reports no GPU setup
        errors.append(f"{net} fp32: cnnrun row {c}")
    if not r.get("xcheck_max_rel", 1) < 1e-4:
        errors.append(f"{net}: x-check {r.get('xcheck_max_rel')} (not the same weights and images?)")
    if "torch" not in r or "best" not in r["torch"].get("fp32", {}):
        errors.append(f"{net} fp32: no PyTorch time")
    if not any(w["way"].startswith("torch.compile default of ") for w in r.get("torch", {}).get("fp32", {}).get("ways", [])):
        errors.append(f"{net} fp32: no torch.compile default row (COMPILE unset)")
    h = r["cnnrun"].get("fp16", {})
    if h.get("rc") != 2 or "needs --engine gpu" not in h.get("error", ""):
        errors.append(f"{net} fp16: expected cnnrun's refusal on the CPU, got {h}")
for e in errors:
    print("FAIL:", e)
print("zoo_bench dry run:", "ok" if not errors else f"{len(errors)} failures")
sys.exit(1 if errors else 0)
PY
[ $? -eq 0 ] || exit 1
# bench/zoo_merge.py: a second run (the thesis network) and the first as one table, in the zoo's
# order, naming what the zoo still misses; refused for a row in two runs and for two commits.
# This run asks for torch.compile in two modes (COMPILE=1,max-autotune: 1 is default): a row of each
# among PyTorch's ways, timed where this torch has torch.compile, a one-line error row where it has
# not (Debian's).
if ! DRY=1 CNNRUN="$bin" NETS="thesis" PRECISIONS="fp32" PYTHON=$py WORK="$w/work2" OUT="$w/out2" COMMIT= \
  COMPILE=1,max-autotune bash "$src/bench/zoo_bench.sh" >"$w/log2" 2>&1; then
  cat "$w/log2"
  echo "FAIL: bench/zoo_bench.sh (thesis) exited non-zero"
  exit 1
fi
$py - "$w/out2/zoo_results.json" "$w/out2/zoo_table.md" <<'PY' || exit 1
import json, sys
import torch
d = json.load(open(sys.argv[1]))
ways = d["results"][0]["torch"]["fp32"]["ways"]
c = [w for w in ways if w["way"].startswith("torch.compile ")]
errors = []
if [w["way"].split(" of ")[0] for w in c] != ["torch.compile default", "torch.compile max-autotune"]:
    errors.append(f"expected torch.compile default and max-autotune rows, got {[w['way'] for w in ways]}")
for w in c:
    if hasattr(torch, "compile"):
        if not (w.get("median_ms", 0) > 0 and w.get("compile_s") is not None and w.get("agree", 0) > 0.99):
            errors.append(f"torch.compile row without a time, a compile time or the eager way's classes: {w}")
    elif f"torch {torch.__version__} has no torch.compile" != w.get("error"):
        errors.append(f"torch.compile row on a torch without it: {w}")
if "torch.compile (default, max-autotune; freezing, static shapes)" not in open(sys.argv[2]).read():
    errors.append("the table's notes do not name torch.compile's mode")
for e in errors:
    print("FAIL (COMPILE=1,max-autotune):", e)
sys.exit(1 if errors else 0)
PY
# The compile path itself on this torch, with a stand-in torch.compile that returns the model as it
# is (Debian's torch has none): the row is timed, its compile time recorded, its predictions agree
# with the eager way's on every image, and inductor's freezing was asked for.
(cd "$src" && $py - "$bin" "$w/work_stub" <<'PY') || { echo "FAIL: the torch.compile path with a stand-in"; exit 1; }
import json, os, sys, types
import torch
cfg = types.ModuleType("torch._inductor.config")
ind = types.ModuleType("torch._inductor")
ind.config = cfg
sys.modules["torch._inductor"], sys.modules["torch._inductor.config"] = ind, cfg
calls = []
torch.compile = lambda m, mode=None, dynamic=None: calls.append((mode, dynamic)) or m
torch._dynamo = types.SimpleNamespace(reset=lambda: calls.append("reset"))
sys.path.insert(0, "bench")
import zoo_bench
binary, work = sys.argv[1], sys.argv[2]
sys.argv = ["zoo_bench.py", "--cnnrun", binary, "--work", work, "--nets", "thesis",
            "--precisions", "fp32", "--dry", "--compile", "max-autotune"]
assert zoo_bench.main() == 0
d = json.load(open(os.path.join(work, "logs", "zoo_results.json")))
w = [w for w in d["results"][0]["torch"]["fp32"]["ways"] if w["way"].startswith("torch.compile")]
errors = []
if len(w) != 1 or not (w[0].get("median_ms", 0) > 0 and w[0].get("compile_s") is not None):
    errors.append(f"compile rows {w}")
elif w[0].get("agree") != 1.0 or not w[0].get("agree_with", "").startswith("eager fp32"):
    errors.append(f"the stand-in's predictions do not agree with eager's: {w[0]}")
if calls != [("max-autotune", False), "reset"]:
    errors.append(f"torch.compile / reset calls {calls}")
if getattr(cfg, "freezing", None) is not True:
    errors.append("inductor's freezing was not set")
for e in errors:
    print("FAIL (compile path):", e)
sys.exit(1 if errors else 0)
PY
COMPILE=fastest DRY=1 CNNRUN="$bin" NETS="thesis" PRECISIONS="fp32" PYTHON=$py WORK="$w/work_bad" \
  bash "$src/bench/zoo_bench.sh" >"$w/log3" 2>&1 && { echo "FAIL: COMPILE=fastest accepted"; exit 1; }
grep -q "unknown torch.compile mode 'fastest'" "$w/log3" || { cat "$w/log3"; echo "FAIL: COMPILE=fastest's message"; exit 1; }
$py "$src/bench/zoo_merge.py" "$w/out/zoo_results.json" "$w/out2/zoo_results.json" --out "$w/merged" >"$w/m.log" 2>&1 ||
  { cat "$w/m.log"; echo "FAIL: zoo_merge.py exited non-zero"; exit 1; }
cat "$w/merged/zoo_table.md"
$py - "$w/merged/zoo_table.md" <<'PY' || exit 1
import sys
t = open(sys.argv[1]).read()
rows = [l.split("|")[1].strip() + " " + l.split("|")[4].strip() for l in t.splitlines()
        if l.startswith("| ") and not l.startswith("| network") and "---" not in l]
want = ["thesis CIFAR-10 net fp32", "LeNet-5 fp32", "LeNet-5 fp16", "ResNet-18 fp32", "ResNet-18 fp16"]
missing = next((l for l in t.splitlines() if l.startswith("- Missing from the zoo: ")), "")
errors = []
if rows != want:
    errors.append(f"rows {rows}, expected {want} (the zoo's order)")
for m in ("LeNet-5 tf32/bf16", "ResNet-18 32x32 tf32/bf16", "ResNet-18 224x224 fp32/tf32/fp16/bf16",
          "VGG-11-BN 32x32", "thesis CIFAR-10 net tf32/fp16/bf16", "Fashion-MNIST net fp32/tf32/fp16/bf16"):
    if m not in missing:
        errors.append(f"the missing rows' note lacks '{m}': {missing!r}")
if "after two warm-up runs on both sides" not in t:
    errors.append("the merged notes do not say both sides had two warm-up runs")
for e in errors:
    print("FAIL (zoo_merge):", e)
sys.exit(1 if errors else 0)
PY
expect_refusal "is in both" "zoo_merge.py took a row from two runs" "$w/out/zoo_results.json" "$w/out/zoo_results.json"
sed 's/ commit \([^;]*\);/ commit someother;/' "$w/out2/zoo_results.json" >"$w/other.json"
expect_refusal "cnnrun commit 'someother'" "zoo_merge.py merged runs of two commits" "$w/out/zoo_results.json" \
  "$w/other.json"
for f in out/zoo_results.json out2/zoo_results.json; do
  sed 's/ commit \([^;]*\);/ commit unknown (set COMMIT=);/' "$w/$f" >"$w/unknown_${f%%/*}.json"
done
expect_refusal "runs of unknown commits cannot be shown to be of one commit" \
  "zoo_merge.py merged two runs of unknown commits" "$w/unknown_out.json" "$w/unknown_out2.json"
echo "zoo_merge: ok"
# GPUS=2 (bench/zoo_parallel.py): the jobs spread over two processes at once, one table of all
# their rows with one header, a zoo_results.json that bench/zoo_merge.py reads like any run's,
# each job's own results in OUT/zoo_jobs.tgz, each process's logs apart; and the plan gives each job to
# one GPU, longest first.
if ! COMPILE=0 DRY=1 GPUS=2 CNNRUN="$bin" NETS="thesis lenet5 resnet18" SIZES=32 PRECISIONS="fp32" PYTHON=$py \
  WORK="$w/work3" OUT="$w/out3" COMMIT= bash "$src/bench/zoo_bench.sh" >"$w/log3" 2>&1; then
  cat "$w/log3"
  echo "FAIL: GPUS=2 bench/zoo_bench.sh exited non-zero"
  exit 1
fi
cat "$w/out3/zoo_table.md"
[ -d "$w/work3/logs/gpu0" ] && [ -d "$w/work3/logs/gpu1" ] ||
  { echo "FAIL: GPUS=2 left no logs of its own for each process"; exit 1; }
$py - "$w/out3" "$src/bench" <<'PY' || exit 1
import json, os, sys
out, bench = sys.argv[1], sys.argv[2]
sys.path.insert(0, bench)
import zoo_parallel as zp
t = open(os.path.join(out, "zoo_table.md")).read()
rows = [l.split("|")[1].strip() for l in t.splitlines()
        if l.startswith("| ") and not l.startswith("| network") and "---" not in l]
errors = []
if rows != ["thesis CIFAR-10 net", "LeNet-5", "ResNet-18"]:
    errors.append(f"rows {rows}, expected the three networks once each in the zoo's order")
if t.count("## Model zoo") != 1:
    errors.append("not one header")
if "Ran as 2 processes at once on the CPU" not in t:
    errors.append("the table does not say that two ran at once")
d = json.load(open(os.path.join(out, "zoo_results.json")))
if "torch.compile" in json.dumps(d["results"]):
    errors.append("COMPILE=0 still ran torch.compile")
if sorted(r["net"] for r in d["results"]) != ["lenet5", "resnet18", "thesis"]:
    errors.append(f"zoo_results.json has {[r['net'] for r in d['results']]}")
# Each job's own results in OUT/zoo_jobs.tgz as it ended (what a run cut short still hands back).
import tarfile
arch = os.path.join(out, "zoo_jobs.tgz")
got = []
if os.path.exists(arch):
    with tarfile.open(arch) as tar:
        got = sorted(tar.getnames())
        per_job = sorted(r["net"] for f in got if f.endswith(".json")
                         for r in json.load(tar.extractfile(f))["results"])
if got != ["lenet5.json", "lenet5.md", "resnet18_32.json", "resnet18_32.md", "thesis.json", "thesis.md"]:
    errors.append(f"OUT/zoo_jobs.tgz holds {got}")
elif per_job != ["lenet5", "resnet18", "thesis"]:
    errors.append(f"OUT/zoo_jobs.tgz's results are of {per_job}")
if any(f.endswith(".part") for f in os.listdir(out)):
    errors.append(f"a partial archive was left in OUT: {os.listdir(out)}")
# bench/zoo_merge.py reads the archive as its jobs' runs: the same rows as the table.
import zoo_merge
if os.path.exists(arch):
    merged = zoo_merge.merge([arch], [32]).text
    mrows = [l for l in merged.splitlines() if l.startswith("| ") and "---" not in l]
    trows = [l for l in t.splitlines() if l.startswith("| ") and "---" not in l]
    if mrows != trows:
        errors.append(f"zoo_merge.py of OUT/zoo_jobs.tgz gives rows {mrows}, the table {trows}")
# The plan: every job once, longest first onto the least loaded GPU.
jobs = zp.jobs_of(["thesis", "resnet18", "vgg11_bn", "googlenet"], [32, 224])
plan = zp.assign(jobs, 3)
placed = sorted(j for js in plan.values() for j in js)
if placed != sorted(jobs):
    errors.append(f"plan {plan} does not hold every job once")
loads = [sum(zp.expected(j) for j in js) for js in plan.values()]
if plan[0][0] != ("vgg11_bn", 224) or max(loads) != zp.expected(("vgg11_bn", 224)):
    errors.append(f"plan {plan}: VGG-11-BN at 224 (the longest) should be alone on the first GPU")
for e in errors:
    print("FAIL (zoo_parallel):", e)
sys.exit(1 if errors else 0)
PY
expect_refusal "is in both" "zoo_merge.py did not read GPUS=2's zoo_results.json as a run" \
  "$w/out3/zoo_results.json" "$w/out2/zoo_results.json"
# The archive counts as its jobs' runs (a row in it and in the merged results: refused), and one
# that is not an archive is refused in one line.
expect_refusal "zoo_jobs.tgz:thesis.json" "zoo_merge.py did not read OUT/zoo_jobs.tgz's jobs as runs" \
  "$w/out3/zoo_jobs.tgz" "$w/out3/zoo_results.json"
printf '{"header": ' >"$w/junk.tgz"
expect_refusal "junk.tgz: not a readable tar archive" "zoo_merge.py took a broken archive" "$w/junk.tgz"
[ "$(wc -l <"$w/refused.log")" -eq 1 ] || { cat "$w/refused.log"; echo "FAIL: the refusal is not one line"; exit 1; }
echo "zoo_parallel: ok"
# BASELINE_ARGS without BASELINE: the baseline is the same binary with those options (a switch's
# before/after in one run), timed on every row right after; they reach the baseline's command
# line only, and the table has the baseline column and says what the baseline had.
if ! COMPILE=0 DRY=1 CNNRUN="$bin" NETS="lenet5" PRECISIONS="fp32" BASELINE_ARGS="--gpu-off graph" PYTHON=$py \
  WORK="$w/work4" OUT="$w/out4" COMMIT= bash "$src/bench/zoo_bench.sh" >"$w/log4" 2>&1; then
  cat "$w/log4"
  echo "FAIL: BASELINE_ARGS bench/zoo_bench.sh exited non-zero"
  exit 1
fi
$py - "$w/out4" "$w/work4/logs" <<'PY' || exit 1
import glob, json, os, sys
out, logs = sys.argv[1], sys.argv[2]
d = json.load(open(os.path.join(out, "zoo_results.json")))
t = open(os.path.join(out, "zoo_table.md")).read()
c = d["results"][0]["cnnrun"]["fp32"]
b = c.get("baseline", {})
errors = []
if not (c.get("rc") == 0 and b.get("rc") == 0 and b.get("median_ms", 0) > 0 and b.get("validate_pass")):
    errors.append(f"the row {c} or its baseline {b}")
if "| ratio | baseline ms (speedup) |" not in t:
    errors.append("the table has no baseline column")
if "The baseline rows (the same binary) also had `--gpu-off graph`." not in t:
    errors.append("the notes do not say what the baseline had")
firsts = {os.path.basename(f): open(f).readline() for f in glob.glob(os.path.join(logs, "cnnrun_*_fp32.log"))}
base = [f for f in firsts if "_baseline_" in f]
if len(base) != 1 or "--gpu-off graph" not in firsts[base[0]] or \
        any("--gpu-off" in l for f, l in firsts.items() if f not in base):
    errors.append(f"the options did not reach the baseline's command line alone: {firsts}")
for e in errors:
    print("FAIL (BASELINE_ARGS):", e)
sys.exit(1 if errors else 0)
PY
echo "baseline args: ok"
