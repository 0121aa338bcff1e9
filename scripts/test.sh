#!/usr/bin/env bash
# Builds and runs the whole test suite: a normal build, then an ASan+UBSan
# build (smaller matrix sizes there), then the parsers' fuzz targets for a
# bounded time. Exits non-zero on any failure.
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
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DBRAID_SANITIZE=ON \
    -DBRAID_MATRIX_COUNTS="0,1,7,1023,65539" >/dev/null
  cmake --build build-asan -j"$jobs"
  at "tests under ASan + UBSan"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    LSAN_OPTIONS=suppressions="$PWD/../tests/lsan.supp" \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure -j2 --timeout 900 -LE nosan)
fi

if [ "${BRAID_SKIP_FUZZ:-0}" != 1 ] && [ -x topology/fuzz/run.sh ]; then
  at "fuzzing the topology parsers (${FUZZ_SECONDS:-60} s each)"
  topology/fuzz/run.sh
fi
echo "== all tests passed in $(( $(date +%s) - start )) s"
