#!/usr/bin/env bash
# A/B timing of cnnrun variants on a GPU host, one table (a measuring aid for docs/performance.md;
# the benchmark against PyTorch is bench/gpu_bench.sh). Each argument is one variant,
# "label|ENV=... ENV2=...|cnnrun options", run on the CIFAR-10 network over N images of the
# sample cycled (default 50000), --repeat R (default 7), validated on 500 images:
#
#   scripts/device_ab.sh "no exact pixels|CNNRUN_GPU_OFF=exact|" "tf32||--precision tf32"
#
# BIN=path among a variant's ENV words runs another cnnrun binary (relative to CARRY), e.g. the
# build before a change: "before|BIN=bin/cnnrun_before|".
#
# Environment: CARRY (default .carry-lead) with bin/cnnrun and shared/ as for
# scripts/device_verify.sh; N, R; NETDEF (default netdefs/cifar10.yaml); OUT for the logs.
set -uo pipefail
cd "$(dirname "$0")/.."
C=${CARRY:-.carry-lead}
N=${N:-50000}
R=${R:-7}
NETDEF=${NETDEF:-netdefs/cifar10.yaml}
O=${OUT:-/tmp/device_ab}
mkdir -p "$O"
rows=()
i=0
for v in "$@"; do
  IFS='|' read -r label envs args <<<"$v"
  i=$((i + 1))
  log=$O/ab_$i.log
  bin=$C/bin/cnnrun
  vars=()
  for e in $envs; do
    if [[ $e == BIN=* ]]; then bin=$C/${e#BIN=}; else vars+=("$e"); fi
  done
  # shellcheck disable=SC2086  # args is a word list on purpose
  env ${vars[@]+"${vars[@]}"} "$bin" "$NETDEF" --engine gpu --batch "$N" --cycle --repeat "$R" --validate \
    --validate-images 500 --assets "$C/shared" $args >"$log" 2>&1
  rc=$?
  ms=$(grep -o 'forward time = median [0-9.]*' "$log" | awk '{print $5}')
  acc=$(grep -o 'Net accuracy: [0-9.]* %' "$log" | awk '{print $3}')
  val=$(grep -o 'Validation: [A-Z]*' "$log" | awk '{print $2}')
  err=$(grep -o 'max rel [0-9.e+-]*' "$log" | awk '{print $3}' | sort -g | tail -1)
  rows+=("$(printf '%-28s %4s %10s %8s %6s %10s' "$label" "$rc" "${ms:--}" "${acc:--}" "${val:--}" "${err:--}")")
done
printf '%-28s %4s %10s %8s %6s %10s\n' variant rc median_ms accuracy valid max_rel
printf '%s\n' "${rows[@]}"
