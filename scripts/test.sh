#!/usr/bin/env bash
# Sets up (packages + build, as scripts/setup.sh --test) and runs every test through ctest.
# GPU tests skip visibly (counted by doctest) where no GPU is usable.
# Then the hardening checks (CNNRUN_HARDENING=0 leaves them out):
#   sanitizer: the CPU tests again, built with ASan+UBSan (CPU-only) in build-asan/; the
#              regression cases of tests/regress then run a sanitized cnnrun too;
#   fuzz:      each libFuzzer target of tests/fuzz for CNNRUN_FUZZ_SECONDS (default 25) from its
#              seeds and regression files, built with clang in build-fuzz/.
# A summary at the end says what passed; any failure, sanitizer report or fuzz finding fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export CNNRUN_SHARED=${CNNRUN_SHARED:-$(cd .. && pwd)/shared}
jobs=$(nproc)
summary=()
status=0

# step NAME FUNCTION: runs it, records PASS/FAIL with its time.
step() {
  local name=$1 t0=$SECONDS
  echo "==================== $name"
  if "$2"; then
    summary+=("PASS  $name ($((SECONDS - t0)) s)")
  else
    summary+=("FAIL  $name ($((SECONDS - t0)) s)")
    status=1
  fi
}

# build DIR TARGET CMAKE-ARGS...: configures and builds TARGET quietly into DIR (log
# DIR/build.log), showing the log's tail on failure.
build() {
  local dir=$1 log=$1/build.log target=$2
  shift 2
  mkdir -p "$dir"
  echo "building $dir (log: $log)"
  if ! { cmake -S . -B "$dir" "$@" && cmake --build "$dir" -j"$jobs" --target "$target"; } >"$log" 2>&1; then
    tail -40 "$log"
    return 1
  fi
}

tests() { (cd build && ctest -V -j1); }

sanitizer() {
  build build-asan cnnrun_tests -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCNNRUN_GPU=OFF -DCNNRUN_SANITIZE=ON || return 1
  # cnnrun is a dependency of cnnrun_tests; the CLI and regression tests run it sanitized.
  (cd build-asan && UBSAN_OPTIONS=print_stacktrace=1 ctest -R '^cpu_tests$' --output-on-failure)
}

fuzz() {
  CC=clang CXX=clang++ build build-fuzz cnnrun_fuzzers -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCNNRUN_GPU=OFF \
    -DCNNRUN_FUZZ=ON -DCNNRUN_FUZZ_SECONDS="${CNNRUN_FUZZ_SECONDS:-25}" || return 1
  local rc=0
  (cd build-fuzz && ctest -R '^fuzz_' -V) >build-fuzz/fuzz.log 2>&1 || rc=$?
  # One line per fuzzer from libFuzzer's final stats (ctest -V prefixes each line with "N: ").
  fuzz_report=$(awk '/Start +[0-9]+: fuzz_/ { name[$2] = $3 }
       /stat::number_of_executed_units/ { runs[$1] = $NF }
       /stat::average_exec_per_sec/ { speed[$1] = $NF }
       /stat::new_units_added/ { units[$1] = $NF }
       /Test +#[0-9]+: fuzz_/ { id = $3; sub("#", "", id); res[id] = ($0 ~ /Passed/) ? "no finding" : "FINDING" }
       END { for (n in name) printf "  %-18s %9s runs, %6s/s, %5s new inputs: %s\n", name[n],
                                     runs[n] == "" ? "?" : runs[n], speed[n] == "" ? "?" : speed[n],
                                     units[n] == "" ? "?" : units[n], res[n] == "" ? "FINDING" : res[n] }' \
    build-fuzz/fuzz.log | sort)
  echo "$fuzz_report"
  if ((rc)); then
    grep -E "ERROR: |SUMMARY: |invariant failed|bad error message|Test unit written|runtime error" build-fuzz/fuzz.log |
      head -40
    echo "fuzz: inputs that fail are in build-fuzz/tests/fuzz/ (crash-*, leak-*, timeout-*, oom-*); full log build-fuzz/fuzz.log"
  fi
  return $rc
}

step "tests (ctest in build/)" tests
if [[ "${CNNRUN_HARDENING:-1}" != 0 ]]; then
  step "sanitizer (ASan+UBSan build of the CPU tests, build-asan/)" sanitizer
  step "fuzz (libFuzzer+ASan+UBSan, ${CNNRUN_FUZZ_SECONDS:-25} s per target, build-fuzz/)" fuzz
fi

echo "==================== test.sh summary"
printf '%s\n' "${summary[@]}"
[[ -n "${fuzz_report:-}" ]] && echo "$fuzz_report"
passed=$(printf '%s\n' "${summary[@]}" | grep -c '^PASS' || true)
failed=$(printf '%s\n' "${summary[@]}" | grep -c '^FAIL' || true)
echo "test.sh: $passed passed, $failed failed"
exit $status
