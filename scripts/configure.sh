#!/usr/bin/env bash
# Configures a build directory for one of the project's uses, with every
# option that use needs given explicitly, so that whatever a directory's
# cache already holds (another profile's options, a hand-made configure,
# another generator) cannot change what gets built:
#   scripts/configure.sh demo  DIR   Release, no tests (scripts/demo.sh)
#   scripts/configure.sh test  DIR   the normal test build (scripts/test.sh)
#   scripts/configure.sh asan  DIR   the ASan + UBSan test build
# Extra arguments after DIR go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:?usage: scripts/configure.sh demo|test|asan DIR [cmake args]}
dir=${2:?usage: scripts/configure.sh demo|test|asan DIR [cmake args]}
shift 2
# A cache made with another generator cannot be reconfigured with Ninja.
if [ -f "$dir/CMakeCache.txt" ] &&
  ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$dir/CMakeCache.txt"; then
  echo "configure: $dir was configured with another generator; starting it anew"
  rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
fi
common=(-DBRAID_WERROR=ON -DBRAID_FUZZ=OFF)
case "$profile" in
demo)
  opts=(-DCMAKE_BUILD_TYPE=Release -DBRAID_TESTS=OFF -DBRAID_SANITIZE=OFF
    -DBRAID_TEST_SMALL=OFF -DCMAKE_C_FLAGS= -DCMAKE_CXX_FLAGS=)
  ;;
test)
  # The CUDA tier (the emulated-GPU tests and every CUDA source) is part
  # of the suite: CUDA at /usr/local/cuda is part of this project's
  # machines, so its absence is an error here rather than 46 tests
  # silently not registered; likewise the torch backend, whose packages
  # scripts/install-deps.sh installs. Users' builds keep AUTO for both.
  opts=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRAID_TESTS=ON -DBRAID_SANITIZE=OFF
    -DBRAID_TEST_SMALL=OFF -DBRAID_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=80;90"
    -DBRAID_TORCH=ON
    -DCMAKE_C_FLAGS= -DCMAKE_CXX_FLAGS=)
  ;;
asan)
  # -O1, as AddressSanitizer's documentation advises for usable speed (the
  # stage took 12% less than at -O0), with the asserts of a Debug build
  # kept; the device code for one architecture: no kernel runs here, and
  # the normal build compiles every CUDA file for all of them.
  # No torch backend: ASan's runtime must be a process's first library,
  # which a python3 host process does not load (bindings/torch).
  opts=(-DCMAKE_BUILD_TYPE=Debug -DBRAID_TESTS=ON -DBRAID_SANITIZE=ON
    -DBRAID_TEST_SMALL=ON -DBRAID_CUDA=ON -DBRAID_TORCH=OFF -DCMAKE_C_FLAGS=-O1
    -DCMAKE_CXX_FLAGS=-O1 -DCMAKE_CUDA_ARCHITECTURES=90)
  ;;
*)
  echo "configure: unknown profile '$profile' (demo, test or asan)" >&2
  exit 2
  ;;
esac
cmake -S . -B "$dir" -G Ninja "${common[@]}" "${opts[@]}" "$@" >/dev/null
