#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds a program outside the
# tree against it, with pkg-config and with CMake's find_package.
set -euo pipefail
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/include/braid.h"
libdir=$(ls -d "$prefix"/lib*/ | head -1)
test -f "$libdir/libbraid.so" && test -f "$libdir/libbraid.a"
test -f "$libdir/pkgconfig/braid.pc"
test -f "$libdir/cmake/braid/braidConfig.cmake"

echo "-- pkg-config"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -o "$prefix/hello_pc" "$here/outside/hello.c" $(pkg-config --cflags --libs braid) \
  -Wl,-rpath,"$libdir"
"$prefix/hello_pc"

echo "-- find_package(braid)"
cmake -S "$here/outside" -B "$prefix/outside-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/outside-build" >/dev/null
"$prefix/outside-build/hello_shared"
"$prefix/outside-build/hello_static"

echo "-- only braid_* symbols are exported"
bad=$(nm -D --defined-only "$libdir/libbraid.so" | awk '$2 ~ /[TDBRVW]/ {print $3}' |
  grep -v '^braid_' | grep -v '^_' || true)
if [ -n "$bad" ]; then
  echo "exported symbols without the braid_ prefix:"; echo "$bad"; exit 1
fi
n=$(nm -D --defined-only "$libdir/libbraid.so" | grep -c ' T braid_')
echo "$n braid_* functions exported, nothing else"
