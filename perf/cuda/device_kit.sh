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
# The tests run one at a time, each under a time limit of its own, the
# ones that have not yet passed on a GPU first (KIT_TEST_FIRST), under an
# MPS daemon of the kit's own when nvidia-cuda-mps-control is there
# (KIT_MPS=0: as separate processes), as several ranks should share a
# GPU; a test that fails or is cut off gets the daemon restarted, so that
# a GPU fault in one does not fail the rest.
#
# Results go to $OUT when it is set, else to <build>/kit-out: kit.log
# (everything), build.log, ctest.log, tests.txt (one line per test: result,
# seconds, and how many of its tests skipped and why when some did; a PROBE
# line: see probe_one_queue below; the ncu profile of two reduction
# kernels goes into logs.tgz: see profile_narrow), memcheck.log (when
# time was left for it: see memcheck below), probe.log,
# perf.md (the section for docs/PERFORMANCE.md) and logs.tgz (the raw
# logs). Environment: BUILD (default build-device); KIT_SECONDS
# (default 560) bounds the whole run, so that it fits a 10-minute command;
# KIT_PERF_SECONDS (default 220) bounds the measurements, the tests get
# what is left (with 'all'), each at most KIT_TEST_EACH (default 90)
# seconds; run_device.sh gets PLAIN=0 (its figures without MPS are known
# already) and RUN_TIMEOUT=60 (a run that hangs costs a minute) unless
# they are set; CUDA_ARCHS (default 90: H100 and H200), the device code built.
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

# With the time the tests left (at least KIT_MEMCHECK_MIN, default 90 s):
# the reduction kernels' test under compute-sanitizer's memcheck, which
# finds accesses out of bounds that a right result does not rule out.
# Writes memcheck.log in $1; status 1 when memcheck reported errors, 0 when
# it found none, did not finish in time or could not run.
memcheck() {
  local out=$1 cs lim r=0
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  lim=$(($(left) - 15))
  if [ -z "$cs" ]; then
    echo "memcheck: not run (no compute-sanitizer)"
    return 0
  fi
  if [ "$lim" -lt "${KIT_MEMCHECK_MIN:-90}" ]; then
    echo "memcheck: not run (only $lim s left)"
    return 0
  fi
  step "compute-sanitizer memcheck on test_cudev's kernels (up to $lim s)"
  timeout -k 5 "$lim" "$cs" --tool memcheck --target-processes all --error-exitcode 9 \
    "$BUILD/tests/cuda/test_cudev" --jobs 1 --filter 'cudev/gpu_reduce_*' \
    >"$out/memcheck.log" 2>&1 || r=$?
  pkill -KILL -f "^$BUILD/" 2>/dev/null || true
  tail -n 3 "$out/memcheck.log"
  case $r in
  0) echo "memcheck: no errors" ;;
  124 | 137) echo "memcheck: did not finish in $lim s (not a failure)"; r=0 ;;
  9) echo "memcheck: ERRORS (memcheck.log)"; r=1 ;;
  *) echo "memcheck: exit $r (memcheck.log)" ;;
  esac
  return "$r"
}

# With 60 s left and Nsight Compute there: the reduction kernel (k_vec) of
# float16 sum and of float32 sum profiled once each (ncu: throughput,
# occupancy, memory and launch sections) on reduce_bench's 64 MiB buffers,
# to compare the 16-bit types, which reduced at 0.75 of memcpy on an H100
# while their kernels kept vectors in local memory, with the others
# (docs/PERFORMANCE.md, "Figures").
# Writes ncu.txt into <build>/device-logs (in logs.tgz) and its headline
# figures into the log.
profile_narrow() {
  local ncu dt name log=$BUILD/device-logs/ncu.txt
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
  if [ -z "$ncu" ]; then
    echo "ncu: not run (no ncu)"
    return 0
  elif [ "$(left)" -lt 60 ]; then
    echo "ncu: not run (only $(left) s left)"
    return 0
  fi
  step "ncu: k_vec of float16 and float32 sum (30 s at most each)"
  mkdir -p "$BUILD/device-logs"
  : >"$log"
  for dt in 6:float16 8:float32; do
    name=${dt#*:}
    echo "=== $name sum" >>"$log"
    timeout -k 5 30 "$ncu" --kernel-name-base mangled \
      --kernel-name "regex:k_vecINS_5red_fILi${dt%%:*}ELi0EEELb0E" --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section MemoryWorkloadAnalysis \
      "$BUILD/device/bench/reduce_bench" -b 64M -n 2 >>"$log" 2>&1 || echo "(ncu exit $?)" >>"$log"
  done
  grep -E "^===|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Duration|ncu exit" "$log" || true
}

# Whether a GPU holds braid's own work behind a stream held at a gate when
# every stream shares one hardware queue (docs/CUDA.md, "Stream gates and
# hardware queues"): the alternating-streams test with
# CUDA_DEVICE_MAX_CONNECTIONS=1 and gates forced on (BRAID_CUDA_GATE=1), 30
# s at most, when 60 s are left. An observation, not a test: a line in
# tests.txt, "PROBE held" (it timed out or failed) or "PROBE not held".
probe_one_queue() {
  local out=$1 r=0
  if [ "$(left)" -lt 60 ]; then
    echo "NOT RUN  probe: gates on one hardware queue (the kit's time was spent)" >>"$out/tests.txt"
    return 0
  fi
  step "probe: gates forced on with CUDA_DEVICE_MAX_CONNECTIONS=1 (30 s at most)"
  CUDA_DEVICE_MAX_CONNECTIONS=1 BRAID_CUDA_GATE=1 BRAID_TIMEOUT=10 \
    timeout -k 5 30 "$BUILD/tests/cuda/test_gpu_stream" --jobs 1 \
    --filter 'gpu_stream/calls_alternating*' >"$out/probe.log" 2>&1 || r=$?
  pkill -KILL -f "^$BUILD/" 2>/dev/null || true
  if [ "$r" = 0 ] && ! grep -q 'Passing: [1-9]' "$out/probe.log"; then
    echo "PROBE    gates on one hardware queue: not run (the test skipped: probe.log)" | tee -a "$out/tests.txt"
  elif [ "$r" = 0 ]; then
    echo "PROBE    gates on one hardware queue: not held (the test passed)" | tee -a "$out/tests.txt"
  else
    echo "PROBE    gates on one hardware queue: held (exit $r; probe.log)" | tee -a "$out/tests.txt"
  fi
}

# Seconds left of the run's KIT_SECONDS.
left() { echo $((KIT_END - SECONDS)); }

# The tests of ctest -L 'cuda|gpu' -LE emu, those matching KIT_TEST_FIRST
# (in its order) first, one name per line.
test_order() {
  local all first p n
  all=$(cd "$BUILD" && ctest -N -L 'cuda|gpu' -LE emu | sed -n 's/^ *Test *#[0-9]*: //p')
  first=""
  for p in ${KIT_TEST_FIRST:-cuda_test_ gpu_nodev gpu_stream gpu_share gpu_args gpu_matrix_stream_kernel \
    gpu_matrix_stream_small gpu_matrix_stream_2 transports_cuda_ipc trainer_cuda}; do
    for n in $all; do
      case " $first " in *" $n "*) continue ;; esac
      case $n in "$p"*) first="$first $n" ;; esac
    done
  done
  for n in $first $all; do echo "$n"; done | awk '!seen[$0]++'
}

# Runs the GPU tests one by one (see the top); appends to ctest.log and
# tests.txt in $1; status 0 when every test passed or skipped.
run_tests() {
  local out=$1 n t0 r lim res skipped rc=0 mps=0 restarts=0
  # shellcheck source=perf/cuda/mps.sh
  . "$ROOT/perf/cuda/mps.sh"
  if [ "${KIT_MPS:-1}" != 0 ]; then
    if mps_start "$BUILD/kit-mps/0"; then mps=1; else echo "device_kit: $MPS_WHY: tests without MPS"; fi
  fi
  : >"$out/tests.txt"
  for n in $(test_order); do
    lim=$(($(left) - 15))
    [ "$lim" -le "${KIT_TEST_EACH:-90}" ] || lim=${KIT_TEST_EACH:-90}
    if [ "$lim" -lt 10 ]; then
      echo "NOT RUN  $n (the kit's time was spent)" | tee -a "$out/tests.txt"
      [ "$rc" -ne 0 ] || rc=124
      continue
    fi
    t0=$SECONDS
    r=0
    # the test's whole output, with Criterion's line per test (a test
    # binary whose GPU tests skip still passes: the skips are counted)
    (cd "$BUILD" && CRITERION_VERBOSITY_LEVEL=1 timeout -k 5 "$lim" \
      ctest -R "^$n\$" --output-on-failure -V) >"$out/ctest.one" 2>&1 || r=$?
    pkill -KILL -f "^$BUILD/" 2>/dev/null || true
    cat "$out/ctest.one" >>"$out/ctest.log"
    # a test program's skips: Criterion's verbose "[SKIP]" lines, or the
    # "SKIP suite::test: why" lines tests/criterion_main.c prints
    skipped=$(grep -cE '\[SKIP\]|^SKIP [^:]+::' "$out/ctest.one" || true)
    case $r in
    0) res=PASS
       if grep -q '\*\*\*Skipped' "$out/ctest.one"; then res=SKIP
       elif [ "$skipped" -gt 0 ]; then
         res="PASS ($skipped of its tests skipped: $(grep -m1 -E '\[SKIP\]|^SKIP [^:]+::' "$out/ctest.one" | sed -E 's/^.*\[SKIP\] *//; s/^SKIP //' | cut -c1-80))"
       fi ;;
    124 | 137) res="TIMEOUT (the kit's limit, $lim s)" ;;
    *) res="FAIL (ctest exit $r)" ;;
    esac
    printf '%-8s %-34s %4d s%s\n' "${res%% *}" "$n" $((SECONDS - t0)) \
      "$([ "$res" = "${res%% *}" ] || echo " ${res#* }")" | tee -a "$out/tests.txt"
    case $res in PASS* | SKIP) ;; *)
      [ "$rc" -ne 0 ] || rc=1
      if [ "$mps" = 1 ]; then # a GPU fault may have left the server unusable
        mps_stop
        restarts=$((restarts + 1))
        mps_start "$BUILD/kit-mps/$restarts" || { mps=0; echo "device_kit: $MPS_WHY: the rest without MPS"; }
      fi ;;
    esac
  done
  mps_stop
  rm -f "$out/ctest.one"
  return "$rc"
}

run() {
  local what=${1:-all}
  case $what in all | tests | perf | build) ;; *)
    echo "device_kit: run what? tests, perf, all or build, not '$what'" >&2
    return 64
    ;;
  esac
  KIT_END=$((SECONDS + ${KIT_SECONDS:-560}))
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
    local lim=${KIT_PERF_SECONDS:-220}
    [ "$lim" -le $(($(left) - 20)) ] || lim=$(($(left) - 20))
    step "perf/cuda/run_device.sh (up to $lim s)"
    r=0
    PLAIN=${PLAIN:-0} RUN_TIMEOUT=${RUN_TIMEOUT:-60} \
      timeout "$lim" "$ROOT/perf/cuda/run_device.sh" "$BUILD" \
      >"$out/perf.md" || r=$?
    cat "$out/perf.md"
    echo "run_device.sh exit $r"
    # ranks of a run cut off by the time limit must not run on beside the tests
    pkill -KILL -f "^$BUILD/" 2>/dev/null || true
    [ "$rc" -ne 0 ] || rc=$r
  fi
  if [ "$what" != perf ]; then
    step "ctest -L 'cuda|gpu' -LE emu, one test at a time (up to $(($(left) - 15)) s)"
    r=0
    : >"$out/ctest.log"
    run_tests "$out" || r=$?
    echo "tests: exit $r ($(grep -c '^PASS' "$out/tests.txt") passed," \
      "$(grep -c '^SKIP' "$out/tests.txt") skipped, $(grep -vc '^PASS\|^SKIP' "$out/tests.txt") not)"
    [ "$rc" -ne 0 ] || rc=$r
    profile_narrow
    memcheck "$out" || { r=$?; [ "$rc" -ne 0 ] || rc=$r; }
    probe_one_queue "$out"
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
