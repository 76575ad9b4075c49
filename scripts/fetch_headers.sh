#!/usr/bin/env bash
# Puts the C++ headers of NVIDIA's header-only libraries that Debian does not package into
# .deps/<name>/include, from the PyPI wheels that ship them:
#   cudnn_frontend  nvidia-cudnn-frontend  cuDNN's graph API (conv2d_cudnn_graph.cpp)
#   cutlass         nvidia-cutlass         CUTLASS's implicit-GEMM convolutions (conv2d_cutlass.cu), and
#                                          its tools' util headers (CUTLASS 3's Hopper convolutions need
#                                          cutlass/util/packed_stride.hpp: bench/conv_sm90_bench.cu)
# Nothing is installed into a Python environment: each wheel is downloaded and only its header
# folder is unpacked. CMake finds the headers there; without one the GPU build goes on without
# what it serves and says so. Usage: fetch_headers.sh [NAME...] (default: all).
set -uo pipefail
cd "$(dirname "$0")/.."

# name, wheel, version, the wheel's header folders (comma-separated, unpacked into one include
# folder), a file that must be among them
libs=("cudnn_frontend nvidia-cudnn-frontend 1.32.0 include/ cudnn_frontend.h"
      "cutlass nvidia-cutlass 4.2.0.0 cutlass_library/source/include/,cutlass_library/source/tools/util/include/ cutlass/util/packed_stride.hpp")

fetch() {
  local name=$1 wheel=$2 version=$3 folder=$4 check=$5
  local dest=.deps/$name
  if [[ -f $dest/include/$check && "$(cat $dest/VERSION 2>/dev/null)" == "$version" ]]; then
    return 0
  fi
  local tmp
  tmp=$(mktemp -d)
  if ! python3 -m pip download --quiet --no-deps --only-binary=:all: "$wheel==$version" -d "$tmp" \
      >"$tmp/pip.log" 2>&1; then
    echo "setup: could not download $wheel $version from PyPI ($name off):" >&2
    tail -3 "$tmp/pip.log" >&2
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$dest"
  mkdir -p "$dest/include"
  if ! python3 - "$tmp"/*.whl "$dest/include" "$folder" "$check" <<'PY'
import os, sys, zipfile
whl, dest, folders, check = sys.argv[1:5]
with zipfile.ZipFile(whl) as z:
    files = {}  # path under the include folder -> the wheel's name
    for folder in folders.split(","):
        for n in z.namelist():
            if n.startswith(folder) and not n.endswith("/"):
                files[n[len(folder):]] = n
    if check not in files:
        sys.exit(f"setup: the wheel has no {check} in {folders}")
    for rel, n in files.items():
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(n) as src, open(out, "wb") as dst:
            dst.write(src.read())
PY
  then
    rm -rf "$tmp" "$dest"
    return 1
  fi
  rm -rf "$tmp"
  echo "$version" >"$dest/VERSION"
  echo "setup: $wheel $version headers in $dest/include"
}

rc=0
for entry in "${libs[@]}"; do
  read -r name wheel version folder check <<<"$entry"
  if (($# == 0)) || [[ " $* " == *" $name "* ]]; then
    fetch "$name" "$wheel" "$version" "$folder" "$check" || rc=1
  fi
done
exit $rc
