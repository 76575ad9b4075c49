#!/usr/bin/env bash
# Installs what cnnrun needs from Debian's packages (as root; apt-get update first) and builds
# it into build/. With --test it also installs what the tests use. CUDA is not a Debian package:
# when a CUDA 13 toolkit with cuDNN is at /usr/local/cuda the GPU executor is built too,
# otherwise the build is CPU-only and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(cmake g++ make pkg-config libyaml-cpp-dev libeigen3-dev doctest-dev zlib1g-dev
      nlohmann-json3-dev libcli11-dev libpng-dev libturbojpeg0-dev libprotobuf-dev protobuf-compiler
      libonnx-dev libopenmpi-dev openmpi-bin)
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  pkgs+=(python3 python3-pip)  # scripts/fetch_headers.sh downloads wheels' headers
fi
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(python3 python3-numpy python3-torch python3-torchvision python3-pil python3-onnx libonnx-testdata
         dataset-fashion-mnist clang libclang-rt-14-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing packages: ${missing[*]}; run as root (or install them) first" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [[ -x /usr/local/cuda/bin/nvcc && -z "${CUDACXX:-}" ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  bash scripts/fetch_headers.sh || true  # says why when it cannot; the build goes on without
fi
mkdir -p build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${CNNRUN_CMAKE_ARGS:-} >build/configure.log 2>&1 ||
  { cat build/configure.log >&2; exit 1; }
grep "cnnrun:" build/configure.log || true
cmake --build build -j"$(nproc)"
