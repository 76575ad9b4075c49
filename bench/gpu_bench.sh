#!/usr/bin/env bash
# Benchmark (not a test): cnnrun on the GPU, with each convolution algorithm and auto, against
# PyTorch + cuDNN on the same GPU, the same network (netdefs/cifar10.yaml), the same ConvNetJS
# weights and the same images (the 2000-image CIFAR-10 sample cycled to N). One command on a
# GPU host; nothing is built here. Prints ONE table last.
#
#   bench/gpu_bench.sh [SIZES...]          default sizes: 10000 50000
#
# Environment: CARRY (default .carry) holds cnnrun and shared/ (models/convnetjs-cifar10,
# data/cifar10-sample/train_2000.bin), the layout of scripts/device_check.sh; REPEATS (default
# 7, at least 5); ALGOS (default "implicit im2col cudnn auto"); PYTHON (default python3, the
# one with torch); CUDNN_LIB (default: the cuDNN inside PyTorch's venv when it is there), put
# first on cnnrun's library path so that both sides run the same cuDNN; LOGS (default
# /tmp/gpu_bench): where logs, JSON and .npy files go; with OUT set (the device tool's return
# folder), they come back as $OUT/gpu_bench.tgz and the table as $OUT/table.txt.
#
# What is timed:
# - cnnrun: `--repeat R`, each run the whole batch from the data set's uint8 pixels in pinned
#   host memory to predictions in host memory (H2D copies, preprocess, layers, argmax, D2H), the
#   median of R runs (each run warms up on its first block off the clock). Its error: the max
#   relative error of `--validate --validate-images 500` over all layers (tolerance 1e-4), and
#   the max abs difference of its output probabilities (--dump) from the CPU reference's.
# - PyTorch (bench/pytorch_gpu.py): eager / CUDA graph / tf32 / fp16 with the input already on
#   the GPU as float32, and eager end to end from pinned uint8 host memory to host predictions;
#   the median of R timed runs. Its error: the max abs difference of its probabilities from the
#   CPU reference's (cnnrun --engine cpu --dump on the 2000 distinct images).
# "vs eager" is PyTorch eager fp32 (input on GPU) over the row's time, "vs e2e" PyTorch's end to end
# time over the row's: > 1 means faster than it. cnnrun's time always includes its copies.
set -uo pipefail
cd "$(dirname "$0")/.."
C=${CARRY:-.carry}
O=${LOGS:-/tmp/gpu_bench}
R=${REPEATS:-7}
PY=${PYTHON:-python3}
SIZES=${*:-10000 50000}
ALGOS=${ALGOS:-implicit im2col cudnn auto}
mkdir -p "$O"
[ "$R" -ge 5 ] || { echo "gpu_bench: REPEATS must be at least 5" >&2; exit 2; }
shared=$PWD/$C/shared
data=$shared/data/cifar10-sample/train_2000.bin
models=$shared/models/convnetjs-cifar10
[ -x "$C/cnnrun" ] && [ -f "$data" ] && [ -d "$models" ] || {
  echo "gpu_bench: need $C/cnnrun and $C/shared/{data/cifar10-sample/train_2000.bin,models/convnetjs-cifar10}" >&2
  exit 1
}
torch_cudnn=$($PY -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
CUDNN_LIB=${CUDNN_LIB:-$torch_cudnn}
[ -n "$CUDNN_LIB" ] && export LD_LIBRARY_PATH=$CUDNN_LIB:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.used --format=csv,noheader | tee "$O/gpu.txt"
echo "cnnrun's cuDNN: $(ldd "$C/cnnrun" | grep -m1 libcudnn.so | awk '{print $3}')" | tee -a "$O/gpu.txt"

# The CPU reference's probabilities for the distinct images.
"$C/cnnrun" netdefs/cifar10.yaml --engine cpu --assets "$shared" --dump "$O/ref.npy" --quiet >"$O/ref.log" 2>&1 ||
  { echo "gpu_bench: CPU reference failed:"; cat "$O/ref.log"; exit 1; }

for n in $SIZES; do
  for algo in $ALGOS; do
    "$C/cnnrun" netdefs/cifar10.yaml --engine gpu --batch "$n" --cycle --conv-algo "$algo" --repeat "$R" \
      --validate --validate-images 500 --assets "$shared" --json "$O/cnnrun_${algo}_$n.json" \
      --dump "$O/cnnrun_${algo}_$n.npy" >"$O/cnnrun_${algo}_$n.log" 2>&1
    echo "cnnrun $algo $n: exit $?" >>"$O/status.txt"
  done
done

PYTHONUNBUFFERED=1 $PY bench/pytorch_gpu.py --models "$models" --data "$data" --sizes $SIZES --repeats "$R" \
  --ref "$O/ref.npy" >"$O/torch.jsonl" 2>"$O/torch.err" || { echo "pytorch failed:"; tail -5 "$O/torch.err"; }

$PY - "$O" "$SIZES" "$ALGOS" <<'PY' | tee "$O/table.txt"
import glob, json, os, sys
import numpy as np
out, sizes, algos = sys.argv[1], [int(s) for s in sys.argv[2].split()], sys.argv[3].split()
ref = np.load(f"{out}/ref.npy")
torch_rows = [json.loads(l) for l in open(f"{out}/torch.jsonl") if l.strip().startswith("{")]
gpu = open(f"{out}/gpu.txt").read().strip().replace("\n", "; ")
cudnn = ""
print(f"\n=== gpu_bench: {gpu}")
for n in sizes:
    rows = []
    for algo in algos:
        path = f"{out}/cnnrun_{algo}_{n}.json"
        if not os.path.exists(path):
            rows.append((f"cnnrun {algo}", "FAILED (see log)", None, None, None, None, None, None))
            continue
        j = json.load(open(path))
        cudnn = next((x.split(";")[1].strip() for x in j["notes"] if x.startswith("gpu:") and "cuDNN" in x), cudnn)
        times = next((x for x in j["notes"] if x.startswith("--repeat")), "")
        ts = [float(v) for v in times.split("(ms)")[1].split(";")[0].split()] if times else []
        v = j.get("validation", {})
        rel = max((c.get("max_rel", 0.0) for c in v.get("layers", [])), default=None)
        probs = np.load(f"{out}/cnnrun_{algo}_{n}.npy")
        dp = float(np.abs(probs - ref[np.arange(n) % len(ref)]).max())
        ok = "pass" if v.get("pass") else "FAIL"
        rows.append((f"cnnrun {algo}", "uint8 host -> host preds", j["times"]["forward_s"] * 1e3,
                     (min(ts), max(ts)) if ts else None, j["accuracy_percent"], dp, f"{rel:.1e} {ok}", len(ts)))
    for t in torch_rows:
        if t["images"] == n:
            rows.append((t["variant"], t["what"], t["median_ms"], (t["min_ms"], t["max_ms"]), t["accuracy_percent"],
                         t.get("max_abs_prob_diff"), "-", t["runs"]))
    eager = next((r[2] for r in rows if r[0] == "pytorch eager fp32"), None)
    e2e = next((r[2] for r in rows if r[0] == "pytorch e2e fp32"), None)
    runs = next((r[7] for r in rows if r[7]), "?")
    print(f"\n{n} images (sample cycled); {cudnn}; medians of {runs} runs")
    print(f"{'variant':<24} {'timed':<34} {'median ms':>9} {'min..max':>13} {'vs eager':>8} {'vs e2e':>7} "
          f"{'accuracy':>8} {'max|dp| vs CPU':>14} {'validate max rel':>16}")
    for name, what, ms, mm, acc, dp, val, _ in rows:
        if ms is None:
            print(f"{name:<24} {what}")
            continue
        sp = f"{eager / ms:.2f}x" if eager else "-"
        se = f"{e2e / ms:.2f}x" if e2e else "-"
        mms = f"{mm[0]:.2f}..{mm[1]:.2f}" if mm else "-"
        dps = f"{dp:.1e}" if dp is not None else "-"
        print(f"{name:<24} {what:<34} {ms:>9.2f} {mms:>13} {sp:>8} {se:>7} {acc:>7.2f}% {dps:>14} {val:>16}")
PY
[ -n "${OUT:-}" ] && tar czf "$OUT/gpu_bench.tgz" -C "$O" . && cp "$O/table.txt" "$OUT/"
exit 0
