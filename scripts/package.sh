#!/usr/bin/env bash
# Builds braid's Debian packages (libbraid0, libbraid-dev, braid-tools, and
# python3-braid-torch when the torch backend is built) into DIR (default
# build-deb/packages): a Release build installed under /usr, then cpack.
#   scripts/package.sh [DIR]        then: dpkg -i DIR/*.deb
# BUILD_DIR (default build-deb) is the build directory it uses;
# PACKAGE_CMAKE_ARGS, more cmake arguments (e.g. -DBRAID_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-deb}
out=${1:-$build/packages}
# shellcheck disable=SC2086
scripts/configure.sh demo "$build" -DCMAKE_INSTALL_PREFIX=/usr ${PACKAGE_CMAKE_ARGS:-}
cmake --build "$build" -j"$(nproc)"
mkdir -p "$out"
(cd "$build" && cpack -G DEB -B "$PWD/cpack" >cpack.log 2>&1) ||
  { cat "$build/cpack.log"; exit 1; }
cp "$build"/cpack/*.deb "$out"/
ls "$out"/*.deb
