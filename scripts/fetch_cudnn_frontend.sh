#!/usr/bin/env bash
# Puts the cuDNN frontend's C++ headers (NVIDIA's header-only library for cuDNN's graph API; not a
# Debian package) into .deps/cudnn_frontend/include, from the PyPI wheel nvidia-cudnn-frontend
# that ships them. Nothing is installed into a Python environment: the wheel is downloaded and
# only its include/ folder is unpacked. CMake finds the headers there (CNNRUN_CUDNN_FRONTEND);
# without them the GPU build runs cuDNN's legacy convolution API alone and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.32.0
dest=.deps/cudnn_frontend
if [[ -f $dest/include/cudnn_frontend.h && "$(cat $dest/VERSION 2>/dev/null)" == "$version" ]]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download --quiet --no-deps --only-binary=:all: "nvidia-cudnn-frontend==$version" -d "$tmp" \
    >"$tmp/pip.log" 2>&1; then
  echo "setup: could not download nvidia-cudnn-frontend $version from PyPI (cuDNN graph API off):" >&2
  tail -3 "$tmp/pip.log" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
python3 - "$tmp"/nvidia_cudnn_frontend-*.whl "$dest" <<'PY'
import sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("include/")]
    if not any(n == "include/cudnn_frontend.h" for n in names):
        sys.exit("setup: the wheel has no include/cudnn_frontend.h")
    z.extractall(dest, names)
PY
echo "$version" >"$dest/VERSION"
echo "setup: cuDNN frontend $version headers in $dest/include"
