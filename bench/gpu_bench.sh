#!/usr/bin/env bash
# Benchmark (not a test): cnnrun on the GPU, with each convolution algorithm and auto, against
# PyTorch + cuDNN on the same GPU, the same network, the same weights and the same images. One
# command on a GPU host; nothing is built here. Prints ONE table last.
#
#   bench/gpu_bench.sh [SIZES...]          default sizes: 10000 50000
#   NETDEF=fashion bench/gpu_bench.sh 50000
#
# NETDEF: cifar10 (default): netdefs/cifar10.yaml, the ConvNetJS weights, the 2000-image CIFAR-10
# sample cycled to N; fashion: netdefs/fashion-mnist.yaml, netdefs/weights/fashion-mnist.safetensors,
# the 10000 Fashion-MNIST test images (t10k-images-idx3-ubyte[.gz] and its labels, from
# $FASHION_DIR, else $CARRY/fashion-mnist, else /usr/share/datasets/fashion-mnist) cycled to N.
#
# Environment: CARRY (default .carry) holds cnnrun and shared/ (models/convnetjs-cifar10,
# data/cifar10-sample/train_2000.bin), the layout of scripts/device_check.sh; REPEATS (default
# 7, at least 5); ALGOS (default "implicit im2col cudnn auto"); RESIDENT_ALGOS (default
# "implicit auto"; empty for none): the algorithms also timed with --resident; PRECISIONS (default
# "tf32 fp16 bf16"; empty for none): implicit --resident rows at those --precision values (their
# validation tolerance is the format's, see docs/performance.md); PYTHON (default
# python3, the one with torch); CUDNN_LIB (default: the cuDNN inside PyTorch's venv when it is
# there), put first on cnnrun's library path so that both sides run the same cuDNN; LOGS
# (default /tmp/gpu_bench, /tmp/gpu_bench_fashion): where logs, JSON and .npy files go; with OUT
# set (the device tool's return folder), they come back as $OUT/gpu_bench.tgz and the table as
# $OUT/table.txt (NETDEF=fashion: gpu_bench_fashion.tgz, table_fashion.txt).
#
# What is timed:
# - cnnrun: `--warmup 2 --repeat R`, each run the whole batch from the data set's uint8 pixels in
#   pinned host memory to predictions in host memory (H2D copies, preprocess, layers, argmax, D2H),
#   the median of R runs after two warm-up runs, as bench/pytorch_gpu.py's (each run also warms up
#   on its first block off the clock). Its error: the max relative error of `--validate
#   --validate-images 500` over all layers (tolerance 1e-4), and the max abs difference of its
#   output probabilities (--dump) from the CPU reference's.
# - cnnrun ... resident (`--resident`, "forward, input on GPU"): the same, with the distinct
#   images' uint8 pixels uploaded to the GPU before the clock; timed: each block's device-to-device
#   copy of its pixels, preprocess, layers, argmax, and the predictions and (--dump) the output
#   values copied to host memory: 44 bytes per image that PyTorch's forward rows do not copy.
# - PyTorch (bench/pytorch_gpu.py): eager / CUDA graph / tf32 / fp16 with the input already on
#   the GPU as float32, and eager end to end from pinned uint8 host memory to host predictions;
#   the median of R timed runs. Its error: the max abs difference of its probabilities from the
#   CPU reference's (cnnrun --engine cpu --dump on the 2000 distinct images).
# "vs eager" is PyTorch eager fp32 (input on GPU) over the row's time, "vs e2e" PyTorch's end to end
# time over the row's: > 1 means faster than it. cnnrun's time always includes its copies (with
# --resident only device-to-device and the results back).
set -uo pipefail
cd "$(dirname "$0")/.."
C=${CARRY:-.carry}
NET=${NETDEF:-cifar10}
R=${REPEATS:-7}
PY=${PYTHON:-python3}
SIZES=${*:-10000 50000}
ALGOS=${ALGOS:-implicit im2col cudnn auto}
RESIDENT_ALGOS=${RESIDENT_ALGOS-implicit auto}
PRECISIONS=${PRECISIONS-tf32 fp16 bf16}
[ "$R" -ge 5 ] || { echo "gpu_bench: REPEATS must be at least 5" >&2; exit 2; }
[ -x "$C/cnnrun" ] || { echo "gpu_bench: need $C/cnnrun" >&2; exit 1; }
case $NET in
  cifar10)
    O=${LOGS:-/tmp/gpu_bench}
    tag=
    shared=$PWD/$C/shared
    data=$shared/data/cifar10-sample/train_2000.bin
    models=$shared/models/convnetjs-cifar10
    [ -f "$data" ] && [ -d "$models" ] || {
      echo "gpu_bench: need $C/shared/{data/cifar10-sample/train_2000.bin,models/convnetjs-cifar10}" >&2
      exit 1
    }
    netdef=netdefs/cifar10.yaml
    cn_data=(--assets "$shared")
    torch_net=(--models "$models" --data "$data")
    what="sample cycled"
    ;;
  fashion | fashion-mnist)
    O=${LOGS:-/tmp/gpu_bench_fashion}
    tag=_fashion
    data=
    for d in ${FASHION_DIR:-} "$C/fashion-mnist" /usr/share/datasets/fashion-mnist; do
      for f in "$d/t10k-images-idx3-ubyte.gz" "$d/t10k-images-idx3-ubyte"; do
        [ -z "$data" ] && [ -f "$f" ] && data=$(realpath "$f")
      done
    done
    [ -n "$data" ] || {
      echo "gpu_bench: no t10k-images-idx3-ubyte[.gz] in \$FASHION_DIR, $C/fashion-mnist or /usr/share/datasets/fashion-mnist" >&2
      exit 1
    }
    netdef=netdefs/fashion-mnist.yaml
    cn_data=(--data "$data")  # the labels: the same name with images-idx3 -> labels-idx1
    torch_net=(--net fashion --weights netdefs/weights/fashion-mnist.safetensors --data "$data")
    what="Fashion-MNIST test set cycled"
    ;;
  *)
    echo "gpu_bench: NETDEF must be cifar10 or fashion, found '$NET'" >&2
    exit 2
    ;;
esac
mkdir -p "$O"
torch_cudnn=$($PY -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
CUDNN_LIB=${CUDNN_LIB:-$torch_cudnn}
[ -n "$CUDNN_LIB" ] && export LD_LIBRARY_PATH=$CUDNN_LIB:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.used --format=csv,noheader | tee "$O/gpu.txt"
echo "cnnrun's cuDNN: $(ldd "$C/cnnrun" | grep -m1 libcudnn.so | awk '{print $3}')" | tee -a "$O/gpu.txt"

# The CPU reference's probabilities for the distinct images.
"$C/cnnrun" $netdef --engine cpu "${cn_data[@]}" --dump "$O/ref.npy" --quiet >"$O/ref.log" 2>&1 ||
  { echo "gpu_bench: CPU reference failed:"; cat "$O/ref.log"; exit 1; }

# One cnnrun row: bench ALGO N NAME [--resident]; NAME: the files' name ($O/cnnrun_NAME_N.*).
bench() {
  "$C/cnnrun" $netdef --engine gpu --batch "$2" --cycle --conv-algo "$1" --warmup 2 --repeat "$R" "${@:4}" \
    --validate --validate-images 500 "${cn_data[@]}" --json "$O/cnnrun_$3_$2.json" \
    --dump "$O/cnnrun_$3_$2.npy" >"$O/cnnrun_$3_$2.log" 2>&1
  echo "cnnrun $3 $2: exit $?" >>"$O/status.txt"
}
for n in $SIZES; do
  for algo in $ALGOS; do bench "$algo" "$n" "$algo"; done
  for algo in $RESIDENT_ALGOS; do bench "$algo" "$n" "${algo}_resident" --resident; done
  for p in $PRECISIONS; do bench implicit "$n" "implicit_${p}_resident" --resident --precision "$p"; done
done

PYTHONUNBUFFERED=1 $PY bench/pytorch_gpu.py "${torch_net[@]}" --sizes $SIZES --repeats "$R" \
  --ref "$O/ref.npy" >"$O/torch.jsonl" 2>"$O/torch.err" || { echo "pytorch failed:"; tail -5 "$O/torch.err"; }

$PY - "$O" "$SIZES" "$ALGOS" "$RESIDENT_ALGOS" "$what" "$NET" "$PRECISIONS" <<'PY' | tee "$O/table$tag.txt"
import glob, json, os, sys
import numpy as np
out, sizes, algos = sys.argv[1], [int(s) for s in sys.argv[2].split()], sys.argv[3].split()
resident, images_from, net = sys.argv[4].split(), sys.argv[5], sys.argv[6]
precisions = sys.argv[7].split()
ref = np.load(f"{out}/ref.npy")
torch_rows = [json.loads(l) for l in open(f"{out}/torch.jsonl") if l.strip().startswith("{")]
gpu = open(f"{out}/gpu.txt").read().strip().replace("\n", "; ")
cudnn = ""
print(f"\n=== gpu_bench: {gpu}" if net == "cifar10" else f"\n=== gpu_bench ({net}): {gpu}")
for n in sizes:
    rows = []
    for algo, name, timed in [(a, a, "uint8 host -> host preds") for a in algos] + \
                             [(a, f"{a}_resident", "forward, input on GPU") for a in resident] + \
                             [("implicit", f"implicit_{p}_resident", "forward, input on GPU") for p in precisions]:
        variant = "cnnrun " + name.replace("_", " ")
        path = f"{out}/cnnrun_{name}_{n}.json"
        if not os.path.exists(path):
            rows.append((variant, "FAILED (see log)", None, None, None, None, None, None))
            continue
        j = json.load(open(path))
        cudnn = next((x.split(";")[1].strip() for x in j["notes"] if x.startswith("gpu:") and "cuDNN" in x), cudnn)
        times = next((x for x in j["notes"] if x.startswith("--repeat")), "")
        ts = [float(v) for v in times.split("(ms)")[1].split(";")[0].split()] if times else []
        v = j.get("validation", {})
        rel = max((c.get("max_rel", 0.0) for c in v.get("layers", [])), default=None)
        if name != algo and not any("input resident on GPU" in x for x in j["notes"]):
            timed = "NOT RESIDENT (see log)"  # the report must say what it timed
        probs = np.load(f"{out}/cnnrun_{name}_{n}.npy")
        dp = float(np.abs(probs - ref[np.arange(n) % len(ref)]).max())
        ok = "pass" if v.get("pass") else "FAIL"
        rows.append((variant, timed, j["times"]["forward_s"] * 1e3,
                     (min(ts), max(ts)) if ts else None, j["accuracy_percent"], dp, f"{rel:.1e} {ok}", len(ts)))
    for t in torch_rows:
        if t["images"] == n:
            rows.append((t["variant"], t["what"], t["median_ms"], (t["min_ms"], t["max_ms"]), t["accuracy_percent"],
                         t.get("max_abs_prob_diff"), "-", t["runs"]))
    eager = next((r[2] for r in rows if r[0] == "pytorch eager fp32"), None)
    e2e = next((r[2] for r in rows if r[0] == "pytorch e2e fp32"), None)
    runs = next((r[7] for r in rows if r[7]), "?")
    print(f"\n{n} images ({images_from}); {cudnn}; medians of {runs} runs")
    print(f"{'variant':<30} {'timed':<34} {'median ms':>9} {'min..max':>13} {'vs eager':>8} {'vs e2e':>7} "
          f"{'accuracy':>8} {'max|dp| vs CPU':>14} {'validate max rel':>16}")
    for name, what, ms, mm, acc, dp, val, _ in rows:
        if ms is None:
            print(f"{name:<30} {what}")
            continue
        sp = f"{eager / ms:.2f}x" if eager else "-"
        se = f"{e2e / ms:.2f}x" if e2e else "-"
        mms = f"{mm[0]:.2f}..{mm[1]:.2f}" if mm else "-"
        dps = f"{dp:.1e}" if dp is not None else "-"
        print(f"{name:<30} {what:<34} {ms:>9.2f} {mms:>13} {sp:>8} {se:>7} {acc:>7.2f}% {dps:>14} {val:>16}")
PY
[ -n "${OUT:-}" ] && tar czf "$OUT/gpu_bench$tag.tgz" -C "$O" . && cp "$O/table$tag.txt" "$OUT/"
exit 0
