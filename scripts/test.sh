#!/usr/bin/env bash
# Builds and runs the whole test suite: a normal build, then an ASan+UBSan
# build (the size-heavy tests smaller there: BRAID_TEST_SMALL), then the
# parsers' fuzz targets for a bounded time (FUZZ_SECONDS per target, 10 by
# default here; longer explorations: topology/fuzz/run.sh). Exits non-zero
# on any failure.
#
# The lint (clang-format, clang-tidy: 2 to 3 minutes of both cores) runs in
# the background under SCHED_IDLE from the first build on, so that it takes
# only the CPU time the tests leave idle (a fifth of it in the normal
# stage: ranks waiting on each other, timeouts being waited out); its
# output is shown, and its failure fails the suite, at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
start=$(date +%s)
at() { echo "== $* (at $(( $(date +%s) - start )) s)"; }

at "build (RelWithDebInfo, -Werror)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
lint_pid=
if [ "${BRAID_SKIP_LINT:-0}" != 1 ]; then
  at "lint, in the background on idle CPU time (its output: build/lint.log)"
  idle=(chrt --idle 0)
  "${idle[@]}" true 2>/dev/null || idle=(nice -n 19)
  set -m # its own process group, to stop it whole if the suite stops first
  "${idle[@]}" scripts/lint.sh build >build/lint.log 2>&1 &
  lint_pid=$!
  set +m
  trap '[ -z "$lint_pid" ] || kill -- -"$lint_pid" 2>/dev/null || true' EXIT
fi
at tests
(cd build && ctest --output-on-failure -j2 --timeout 900)

if [ "${BRAID_SKIP_SANITIZE:-0}" != 1 ]; then
  at "build with AddressSanitizer + UBSan"
  # the device code for one architecture: no kernel runs here, and the
  # normal build above compiles every CUDA file for all of them. -O1, as
  # AddressSanitizer's documentation advises for usable speed (the stage
  # took 12% less than at -O0), with the asserts of a Debug build kept.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DBRAID_SANITIZE=ON \
    -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 \
    -DBRAID_TEST_SMALL=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  cmake --build build-asan -j"$jobs"
  at "tests under ASan + UBSan"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    LSAN_OPTIONS=suppressions="$PWD/../tests/lsan.supp" \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure -j2 --timeout 900 -LE nosan)
fi

if [ "${BRAID_SKIP_FUZZ:-0}" != 1 ] && [ -x topology/fuzz/run.sh ]; then
  export FUZZ_SECONDS=${FUZZ_SECONDS:-10}
  at "fuzzing the topology parsers ($FUZZ_SECONDS s each)"
  topology/fuzz/run.sh
fi
if [ -n "$lint_pid" ]; then
  at "waiting for the lint"
  lint_st=0
  wait "$lint_pid" || lint_st=$?
  lint_pid=
  cat build/lint.log
  [ "$lint_st" = 0 ] || { echo "== FAILED: the lint (exit $lint_st)"; exit 1; }
fi
echo "== all tests passed in $(( $(date +%s) - start )) s"
