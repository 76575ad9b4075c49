#!/usr/bin/env bash
# The GPU acceptance run on a GPU machine with binaries built elsewhere (see docs/architecture.md,
# "Running on a GPU machine"): the whole test binary, the CLI checks of issues 3 and 5, and the
# PyTorch cross-check on the GPU engine. Expects under $CARRY (default .carry-lead):
#   bin/{cnnrun,cnnrun_tests}   built with -DCNNRUN_STATIC_YAML=ON -DCNNRUN_NATIVE=OFF in $BUILD_DIR
#   shared/                     models/convnetjs-cifar10, data/cifar10-sample/*.bin
#   fashion-mnist/              the t10k IDX files of Debian's dataset-fashion-mnist
#   lib/                        (optional) the Debian shared libraries cnnrun links that the GPU
#                               machine lacks: libpng16, libturbojpeg, libprotobuf
# The binaries carry the build machine's absolute paths (source dir, cnnrun path): links recreate
# them. Logs go to $OUT; a short table is printed last.
# SANITIZE=1 adds the GPU test cases (SANITIZE_FILTER, a doctest -tc filter, default "gpu*") under
# compute-sanitizer memcheck and racecheck (SANITIZE_TOOLS), one process per case, SANITIZE_JOBS at a
# time, each for at most SANITIZE_SECONDS (default 280), with CNNRUN_TEST_SANITIZER=1 so the
# heaviest cases shrink; SANITIZE=only runs just that part.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
C=$root/${CARRY:-.carry-lead}
SRC=${SRC_DIR:-/work/main}
O=${OUT:-/tmp/device_verify}
mkdir -p "$O" /usr/share/datasets
if [[ "$root" != "$SRC" ]]; then mkdir -p "$(dirname "$SRC")"; ln -sfn "$root" "$SRC"; fi
ln -sfn "$C/bin" "$SRC/${BUILD_DIR:-build-dev}"
ln -sfn "$C/shared" "$(dirname "$SRC")/shared"
[[ -L /usr/share/datasets/fashion-mnist ]] && rm /usr/share/datasets/fashion-mnist
mkdir -p /usr/share/datasets/fashion-mnist && cp "$C"/fashion-mnist/* /usr/share/datasets/fashion-mnist/  # a copy: a link out of the root is refused
[[ -n "${CUDNN_LIB:-}" ]] && export LD_LIBRARY_PATH=$CUDNN_LIB:${LD_LIBRARY_PATH:-}
# The test fixtures need NumPy and Pillow: the python3 found first (PyTorch's venv on a GPU host).
export CNNRUN_TEST_PYTHON=${CNNRUN_TEST_PYTHON:-$(command -v python3)}
# The Debian libraries cnnrun links (libpng, libturbojpeg, libprotobuf), carried as $C/lib.
[[ -d "$C/lib" ]] && export LD_LIBRARY_PATH=$C/lib:${LD_LIBRARY_PATH:-}
cd "$SRC"
B=$SRC/${BUILD_DIR:-build-dev}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$O/gpu.txt"

declare -a rows
row() { rows+=("$(printf '%-52s %s' "$1" "$2")"); }

only=0
[[ "${SANITIZE:-}" == only ]] && only=1
if (( ! only )); then
  "$B/cnnrun_tests" >"$O/tests.log" 2>&1; rc=$?
  row "cnnrun_tests (all cases, rc $rc)" "$(grep 'test cases:' "$O/tests.log" | tr -s ' ')"
  grep -B2 -A8 "ERROR" "$O/tests.log" | head -60

  "$B/cnnrun" netdefs/cifar10.yaml --assets ../shared --engine gpu --batch 1200 >"$O/c1200.log" 2>&1
  row "cifar10 gpu --batch 1200 (expect 78.25 %)" "$(grep 'Net accuracy' "$O/c1200.log")"
  for a in im2col implicit cudnn auto; do
    "$B/cnnrun" netdefs/cifar10.yaml --assets ../shared --engine gpu --batch 50000 --cycle --conv-algo $a --validate \
      --json "$O/val_$a.json" >"$O/val_$a.log" 2>&1; r=$?
    row "cifar10 gpu 50000 --cycle --validate $a (rc $r)" \
      "$(grep -E 'Validation: ' "$O/val_$a.log" | tr -s ' ') $(grep 'Net forward total' "$O/val_$a.log" | awk '{print $5" s"}')"
  done
  "$B/cnnrun" netdefs/fashion-mnist.yaml --engine gpu --batch 10000 --validate >"$O/fm.log" 2>&1; r=$?
  row "fashion-mnist gpu --batch 10000 --validate (rc $r)" "$(grep 'Net accuracy' "$O/fm.log") $(grep 'Validation: ' "$O/fm.log" | tr -s ' ')"
  python3 tests/pytorch_crosscheck.py "$B/cnnrun" "$SRC" "$(dirname "$SRC")/shared" --engine gpu >"$O/xcheck.log" 2>&1; r=$?
  row "pytorch cross-check --engine gpu (rc $r)" "$(tail -1 "$O/xcheck.log")"
  grep -E "images, max abs" "$O/xcheck.log"
  # The torchvision netdefs at 3x224x224 against torchvision (the ctest entries torchvision_*_gpu),
  # and JPEG photographs through decode/resize/crop against Pillow + torchvision (image_crosscheck).
  for net in ${TV_NETS-resnet18 mobilenet_v2 mobilenet_v3_small efficientnet_b0 googlenet squeezenet1_1 vgg11_bn}; do
    python3 tests/torchvision_crosscheck.py "$B/cnnrun" "$SRC" "$net" --engine gpu --images 256 >"$O/tv_$net.log" 2>&1; r=$?
    row "torchvision $net gpu 224 (rc $r)" "$(tail -1 "$O/tv_$net.log" | cut -c1-90)"
  done
  for extra in "" "--network resnet18"; do
    # shellcheck disable=SC2086  # extra is a word list on purpose
    python3 tests/image_crosscheck.py "$B/cnnrun" "$(dirname "$SRC")/shared" --engine gpu $extra >"$O/img.log" 2>&1; r=$?
    row "image_crosscheck gpu $extra (rc $r)" "$(tail -1 "$O/img.log" | cut -c1-90)"
  done
fi
# SANITIZE=1 or only: the GPU test cases under compute-sanitizer memcheck and racecheck (issue 6),
# shrunk for it by CNNRUN_TEST_SANITIZER (the test cases say which, in doctest MESSAGEs). Each
# test case runs as its own sanitizer process, SANITIZE_JOBS (default 5; 16 at once slowed
# racecheck past 240 s) at a time, each for at
# most SANITIZE_SECONDS (default 280): racecheck of the whole suite in one process took longer
# than a device call may run.
if [[ -n "${SANITIZE:-}" ]]; then
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  # Case names as filters: doctest splits filters at commas, so a comma becomes the '?' wildcard.
  mapfile -t cases < <("$B/cnnrun_tests" --list-test-cases -tc="${SANITIZE_FILTER:-gpu*}" | sed -n '/^====/,/^====/p' |
    grep -v '^====' | sed 's/,/?/g')
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    i=0
    for c in "${cases[@]}"; do
      i=$((i + 1))
      echo "$i|$c"
    done | xargs -P "${SANITIZE_JOBS:-5}" -d '\n' -I{} bash -c '
      n=${1%%|*} c=${1#*|}
      CNNRUN_TEST_SANITIZER=1 timeout "$2" "$3" --tool "$4" --error-exitcode 3 "$5" -tc="$c" >"$6/sanitize_$4_$n.log" 2>&1
      echo "$?" >"$6/sanitize_$4_$n.rc"' _ {} "${SANITIZE_SECONDS:-280}" "$CS" "$tool" "$B/cnnrun_tests" "$O"
    pass=0 fail=0 timeouts=0 errs=0 shrunk=0
    for n in $(seq 1 "${#cases[@]}"); do
      r=$(cat "$O/sanitize_${tool}_$n.rc" 2>/dev/null || echo missing)
      log=$O/sanitize_${tool}_$n.log
      if [[ "$r" == 0 ]] && grep -q '1 passed | 0 failed' "$log"; then pass=$((pass + 1)); else
        fail=$((fail + 1)); echo "sanitizer $tool: case '${cases[$((n - 1))]}' rc $r"; grep -E 'SUMMARY|ERROR|FAILED' "$log" | head -5
      fi
      [[ "$r" == 124 ]] && timeouts=$((timeouts + 1))
      e=$(grep -oE '(ERROR|RACECHECK) SUMMARY: [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
      errs=$((errs + ${e:-0}))
      shrunk=$((shrunk + $(grep -c 'shrunk for CNNRUN_TEST_SANITIZER' "$log")))
    done
    row "compute-sanitizer $tool, ${#cases[@]} GPU cases" \
      "$pass passed, $fail failed ($timeouts timed out after ${SANITIZE_SECONDS:-280} s); $errs errors/hazards reported; $shrunk shrunk"
  done
fi
(( only )) || head -40 "$O/c1200.log"
echo "================ device_verify summary ================"
printf '%s\n' "${rows[@]}"
