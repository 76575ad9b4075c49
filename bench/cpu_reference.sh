#!/bin/bash
# Benchmark (not a test): the CPU reference executor against PyTorch on the CPU, both running
# netdefs/cifar10.yaml with the same ConvNetJS weights over the same images (the CIFAR-10 sample
# cycled to N images), both on the same number of threads. Prints one table: forward time,
# images/s, the ratio to PyTorch, and accuracy (which must agree; a difference means one side
# reads the weights or data differently).
#
#   bench/cpu_reference.sh [BUILD_DIR] [IMAGES] [THREADS]
#   defaults: build, 50000, all cores; assets from $CNNRUN_SHARED or ../shared beside the repo.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
images=${2:-50000}
threads=${3:-$(nproc)}
shared=${CNNRUN_SHARED:-$root/../shared}
data=$shared/data/cifar10-sample/train_2000.bin
models=$shared/models/convnetjs-cifar10
python=/usr/bin/python3  # Debian's python3-torch lives in the system interpreter

[[ -x $build/cnnrun ]] || { echo "cpu_reference.sh: no $build/cnnrun; build first" >&2; exit 1; }
[[ -f $data && -d $models ]] || { echo "cpu_reference.sh: assets not found under $shared" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "load: $(cut -d' ' -f1-3 /proc/loadavg) (other processes skew the timings)"
"$build/cnnrun" "$root/netdefs/cifar10.yaml" --engine cpu --batch "$images" --cycle --threads "$threads" \
  --data "$data" --weights "$models" --json "$tmp/cnnrun.json" --quiet >/dev/null
torch_ok=1
"$python" "$root/bench/pytorch_cpu.py" --models "$models" --data "$data" --images "$images" \
  --threads "$threads" >"$tmp/torch.json" 2>"$tmp/torch.err" || torch_ok=0

"$python" - "$tmp/cnnrun.json" "$tmp/torch.json" "$torch_ok" "$tmp/torch.err" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
rows = [(c["environment"]["engine"], c["images"], c["times"]["forward_s"], c["accuracy_percent"])]
if sys.argv[3] == "1":
    t = json.loads(open(sys.argv[2]).read())
    rows.append((t["engine"], t["images"], t["forward_s"], t["accuracy_percent"]))
else:
    print("pytorch run failed:", open(sys.argv[4]).read().strip().splitlines()[-1:])
ref = rows[-1][2]
print(f"{'engine':<38} {'images':>7} {'forward s':>10} {'images/s':>9} {'vs pytorch':>10} {'accuracy':>9}")
for name, n, s, acc in rows:
    print(f"{name:<38} {n:>7} {s:>10.3f} {n / s:>9.0f} {s / ref:>9.2f}x {acc:>8.2f}%")
if len(rows) == 2:
    same = abs(rows[0][3] - rows[1][3]) < 1e-9
    print("accuracy agrees" if same else "ACCURACY DIFFERS between cnnrun and PyTorch")
    sys.exit(0 if same else 1)
PY
