#!/usr/bin/env bash
# ctest run_spread: bench/run_spread.py finds the layers whose algorithm differs between runs of
# one command and says what each run ran. First on two written reports (one layer's pick and its
# auto timings differ, one layer's time only; with --moved, the layers whose time moved most), then
# running cnnrun twice on the CPU (the thesis network, 20 images): two rows, no layer differs. The
# times the script prints from running are never checked (the written reports' are fixed numbers).
#   tests/run_spread.sh CNNRUN_BINARY SOURCE_DIR SHARED_DIR
set -uo pipefail
bin=$1
src=$2
shared=$3
py=/usr/bin/python3
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail() { echo "FAIL: $*"; cat "$w/out" 2>/dev/null; exit 1; }
# Two reports as engine/report.cpp writes them: conv "b" picked cudnn in one, gemm in the other.
cat >"$w/a.json" <<'J'
{"times": {"forward_s": 0.004}, "layers": [{"name": "a", "algo": "stem(x)", "seconds": 0.001}, {"name": "b", "algo": "cudnn graph:eng4(fused bias)", "seconds": 0.002}, {"name": "p", "algo": "", "seconds": 0.0005}],
 "notes": ["gpu: auto b (2000 images): implicit n/a; cudnn 0.014 ms; gemm 0.015 ms -> cudnn",
           "gpu: setup (weights, workspaces, algorithm search, upload of the resident pixels) 1500.000 ms, not in the forward time"]}
J
cat >"$w/b.json" <<'J'
{"times": {"forward_s": 0.005}, "layers": [{"name": "a", "algo": "stem(x)", "seconds": 0.0012}, {"name": "b", "algo": "gemm(cuBLASLt, bias epilogue)", "seconds": 0.003}, {"name": "p", "algo": "", "seconds": 0.0004}],
 "notes": ["gpu: auto b (2000 images): implicit n/a; cudnn 0.016 ms; gemm 0.015 ms -> gemm (tuned earlier)"]}
J
$py "$src/bench/run_spread.py" --from "$w/a.json" "$w/b.json" >"$w/out" 2>&1 || fail "--from exited non-zero"
cat "$w/out"
grep -q "^| 1 (a.json) | 4.000 | 1.5 | 0 |$" "$w/out" || fail "run 1's row"
grep -q "^| 2 (b.json) | 5.000 | - | 1 |$" "$w/out" || fail "run 2's row (one layer unlike run 1)"
grep -q "spread 22.2 %" "$w/out" || fail "the spread ((5 - 4) / 4.5)"
grep -q "layers whose algorithm differs between runs: 1 of 3" "$w/out" || fail "the count of differing layers"
grep -q "^- b$" "$w/out" || fail "layer b listed"
grep -q "run 1: cudnn graph:eng4(fused bias)  \[auto: cudnn 0.014, gemm 0.015 -> cudnn\]" "$w/out" ||
  fail "run 1's pick and auto timings"
grep -q "run 2: gemm(cuBLASLt, bias epilogue)  \[auto: cudnn 0.016, gemm 0.015 -> gemm\]" "$w/out" ||
  fail "run 2's pick and auto timings"
grep -q "^- a$" "$w/out" && fail "layer a listed though both runs ran the same"
grep -q "layers whose time moved" "$w/out" && fail "the moved layers listed without --moved"
# --moved 2: the two layers whose time changed most (b by 1 ms, a by 0.2), b first; p (0.1) left out.
$py "$src/bench/run_spread.py" --moved 2 --from "$w/a.json" "$w/b.json" >"$w/out" 2>&1 || fail "--moved exited non-zero"
cat "$w/out"
grep -A4 "layers whose time moved most, run 1 -> run 2 (b.json):" "$w/out" >"$w/moved" || fail "the moved layers' heading"
sed -n 4p "$w/moved" | grep -q "^| b | 2.000 | 3.000 | +50.0 % | cudnn graph:eng4(fused bias) / gemm(cuBLASLt, bias epilogue) |$" ||
  fail "layer b's row (first: it moved most)"
sed -n 5p "$w/moved" | grep -q "^| a | 1.000 | 1.200 | +20.0 % | stem(x) |$" || fail "layer a's row (one algorithm)"
grep -q "^| p |" "$w/out" && fail "layer p listed beyond --moved 2"
# The auto note's wording, as engine/report.cpp's tuning_note writes it (the fixtures above copy it).
grep -q '"gpu: auto " + t.layer + " (" + std::to_string(t.images) + " images):"' "$src/engine/report.cpp" &&
  grep -q '" -> " + t.chosen' "$src/engine/report.cpp" ||
  fail "engine/report.cpp's auto note changed: update bench/run_spread.py's AUTO_NOTE"
echo '{"layers": []}' >"$w/bad.json"
$py "$src/bench/run_spread.py" --from "$w/a.json" "$w/bad.json" >"$w/out" 2>&1 && fail "a report without times accepted"
grep -q "not a cnnrun report" "$w/out" || fail "the refusal names what is wrong"
# Running: the thesis network twice on the CPU.
[ -d "$shared/models/convnetjs-cifar10" ] || { echo "skipped the run: no $shared/models/convnetjs-cifar10"; exit 0; }
$py "$src/bench/run_spread.py" --runs 2 --out "$w/runs" -- "$bin" "$src/netdefs/cifar10.yaml" --assets "$shared" \
  --engine cpu --batch 20 --quiet >"$w/out" 2>&1 || fail "running cnnrun twice"
cat "$w/out"
[ -s "$w/runs/run_1.json" ] && [ -s "$w/runs/run_2.json" ] || fail "the runs' reports"
grep -q "^| 2 (run_2.json) | [0-9.]* | - | 0 |$" "$w/out" || fail "run 2's row"
grep -q "layers whose algorithm differs between runs: 0 of " "$w/out" || fail "the CPU's picks differed"
$py "$src/bench/run_spread.py" --runs 1 --out "$w/runs" -- "$bin" "$src/netdefs/cifar10.yaml" --json x.json \
  >"$w/out" 2>&1 && fail "a command with its own --json accepted"
echo "run_spread: ok"
