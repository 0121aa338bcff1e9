#!/usr/bin/env bash
# The GPU checks of braid on a borrowed GPU machine that has CUDA, CMake and
# ninja but none of braid's Debian dependencies and no package registry.
#
#   perf/cuda/device_kit.sh fetch      here, on Debian 12 with apt: downloads
#                                      the .debs below into .deps/debs
#   perf/cuda/device_kit.sh run [what] there, from the repository root with
#                                      .deps carried along: unpacks the .debs
#                                      into .deps/root (never into /), builds
#                                      with CUDA and runs
#        what = tests   every test labelled cuda or gpu that is not emulated
#                       (the GPU matrix at 1, 2 and 4 ranks, stream order,
#                       CUDA IPC, the CUDA trainer end to end, the kernels'
#                       element tests);
#               perf    perf/cuda/run_device.sh (the measurements of
#                       docs/PERFORMANCE.md, "Device buffers": kernels,
#                       256 MiB bandwidth with default and larger cuda
#                       slots, 8-byte latency and the size sweep by both
#                       paths of small calls);
#               all     both, the measurements first, on a quiet GPU (the
#                       default);
#               build   the build alone (for runs of one's own after it:
#                       `. <build>/deps-env` sets the libraries' paths).
#
# Results go to $OUT when it is set, else to <build>/kit-out: kit.log
# (everything), build.log, ctest.log, perf.md (the section for
# docs/PERFORMANCE.md) and logs.tgz (the raw logs). Environment: BUILD
# (default build-device); KIT_TEST_SECONDS (default 300) and
# KIT_PERF_SECONDS (default 240) bound the two steps, so that with the
# build the whole stays under 10 minutes; CUDA_ARCHS (default 90: H100 and
# H200), the device code built.
#
# Exit status: 0 when every step ran and passed, else the first failing
# step's status (2: no CUDA device).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEBS=$ROOT/.deps/debs

# What the CUDA build and its tests need beyond a C toolchain, CMake, ninja
# and CUDA: headers, pkg-config files and the libraries' run-time closure
# (found with readelf: libcriterion needs libgit2, which needs TLS and
# Kerberos libraries), pkg-config itself, and the dataset that the CUDA
# trainer's end-to-end test reads.
PKGS=(
  libhwloc-dev libhwloc15 libudev1
  libcriterion-dev libcriterion3 libffi8 libnanomsg5 libgit2-1.5
  libhttp-parser2.9 libmbedcrypto7 libmbedtls14 libmbedx509-1 libssh2-1
  libssl3 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0
  libcom-err2 libkeyutils1 libpcre2-8-0
  libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0
  zlib1g-dev zlib1g
  pkgconf-bin libpkgconf3
  dataset-fashion-mnist
)

fetch() {
  mkdir -p "$DEBS"
  rm -f "$DEBS"/*.deb
  apt-get update -qq
  (cd "$DEBS" && apt-get download -qq "${PKGS[@]}")
  echo "device_kit: $(ls "$DEBS" | wc -l) packages, $(du -sh "$DEBS" | cut -f1) in $DEBS"
  echo "device_kit: carry .deps and run: perf/cuda/device_kit.sh run"
}

# Unpacks the .debs into $BUILD/deps-root (.deps keeps the .debs alone,
# small enough to travel), points absolute links into it and
# writes pkg-config files whose paths lie in it; prints nothing.
unpack() {
  local root=$BUILD/deps-root d f t
  [ -n "$(ls "$DEBS"/*.deb 2>/dev/null)" ] ||
    { echo "device_kit: no .debs in $DEBS (run 'fetch' on a Debian 12 machine and carry .deps)" >&2; return 3; }
  rm -rf "$root"
  mkdir -p "$root"
  for d in "$DEBS"/*.deb; do
    case $d in *dataset-fashion-mnist*) continue ;; esac
    dpkg-deb -x "$d" "$root"
  done
  # Debian links /usr/lib/.../libz.so to /lib/...: keep links inside root
  while IFS= read -r f; do
    t=$(readlink "$f")
    case $t in /*) ln -sfn "$root$t" "$f" ;; esac
  done < <(find "$root" -type l)
  # pkg-config files: the paths moved under root; the static-only fields
  # of criterion.pc name packages not carried. openblas.pc is an
  # alternatives link on Debian: the pthread flavour's.
  local pc=$root/pc lib=$root/usr/lib/x86_64-linux-gnu
  mkdir -p "$pc"
  cp "$lib/pkgconfig/hwloc.pc" "$lib/pkgconfig/criterion.pc" \
    "$lib/pkgconfig/zlib.pc" "$lib/openblas-pthread/pkgconfig/openblas.pc" "$pc/"
  sed -i "s|/usr|$root/usr|g; /^Requires.private/d; /^Libs.private/d" "$pc"/*.pc
  # the dataset where the trainer looks for it (data only, nothing else)
  d=$(ls "$DEBS"/dataset-fashion-mnist*.deb 2>/dev/null | head -1)
  if [ -n "$d" ] && [ ! -d /usr/share/datasets/fashion-mnist ]; then
    rm -rf "$BUILD/deps-data"
    dpkg-deb -x "$d" "$BUILD/deps-data"
    mkdir -p /usr/share/datasets
    cp -r "$BUILD/deps-data/usr/share/datasets/fashion-mnist" /usr/share/datasets/
  fi
}

use_root() {
  local root=$BUILD/deps-root lib=$BUILD/deps-root/usr/lib/x86_64-linux-gnu
  export PKG_CONFIG=$root/usr/bin/pkgconf PKG_CONFIG_LIBDIR=$root/pc PKG_CONFIG_PATH=
  export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread:$root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

step() { echo "== $* ($(date -u +%H:%M:%S))"; }

run() {
  local what=${1:-all}
  case $what in all | tests | perf | build) ;; *)
    echo "device_kit: run what? tests, perf, all or build, not '$what'" >&2
    return 64
    ;;
  esac
  # absolute: the clean-up after the tests matches programs by this path
  BUILD=$(realpath -m "${BUILD:-$ROOT/build-device}")
  local out=${OUT:-$BUILD/kit-out} rc=0 r
  mkdir -p "$out"
  exec > >(tee -a "$out/kit.log") 2>&1
  step "machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv || true
  nvcc --version | tail -2 || true
  cmake --version | head -1
  grep PRETTY_NAME /etc/os-release || true
  step "unpacking $(ls "$DEBS" | wc -l) packages into $BUILD/deps-root"
  unpack
  use_root
  step "configure and build ($BUILD)"
  # warnings do not stop the build: that machine's compilers are not the
  # ones CI keeps -Werror clean with (build.log keeps what they said)
  r=0
  { cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DBRAID_CUDA=ON -DBRAID_WERROR=OFF -DBRAID_TESTS=ON \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" &&
      cmake --build "$BUILD" -j"$(nproc)"; } >"$out/build.log" 2>&1 || r=$?
  grep -E "warning:|error:|FAILED" "$out/build.log" | head -40 || true
  tail -2 "$out/build.log"
  if [ "$r" -ne 0 ]; then
    echo "device_kit: the build failed (exit $r; $out/build.log)"
    return "$r"
  fi
  declare -p LD_LIBRARY_PATH | sed 's/^declare -x/export/' >"$BUILD/deps-env"
  if [ "$what" = build ]; then
    step "built: exit 0"
    return 0
  fi
  if [ "$what" != tests ]; then
    step "perf/cuda/run_device.sh (up to ${KIT_PERF_SECONDS:-240} s)"
    r=0
    timeout "${KIT_PERF_SECONDS:-240}" "$ROOT/perf/cuda/run_device.sh" "$BUILD" \
      >"$out/perf.md" || r=$?
    cat "$out/perf.md"
    echo "run_device.sh exit $r"
    # ranks of a run cut off by the time limit must not run on beside the tests
    pkill -KILL -f "^$BUILD/" 2>/dev/null || true
    [ "$rc" -ne 0 ] || rc=$r
  fi
  if [ "$what" != perf ]; then
    step "ctest -L 'cuda|gpu' -LE emu (up to ${KIT_TEST_SECONDS:-300} s)"
    r=0
    (cd "$BUILD" && timeout "${KIT_TEST_SECONDS:-300}" ctest -L 'cuda|gpu' -LE emu \
      --output-on-failure --timeout 300) >"$out/ctest.log" 2>&1 || r=$?
    grep -E "Test +#|tests passed|Skipped|Failed|SKIP" "$out/ctest.log" || true
    echo "ctest exit $r"
    # nor a test cut off by its time limit beside what comes next
    pkill -KILL -f "^$BUILD/" 2>/dev/null || true
    [ "$rc" -ne 0 ] || rc=$r
  fi
  tar -czf "$out/logs.tgz" -C "$BUILD" --ignore-failed-read \
    Testing/Temporary device-logs 2>/dev/null || true
  step "done: exit $rc (results in $out)"
  return "$rc"
}

case ${1:-} in
  fetch) fetch ;;
  run) run "${2:-all}" ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
    exit 64
    ;;
esac
