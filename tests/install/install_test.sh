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
# the machine models go under the prefix given to cmake --install, not the
# configured one
test -f "$prefix/share/braid/machines/dgx1-v100.topo" ||
  { echo "the machine models were not installed under $prefix"; exit 1; }

echo "-- pkg-config"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -o "$prefix/hello_pc" "$here/outside/hello.c" $(pkg-config --cflags --libs braid) \
  -Wl,-rpath,"$libdir"
"$prefix/hello_pc"
# the static library with what braid.pc says it needs (Libs.private)
cc -o "$prefix/hello_pc_static" "$here/outside/hello.c" \
  $(pkg-config --cflags braid) "$libdir/libbraid.a" \
  $(pkg-config --static --libs braid | sed 's/ -lbraid / /')
"$prefix/hello_pc_static"
# a CUDA build's static runtime is found through braid.pc's cudalibdir, the
# builder's folder unless the user names theirs
cudalibdir=$(pkg-config --variable=cudalibdir braid)
case "$(pkg-config --static --libs braid)" in *cudart*)
  [ -n "$cudalibdir" ] ||
    { echo "braid.pc links the CUDA runtime but has no cudalibdir to move it"; exit 1; } ;;
esac
if [ -n "$cudalibdir" ]; then
  elsewhere="$prefix/cuda-elsewhere"
  mkdir "$elsewhere" && cp "$cudalibdir/libcudart_static.a" "$elsewhere/"
  libs=$(pkg-config --define-variable=cudalibdir="$elsewhere" --static --libs braid)
  case " $libs " in *" -L$elsewhere "*) ;; *)
    echo "cudalibdir=$elsewhere did not reach the link line: $libs"; exit 1 ;;
  esac
  case "$libs" in *"$cudalibdir"*)
    echo "braid.pc names $cudalibdir outside cudalibdir: $libs"; exit 1 ;;
  esac
  cc -o "$prefix/hello_pc_cuda" "$here/outside/hello.c" \
    $(pkg-config --cflags braid) "$libdir/libbraid.a" $(echo "$libs" | sed 's/ -lbraid / /')
  "$prefix/hello_pc_cuda"
else
  echo "-- braid.pc names no CUDA runtime (a build without CUDA)"
fi

echo "-- find_package(braid)"
cmake -S "$here/outside" -B "$prefix/outside-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/outside-build" >/dev/null
"$prefix/outside-build/hello_shared"
"$prefix/outside-build/hello_static"

echo "-- installed programs run from the prefix with no environment set"
# RPATH $ORIGIN/../lib: braidrun, braid-perf and the ranks find libbraid
# beside them, wherever the prefix is, with no LD_LIBRARY_PATH.
clean_env=(env -i PATH=/usr/bin:/bin HOME="$prefix")
"${clean_env[@]}" "$prefix/bin/braidrun" -n 2 --timeout 60 \
  "$prefix/bin/braid-perf" all_reduce -b 8 -e 4K -f 8 -n 2 -w 1 >"$prefix/perf.out"
grep -q 'Avg bus bandwidth' "$prefix/perf.out" ||
  { cat "$prefix/perf.out"; echo "braid-perf under the installed braidrun printed no result"; exit 1; }
"${clean_env[@]}" "$prefix/bin/braidrun" -n 2 --timeout 60 "$prefix/outside-build/hello_shared" |
  grep -c 'of 2$' | grep -qx 2 || { echo "the outside program did not run on 2 ranks"; exit 1; }
"${clean_env[@]}" "$prefix/bin/all_reduce_perf" -b 8 -e 8 -n 1 -w 0 >/dev/null ||
  { echo "all_reduce_perf alone (one rank, no launcher) failed"; exit 1; }

echo "-- an installed program reads the machine models installed beside it"
sed -i 's/^name .*/name "the installed copy"/' "$prefix/share/braid/machines/pcie-4gpu.topo"
"$prefix/bin/braid-topo" show --machine pcie-4gpu | head -1 | grep -q "the installed copy" ||
  { echo "the installed braid-topo read another copy of the machine models"; exit 1; }

echo "-- the static library defines no global symbol but braid_*"
bad=$(nm -g --defined-only "$libdir/libbraid.a" 2>/dev/null | awk 'NF == 3 {print $3}' |
  grep -v '^braid_' || true)
if [ -n "$bad" ]; then
  echo "global symbols of libbraid.a without the braid_ prefix:"
  echo "$bad" | head -20
  exit 1
fi
# a program defining names the library uses inside links against it
cc -o "$prefix/clash" "$here/outside/clash.c" $(pkg-config --cflags braid) \
  "$libdir/libbraid.a" $(pkg-config --static --libs braid | sed 's/ -lbraid / /')
"$prefix/clash" | grep -qx "the program's own 1" ||
  { echo "a program with its own err_msg did not link against libbraid.a"; exit 1; }

echo "-- only braid_* symbols are exported"
bad=$(nm -D --defined-only "$libdir/libbraid.so" | awk '$2 ~ /[TDBRVW]/ {print $3}' |
  grep -v '^braid_' | grep -v '^_' || true)
if [ -n "$bad" ]; then
  echo "exported symbols without the braid_ prefix:"; echo "$bad"; exit 1
fi
n=$(nm -D --defined-only "$libdir/libbraid.so" | grep -c ' T braid_')
echo "$n braid_* functions exported, nothing else"
