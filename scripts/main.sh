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
# The weights: ../shared's text files, or ConvNetJS's published snapshot when it downloads and
# fits the netdef (checked on 10 images first).
if scripts/fetch_convnetjs.sh assets &&
  build/cnnrun netdefs/cifar10.yaml --assets "$shared" --engine cpu --batch 10 --quiet --cycle \
    --weights assets/cifar10_snapshot.json >/dev/null; then
  args+=(--weights assets/cifar10_snapshot.json)
else
  echo "main: using the ConvNetJS weights in $shared/models/convnetjs-cifar10"
fi
exec build/cnnrun "${args[@]}" "$@"
