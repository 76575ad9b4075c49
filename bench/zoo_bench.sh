#!/usr/bin/env bash
# The model-zoo benchmark (issue 13), one command on a GPU host, one table: every zoo network that
# cnnrun can express (the thesis network, Fashion-MNIST, LeNet-5, torchvision's ResNet-18,
# VGG-11-BN, SqueezeNet 1.1, GoogLeNet, MobileNetV2, EfficientNet-B0 at 32x32 and 224x224 RGB) at
# fp32, tf32, fp16 and bf16 against PyTorch's fastest way at that precision, with the same weights
# and images, made on the spot from fixed seeds. Nothing is built here; bench/zoo_bench.py does the
# work and says in its docstring what is timed and how.
#
#   bench/zoo_bench.sh                                  # everything, about 28 minutes on an H100
#   GPUS=4 bench/zoo_bench.sh                           # the same on 4 GPUs of one host: planned at
#                                                       # about 7 minutes from one H100's job times
#   NETS="resnet18 vgg11_bn" SIZES=224 PRECISIONS="fp32 fp16" bench/zoo_bench.sh
#   DRY=1 bench/zoo_bench.sh                            # the CPU dry run, no GPU needed
#
# Environment:
#   NETS        subset of: thesis fashion lenet5 resnet18 vgg11_bn squeezenet1_1 googlenet
#               mobilenet_v2 efficientnet_b0 (default: these, issue 13's zoo), mobilenet_v3_small
#   SIZES       input sizes of the torchvision networks (default "32 224")
#   PRECISIONS  subset of fp32 tf32 fp16 bf16 (default all)
#   IMAGES      images per row by input class, e.g. "native:50000 32:10000 224:1000" (the defaults;
#               native = the thesis, Fashion-MNIST and LeNet-5 networks at their own input)
#   REPEATS     timed runs per row, the median reported (default 5, at least 5)
#   BUDGET      seconds; rows that would start later are listed as skipped (default 480)
#   BASELINE    a second cnnrun binary (an earlier commit's) timed on every row right after CNNRUN:
#               one more column, its median and CNNRUN's speedup over it (before/after in one run)
#   BASELINE_ARGS  more cnnrun options for the baseline rows only (e.g. "--gpu-off stemrows"); without
#               BASELINE the baseline is CNNRUN itself with them: a switch's before/after in one run
#   CNNRUN_ARGS more cnnrun options for the timed rows (e.g. "--conv-algo cudnn"), named in the notes
#   COMPILE     torch.compile's modes for PyTorch's fastest eager way (comma-separated: default,
#               reduce-overhead, max-autotune, max-autotune-no-cudagraphs; default "default"; 0: no
#               torch.compile); COMPILE_TIMEOUT seconds at most each (default 300), longer is a row
#               that says so. max-autotune takes minutes a network
#   DRY=1       the CPU dry run: cnnrun --engine cpu, PyTorch on the CPU, tiny image counts
#   CNNRUN      the cnnrun binary (default: the first of $CARRY/bin/cnnrun, $CARRY/cnnrun,
#               .carry-lead/bin/cnnrun, .carry/bin/cnnrun, .carry/cnnrun, build-gpu/cnnrun,
#               build/cnnrun; DRY=1 looks in build/ first)
#   SHARED      the shared assets, for the thesis network's ConvNetJS weights (default the first of
#               $CARRY/shared, .carry-lead/shared, .carry/shared, ../shared; random weights if none)
#   PYTHON      a python3 with torch and torchvision (default: the first of python3, python,
#               /usr/bin/python3 that imports both)
#   CUDNN_LIB   put first on cnnrun's library path (default: the cuDNN inside PyTorch's venv when it
#               is there), so that both sides run the same cuDNN
#   NETDEFS     the directory searched for the netdefs (default netdefs/)
#   WORK        generated weights and images (default /tmp/zoo_bench); logs under WORK/logs
#   OUT         (the device tool's return folder) also gets zoo_table.md, zoo_results.json and
#               zoo_logs.tgz (logs and JSON reports, no weights or images)
#   GPUS        run on the first GPUS GPUs of the host at once (of CUDA_VISIBLE_DEVICES if set): each
#               network at each size a job on one GPU, one table at the end (bench/zoo_parallel.py),
#               each finished job's rows in OUT/zoo_jobs.tgz as it ends (kept if the call is cut
#               short; GPUS=1 too); the whole zoo in about one device call on 4 GPUs
#   COMMIT      the commit to name in the table's header (default: the one the binary's --version
#               names, else git rev-parse HEAD if it works)
set -uo pipefail
cd "$(dirname "$0")/.."
C=${CARRY:-.carry}

PY=
for p in ${PYTHON:-python3 python /usr/bin/python3}; do
  if command -v "$p" >/dev/null && "$p" -c 'import torch, torchvision' 2>/dev/null; then
    PY=$p
    break
  fi
done
[ -n "$PY" ] || { echo "zoo_bench: no python3 with torch and torchvision (set PYTHON)" >&2; exit 1; }

cands=("$C/bin/cnnrun" "$C/cnnrun" .carry-lead/bin/cnnrun .carry/bin/cnnrun .carry/cnnrun build-gpu/cnnrun build/cnnrun)
[ -n "${DRY:-}" ] && cands=(build/cnnrun "${cands[@]}")
BIN=${CNNRUN:-}
if [ -z "$BIN" ]; then
  for b in "${cands[@]}"; do
    if [ -x "$b" ]; then
      BIN=$b
      break
    fi
  done
fi
[ -n "$BIN" ] && [ -x "$BIN" ] || { echo "zoo_bench: no cnnrun binary (set CNNRUN; looked at ${cands[*]})" >&2; exit 1; }
if ! version=$("$BIN" --version 2>&1); then
  echo "zoo_bench: $BIN does not start: $version" >&2
  ldd "$BIN" 2>/dev/null | grep "not found" >&2
  exit 1
fi
version=${version%%$'\n'*}

S=${SHARED:-}
if [ -z "$S" ]; then
  for d in "$C/shared" .carry-lead/shared .carry/shared ../shared; do
    if [ -d "$d/models/convnetjs-cifar10" ]; then
      S=$d
      break
    fi
  done
fi

if [ -z "${DRY:-}" ]; then
  torch_cudnn=$("$PY" -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
  CUDNN_LIB=${CUDNN_LIB:-$torch_cudnn}
  [ -n "$CUDNN_LIB" ] && export LD_LIBRARY_PATH=$CUDNN_LIB:${LD_LIBRARY_PATH:-}
fi
# The binary names the commit it was built from (`--version`: "0.1.0 (commit 1c3f4494ecf5)");
# a binary from before that, or "unknown", falls back to this checkout's HEAD.
built=$(sed -n 's/.*(commit \([^)]*\)).*/\1/p' <<<"$version")
[ "$built" = unknown ] && built=
commit=${COMMIT:-${built:-$(git rev-parse --short=12 HEAD 2>/dev/null || true)}}
W=${WORK:-/tmp/zoo_bench}
mkdir -p "$W/logs"
echo "zoo_bench: cnnrun $BIN ($version), python $PY, shared ${S:-none}," \
  "cuDNN for cnnrun: $(ldd "$BIN" 2>/dev/null | grep -m1 libcudnn.so | awk '{print $3}')" | tee "$W/logs/setup.txt"

args=(--cnnrun "$BIN" --work "$W" --commit "${commit:-}" --shared "${S:-}" --repeats "${REPEATS:-5}"
  --budget "${BUDGET:-480}" --sizes "${SIZES:-32 224}" --precisions "${PRECISIONS:-fp32 tf32 fp16 bf16}"
  --nets "${NETS:-}" --images "${IMAGES:-}" --netdefs "${NETDEFS:-netdefs}"
  "--cnnrun-args=${CNNRUN_ARGS:-}")
[ -n "${DRY:-}" ] && args+=(--dry)
[ -n "${BASELINE:-}" ] && args+=(--baseline "$BASELINE")
[ -n "${BASELINE_ARGS:-}" ] && args+=("--baseline-args=$BASELINE_ARGS")
args+=("--compile=${COMPILE-default}" --compile-timeout "${COMPILE_TIMEOUT:-300}")
[ -n "${OUT:-}" ] && mkdir -p "$OUT" && args+=(--out "$OUT")
if [ -n "${GPUS:-}" ]; then
  PYTHONUNBUFFERED=1 "$PY" bench/zoo_parallel.py --gpus "$GPUS" --python "$PY" -- "${args[@]}"
else
  PYTHONUNBUFFERED=1 "$PY" bench/zoo_bench.py "${args[@]}"
fi
rc=$?
[ -n "${OUT:-}" ] && tar czf "$OUT/zoo_logs.tgz" -C "$W/logs" .
exit $rc
