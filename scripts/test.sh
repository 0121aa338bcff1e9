#!/usr/bin/env bash
# Builds and runs the whole test suite: a normal build, then an ASan+UBSan
# build (the size-heavy tests smaller there: BRAID_TEST_SMALL), then the
# parsers' fuzz targets for a bounded time (FUZZ_SECONDS per target, 10 by
# default here; longer explorations: topology/fuzz/run.sh). Exits non-zero
# on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
start=$(date +%s)
at() { echo "== $* (at $(( $(date +%s) - start )) s)"; }

at "build (RelWithDebInfo, -Werror)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
if [ "${BRAID_SKIP_LINT:-0}" != 1 ]; then
  at lint
  scripts/lint.sh build
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
echo "== all tests passed in $(( $(date +%s) - start )) s"
