#!/usr/bin/env bash
# The Debian packages: builds them with scripts/package.sh (in a scratch
# build directory, without CUDA to keep the suite's time: the packaging is
# the same), checks what each holds, installs them on this machine with
# dpkg -i (which fails on an unmet dependency), builds a program outside
# the tree against them with pkg-config and with find_package(braid), runs
# it on 2 ranks under the installed braidrun, and purges the packages.
# Skips (exit 77) where braid's packages are installed already: it would
# replace and then remove them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pkgs=(libbraid0 libbraid-dev braid-tools python3-braid-torch)
for p in "${pkgs[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    echo "SKIP: $p is installed on this machine; this test would replace it"
    exit 77
  fi
done
[ "$(id -u)" = 0 ] || { echo "SKIP: dpkg -i needs root"; exit 77; }
scratch=$(mktemp -d)
installed=()
cleanup() {
  [ ${#installed[@]} -eq 0 ] || dpkg -P "${installed[@]}" >/dev/null 2>&1 || true
  rm -rf /usr/lib/python3/dist-packages/braid_torch/__pycache__
  rmdir /usr/lib/python3/dist-packages/braid_torch 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT

echo "-- scripts/package.sh"
BUILD_DIR="$scratch/build" PACKAGE_CMAKE_ARGS="-DBRAID_CUDA=OFF" \
  "$root/scripts/package.sh" "$scratch/debs" >"$scratch/package.log" 2>&1 ||
  { tail -40 "$scratch/package.log"; exit 1; }
debs=("$scratch"/debs/*.deb)
echo "built: ${debs[*]##*/}"

# has PACKAGE PATH...: each path is in the package
has() {
  local p=$1 deb
  shift
  deb=$(ls "$scratch"/debs/"${p}"_*.deb 2>/dev/null) || { echo "FAIL: no package $p"; exit 1; }
  local list
  list=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|')
  for f in "$@"; do
    grep -qx -- "$f" <<<"$list" || { echo "FAIL: $p lacks $f"; exit 1; }
  done
}
multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
lib=/usr/lib/$multi
has libbraid0 "$lib/libbraid.so.0"
has libbraid-dev /usr/include/braid.h "$lib/libbraid.so" "$lib/libbraid.a" \
  "$lib/pkgconfig/braid.pc" "$lib/cmake/braid/braidConfig.cmake"
has braid-tools /usr/bin/braidrun /usr/bin/braid-topo /usr/bin/braid-perf \
  /usr/bin/all_reduce_perf /usr/bin/braid-doctor /usr/bin/braid-trace
deps=$(dpkg-deb -f "$scratch"/debs/braid-tools_*.deb Depends)
grep -q 'libbraid0 (= ' <<<"$deps" || { echo "FAIL: braid-tools does not depend on libbraid0: $deps"; exit 1; }
deps=$(dpkg-deb -f "$scratch"/debs/libbraid0_*.deb Depends)
grep -q 'libhwloc' <<<"$deps" || { echo "FAIL: libbraid0 lacks its hwloc dependency: $deps"; exit 1; }
recs=$(dpkg-deb -f "$scratch"/debs/libbraid0_*.deb Recommends)
grep -q 'libfabric1' <<<"$recs" || { echo "FAIL: libbraid0 does not recommend libfabric1 (opened at run time): $recs"; exit 1; }

echo "-- dpkg -i"
for d in "${debs[@]}"; do installed+=("$(dpkg-deb -f "$d" Package)"); done
dpkg -i "${debs[@]}" >"$scratch/dpkg.log" 2>&1 || { cat "$scratch/dpkg.log"; exit 1; }

echo "-- an outside program: pkg-config"
cc -o "$scratch/hello_pc" "$here/outside/hello.c" $(pkg-config --cflags --libs braid)
echo "-- an outside program: find_package(braid)"
cmake -S "$here/outside" -B "$scratch/outside" >/dev/null
cmake --build "$scratch/outside" >/dev/null
for prog in "$scratch/hello_pc" "$scratch/outside/hello_shared"; do
  out=$(env -i PATH=/usr/bin:/bin /usr/bin/braidrun -n 2 --timeout 60 "$prog")
  n=$(grep -c 'of 2$' <<<"$out" || true)
  [ "$n" = 2 ] || { echo "FAIL: $prog under the installed braidrun:"; echo "$out"; exit 1; }
done
/usr/bin/braid-doctor --help >/dev/null || { echo "FAIL: the installed braid-doctor does not run"; exit 1; }
/usr/bin/braid-trace --help >/dev/null || { echo "FAIL: the installed braid-trace does not run"; exit 1; }
if [ -e "$scratch"/debs/python3-braid-torch_*.deb ]; then
  echo "-- python3-braid-torch: import braid_torch registers the backend"
  (cd / && env -i PATH=/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c '
import braid_torch, torch.distributed as dist
assert braid_torch.__file__.startswith("/usr/lib/python3/dist-packages/"), braid_torch.__file__
assert hasattr(dist.Backend, "BRAID"), "the backend braid is not registered"
print("import braid_torch:", braid_torch.__file__)') || { echo "FAIL: the installed braid_torch"; exit 1; }
elif [ -d "$scratch/build/python/braid_torch" ]; then
  echo "FAIL: the torch backend was built but no python3-braid-torch package"; exit 1
fi
echo "ok: ${#debs[@]} packages built, installed, used and removed"
