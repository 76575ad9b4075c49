#!/usr/bin/env bash
# Sets up (packages + build, as scripts/setup.sh --test) and runs every test through ctest.
# GPU tests skip visibly (counted by doctest) where no GPU is usable.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export CNNRUN_SHARED=${CNNRUN_SHARED:-$(cd .. && pwd)/shared}
cd build
ctest -V -j1
