#!/usr/bin/env bash
# The GPU checks on a GPU machine, with binaries built elsewhere: nothing is built here (the
# device machines have no compilers' worth of packages; build with -DCNNRUN_STATIC_YAML=ON).
# Expects under $CARRY (default .carry): cnnrun_tests, cnnrun, and shared/ with
# models/convnetjs-cifar10 and data/cifar10-sample/train_2000.bin. Runs the GPU test cases,
# then times 50000 CIFAR-10 images (the 2000-image sample cycled) per convolution algorithm
# through the CLI, and prints a short table last. CUDNN_LIB=<dir> puts another cuDNN first on
# the library path; SANITIZE=1 adds a compute-sanitizer pass over the implicit-conv test.
# Logs go to $OUT (the device tool's return folder) or /tmp/device_check.
set -uo pipefail
cd "$(dirname "$0")/.."
C=${CARRY:-.carry}
O=${OUT:-/tmp/device_check}
mkdir -p "$O"
export CNNRUN_SHARED=$PWD/$C/shared
[ -n "${CUDNN_LIB:-}" ] && export LD_LIBRARY_PATH=$CUDNN_LIB:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm --format=csv,noheader
if ldd "$C/cnnrun_tests" | grep "not found"; then echo "device_check: libraries missing"; exit 1; fi

t0=$(date +%s.%N)
"$C/cnnrun_tests" -tc="gpu*" ${TEST_ARGS:-} >"$O/tests.log" 2>&1
trc=$?
t1=$(date +%s.%N)
grep -E "ERROR|FAILED|skipped|MESSAGE|^  [a-z]" "$O/tests.log" | cut -c1-400 | head -${TEST_LINES:-60}

declare -A fwd acc
for algo in ${ALGOS:-implicit im2col cudnn auto}; do
  "$C/cnnrun" netdefs/cifar10.yaml --engine gpu --batch ${BATCH:-50000} --cycle --conv-algo "$algo" \
    --assets "$C/shared" >"$O/cli_$algo.log" 2>&1
  fwd[$algo]=$(grep -m1 "Net forward total time" "$O/cli_$algo.log" | awk '{print $5}')
  acc[$algo]=$(grep -m1 "Net accuracy" "$O/cli_$algo.log" | awk '{print $3, $4}')
done
[ -n "${SHOW_CLI:-}" ] && cat "$O/cli_${SHOW_CLI}.log"

# PROFILE=1: per-layer times on one stream (no overlap, so each layer's time is its own).
if [ -n "${PROFILE:-}" ]; then
  for algo in ${ALGOS:-implicit im2col cudnn auto}; do
    echo "--- one stream, conv $algo:"
    "$C/cnnrun" netdefs/cifar10.yaml --engine gpu --batch ${BATCH:-50000} --cycle --conv-algo "$algo" --streams 1 \
      --assets "$C/shared" 2>&1 | grep -E "^    [a-z]|forward total|Note: gpu: (pre|auto)" | grep -v "fused into" | cut -c1-150
  done
fi
# SWEEP=1: forward time of the default algorithm choice over streams x block.
if [ -n "${SWEEP:-}" ]; then
  for s in 1 2 3 4; do
    line="streams $s:"
    for b in 1024 2048 3847 8192 16384; do
      t=$("$C/cnnrun" netdefs/cifar10.yaml --engine gpu --batch ${BATCH:-50000} --cycle --streams $s --block $b \
        --conv-algo ${SWEEP_ALGO:-implicit} --assets "$C/shared" 2>&1 | grep -m1 "Net forward total time" | awk '{print $5}')
      line="$line  b$b=$t"
    done
    echo "$line"
  done
fi

src=0
if [ -n "${SANITIZE:-}" ]; then
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -n "$CS" ]; then
    for tool in memcheck racecheck; do
      timeout 240 "$CS" --tool $tool --error-exitcode 3 "$C/cnnrun_tests" -tc="gpu: conv implicit*" \
        >"$O/sanitize_$tool.log" 2>&1
      r=$?; src=$((src | r)); echo "compute-sanitizer $tool: exit $r"; tail -3 "$O/sanitize_$tool.log"
    done
  else
    echo "compute-sanitizer: not found"
  fi
fi

echo "================ device_check summary ================"
grep -E "test cases:|assertions:" "$O/tests.log"
printf "gpu tests exit %s in %s s\n" "$trc" "$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")"
printf "%-10s %-14s %s\n" algo "forward (s)" accuracy
for algo in ${ALGOS:-implicit im2col cudnn auto}; do printf "%-10s %-14s %s\n" "$algo" "${fwd[$algo]:-FAIL}" "${acc[$algo]:-}"; done
exit $((trc | src))
