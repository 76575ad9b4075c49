#!/usr/bin/env bash
# The main job: set up, build, and run the thesis network (netdefs/cifar10.yaml) over 50000
# CIFAR-10 images on the GPU when one is usable, else on the CPU (the report says which).
# Data: the full CIFAR-10 training set when it can be downloaded (scripts/fetch_cifar10.sh),
# otherwise the 2000-image sample in ../shared, cycled to 50000.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
shared=${CNNRUN_SHARED:-../shared}
args=(netdefs/cifar10.yaml --assets "$shared" --batch 50000 --engine auto)
if scripts/fetch_cifar10.sh assets; then
  args+=(--data assets/cifar-10-batches-bin)
else
  echo "main: using the 2000-image sample in $shared, cycled to 50000 images"
  args+=(--cycle)
fi
exec build/cnnrun "${args[@]}" "$@"
