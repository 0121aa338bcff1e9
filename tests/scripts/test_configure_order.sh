#!/usr/bin/env bash
# scripts/demo.sh configures build/ without tests; scripts/test.sh must
# still run every test when it finds that cache (or any other: another
# generator, a hand-made configure). Configures a scratch directory as
# demo.sh does, then as test.sh does, and checks that the normal stage lists
# at least the tests test.sh expects of it; then the other order, and a
# directory first configured with another generator.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
min=$(sed -n 's/^min_normal=\([0-9]*\)$/\1/p' scripts/test.sh)
[ -n "$min" ] || { echo "FAIL: no min_normal in scripts/test.sh"; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
listed() { (cd "$1" && ctest -N | sed -n 's/^Total Tests: //p'); }

echo "-- demo.sh's configure, then test.sh's"
scripts/configure.sh demo "$scratch/a"
n=$(listed "$scratch/a")
[ "$n" = 0 ] || { echo "FAIL: the demo build lists $n tests (expected none)"; exit 1; }
scripts/configure.sh test "$scratch/a"
n=$(listed "$scratch/a")
echo "listed: $n (test.sh expects at least $min)"
[ "$n" -ge "$min" ] || { echo "FAIL: after demo then test, $n tests < $min"; exit 1; }

echo "-- test.sh's configure, then demo.sh's, then test.sh's again"
scripts/configure.sh test "$scratch/b"
scripts/configure.sh demo "$scratch/b"
grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$scratch/b/CMakeCache.txt" ||
  { echo "FAIL: demo's configure kept another build type"; exit 1; }
scripts/configure.sh test "$scratch/b"
n=$(listed "$scratch/b")
[ "$n" -ge "$min" ] || { echo "FAIL: after test, demo, test: $n tests < $min"; exit 1; }
grep -q '^CMAKE_BUILD_TYPE:STRING=RelWithDebInfo$' "$scratch/b/CMakeCache.txt" ||
  { echo "FAIL: test's configure kept another build type"; exit 1; }

echo "-- a directory configured by hand with another generator and no tests"
cmake -S . -B "$scratch/c" -G "Unix Makefiles" -DBRAID_TESTS=OFF >/dev/null
scripts/configure.sh test "$scratch/c"
n=$(listed "$scratch/c")
[ "$n" -ge "$min" ] || { echo "FAIL: after a hand-made configure: $n tests < $min"; exit 1; }

echo "-- every ctest run of test.sh fails on finding no test"
runs=$(grep -cE '^[^#]*ctest +-' scripts/test.sh)
guarded=$(grep -cE '^[^#]*ctest +-.*--no-tests=error' scripts/test.sh)
[ "$runs" -ge 1 ] || { echo "FAIL: no ctest run found in scripts/test.sh"; exit 1; }
[ "$runs" = "$guarded" ] ||
  { echo "FAIL: $((runs - guarded)) ctest runs in scripts/test.sh lack --no-tests=error"; exit 1; }
echo "ok: both orders list the whole suite ($n tests)"
