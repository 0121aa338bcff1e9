#!/usr/bin/env bash
# Device-buffer measurements on a machine with a GPU: builds braid with CUDA
# and prints a markdown section for docs/PERFORMANCE.md on stdout (progress
# and raw tool output go to stderr and to $LOG_DIR).
#
#   perf/cuda/run_device.sh [build-dir]      (default: build-device)
#
# Measures, on GPU 0:
#   1. reduce_bench: cudev_reduce / cudev_reduce_fwd at 256 MiB for every
#      dtype x {sum, max} against cudaMemcpy device-to-device bandwidth B
#      (target: >= 0.90 of B);
#   2. braid-perf all_reduce -G 1 at 256 MiB with 2 and 4 ranks on the one
#      GPU (braidrun -n 2/4), busbw against the memory-traffic bound of the
#      ring over CUDA IPC (target: >= 0.70 of the bound): with braid's
#      defaults (no variable set), direct with the cuda transport's slots
#      of BRAID_CUDA_BUFFSIZE / 8 (BRAID_CUDA_BUFFSIZE in $CUDA_BUFFSIZES:
#      larger slots are fewer, longer copies per step, each driven by the
#      host) and as allreduce kernels (BRAID_CUDA_KERNEL_MAX=$SIZE: every
#      step on the GPU, src/exec_kernel.c) with slots of each size in
#      $KERNEL_SLOTS (BRAID_CUDA_KERNEL_SLOT), and with at most each
#      number of blocks per rank in $KERNEL_BLOCKS (BRAID_CUDA_KERNEL_BLOCKS;
#      N: braid's default slots, N@SLOT: slots of SLOT);
#   3. 8-byte allreduce latency on device buffers, 2 ranks (target < 10 us),
#      on a CUDA stream and blocking, each by three paths: direct (CUDA IPC,
#      BRAID_CUDA_HOST_MAX=0), through pinned host memory
#      (BRAID_CUDA_HOST_MAX=$HOST_MAX) and as one allreduce kernel per rank
#      (BRAID_CUDA_KERNEL_MAX=$KERNEL_MAX, src/exec_kernel.c); each $LAT_REPS
#      times (default 3), reported as the median with the range when the
#      runs differ ("8.34 (7.98-13.98)"): one run's average can carry a
#      stall of a few milliseconds;
#   4. where the paths cross: allreduce time from 8 B to 4 MiB, 2 ranks on
#      a CUDA stream, by each path (what the defaults of BRAID_CUDA_HOST_MAX
#      and BRAID_CUDA_KERNEL_MAX should be; KERNEL_MAX, default 4M, keeps
#      every size of the sweep on the kernel path).
# Items 2-4 run twice: first under MPS when nvidia-cuda-mps-control is
# there (MPS=0 skips it; perf/cuda/mps.sh: a daemon of its own, with its
# pipe and log folders under $LOG_DIR, started before and stopped after),
# the way several ranks should share a GPU, then with the ranks as they
# are, separate processes that the GPU runs one at a time (each hand-over
# between them waits for a switch). After an MPS pass the second is short
# (a tenth of the iterations or less): its figures show how much slower
# that is, and a time limit cuts it rather than the MPS pass. PLAIN=0
# skips the second pass (its figures are in docs/PERFORMANCE.md already).
# RUN_TIMEOUT (seconds, default 600) bounds each braidrun, so that a run
# that hangs costs that much and not the whole time limit.
#
# The bound (docs/PERFORMANCE.md, "Device buffers"): the cuda transport
# sends a chunk by copying it into a slot in the receiver's device memory
# (read c, write c) and receives by reducing (read slot, read local, write:
# 3c) or copying (read slot, write: 2c) out of the slot. A ring allreduce of
# S bytes on k ranks, chunks c = S/k, does per rank 2(k-1) sends, (k-1)
# reducing receives and (k-1) copying receives: 9(k-1)c bytes. The k ranks
# share one GPU, so 9(k-1)S bytes cross its memory and t >= 9(k-1)S / B,
# algbw = S/t <= B / (9(k-1)), busbw = algbw * 2(k-1)/k <= 2B / (9k).
#
# Exit status: 0, 2 no CUDA device (nothing measured), 124 stopped by
# SIGTERM (a time limit: the section is printed with what was measured and
# says so), else the failing step's status.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-$ROOT/build-device}
SIZE=${SIZE:-256M}
HOST_MAX=${HOST_MAX:-4M}
KERNEL_MAX=${KERNEL_MAX:-4M}
CUDA_BUFFSIZES=${CUDA_BUFFSIZES:-4M 16M 32M 128M}
KERNEL_SLOTS=${KERNEL_SLOTS:-4M 16M 64M}
KERNEL_BLOCKS=${KERNEL_BLOCKS:-64 128 64@16M 128@16M}
LOG_DIR=${LOG_DIR:-$BUILD/device-logs}
JOBS=${JOBS:-$(nproc)}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
LAT_REPS=${LAT_REPS:-3}

log() { printf '%s\n' "$*" >&2; }

# A configured build directory is used as it is (perf/cuda/device_kit.sh
# builds one with the tests); else a Release build without them.
if [ -f "$BUILD/CMakeCache.txt" ]; then
  log "== building in $BUILD (configured already: $(sed -n \
    's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt"), used as it is)"
else
  log "== building in $BUILD (BRAID_CUDA=ON)"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DBRAID_CUDA=ON -DBRAID_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=Release >&2
fi
ninja -C "$BUILD" -j"$JOBS" braid-perf braidrun reduce_bench >&2
mkdir -p "$LOG_DIR"

PERF=$BUILD/perf/braid-perf
RUN=$BUILD/tools/braidrun
RB=$BUILD/device/bench/reduce_bench

# ---- 1. reduction kernels against memcpy ----
log "== reduce_bench -b $SIZE"
set +e
"$RB" -b "$SIZE" >"$LOG_DIR/reduce_bench.txt" 2>&1 &
JOB=$!
wait "$JOB"
rc=$?
JOB=
set -e
cat "$LOG_DIR/reduce_bench.txt" >&2
if [ "$rc" -eq 2 ]; then
  log "run_device.sh: no CUDA device here; nothing measured"
  exit 2
fi
[ "$rc" -eq 0 ] || exit "$rc"
B=$(sed -n 's/^# cudaMemcpy device to device: \([0-9.]*\) GB\/s.*/\1/p' \
  "$LOG_DIR/reduce_bench.txt")
[ -n "$B" ] || { log "run_device.sh: no memcpy rate in reduce_bench's output"; exit 3; }

# The data row of a braid-perf run under braidrun (rank 0's "[0] " prefix
# removed): size count type redop root time algbw busbw #wrong (x2).
perf_row() {
  sed -n 's/^\[0\] *//p' "$1" | awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print; exit }'
}

run_perf() { # log-file ranks args...
  local out=$1 n=$2
  shift 2
  log "== braidrun -n $n braid-perf all_reduce -G 1 $*"
  set +e
  "$RUN" -n "$n" --timeout "$RUN_TIMEOUT" "$PERF" all_reduce -G 1 "$@" >"$out" 2>&1 &
  JOB=$!
  wait "$JOB"
  local rc=$?
  JOB=
  set -e
  cat "$out" >&2
  return $rc
}

# ---- 2-4, once as the ranks are (separate processes, which the GPU runs
# one at a time) and once under MPS when its control daemon is there ----
# Results go to associative arrays keyed "<tag>.<...>"; logs to
# $LOG_DIR/<tag>/.
declare -A BW_OOP BW_INP WRONG BWS LAT SWEEP_RC ITERS
measure() { # tag quick: quick=1 runs fewer iterations
  local t=$1 d=$LOG_DIR/$1 k f rc row kind val path mode y slot r
  # iterations (-n) and warm-up (-w) of the bandwidth, latency and sweep runs
  local bw="-n 20 -w 5" lat="-n 2000 -w 200" sw="-n 200 -w 20"
  [ "$2" = 0 ] || { bw="-n 3 -w 1"; lat="-n 200 -w 20"; sw="-n 20 -w 2"; }
  ITERS[$t]="$bw (bandwidth), $lat (latency), $sw (by size)"
  mkdir -p "$d"
  # 2. bandwidth, 2 and 4 ranks on GPU 0
  for k in 2 4; do
    f=$d/allreduce_${k}ranks.txt
    # shellcheck disable=SC2086 # $bw: two options
    run_perf "$f" "$k" -b "$SIZE" -e "$SIZE" $bw -c 1 -d float32 || true
    row=$(perf_row "$f")
    [ -n "$row" ] || { log "run_device.sh: no result row in $f"; return 3; }
    BW_OOP[$t.$k]=$(awk '{ print $8 }' <<<"$row")
    BW_INP[$t.$k]=$(awk '{ print $12 }' <<<"$row")
    WRONG[$t.$k]=$(awk '{ print $9 + $13 }' <<<"$row")
  done
  # the paths one by one, each with the slot sizes to compare: direct
  # over CUDA IPC (copies into the peers' slots of BRAID_CUDA_BUFFSIZE / 8,
  # each driven by the host) and as allreduce kernels with slots of
  # BRAID_CUDA_KERNEL_SLOT; a failed run is shown
  for row in $(bw_rows); do
    kind=${row%%:*}
    val=${row#*:}
    for k in 2 4; do
      f=$d/allreduce_${k}ranks_${kind}${val}.txt
      rc=0
      if [ "$kind" = kernel ]; then
        # shellcheck disable=SC2086
        BRAID_CUDA_KERNEL_MAX=$SIZE BRAID_CUDA_KERNEL_SLOT=$val run_perf "$f" "$k" \
          -b "$SIZE" -e "$SIZE" $bw -c 1 -d float32 || rc=$?
      elif [ "$kind" = blocks ]; then
        # N@SLOT, or N: BRAID_CUDA_KERNEL_SLOT empty, which braid reads as unset
        slot=
        [ "${val#*@}" = "$val" ] || slot=${val#*@}
        # shellcheck disable=SC2086
        BRAID_CUDA_KERNEL_MAX=$SIZE BRAID_CUDA_KERNEL_SLOT=$slot \
          BRAID_CUDA_KERNEL_BLOCKS=${val%@*} run_perf "$f" "$k" \
          -b "$SIZE" -e "$SIZE" $bw -c 1 -d float32 || rc=$?
      else
        # shellcheck disable=SC2086
        BRAID_CUDA_KERNEL_MAX=0 BRAID_CUDA_HOST_MAX=0 BRAID_CUDA_BUFFSIZE=$val \
          run_perf "$f" "$k" -b "$SIZE" -e "$SIZE" $bw -c 1 -d float32 || rc=$?
      fi
      row=$(perf_row "$f")
      BWS[$t.$kind$val.$k]="failed (exit $rc)"
      [ "$rc" -eq 0 ] && [ -n "$row" ] &&
        BWS[$t.$kind$val.$k]=$(awk '{ print $8, $12, $9 + $13 }' <<<"$row")
    done
  done
  # 3. latency, 8 bytes, 2 ranks: stream and blocking, by each path,
  # LAT_REPS runs each. A run that fails (braid-perf exits 1 on a wrong
  # element) is reported in the table, not hidden: "failed (exit N)".
  for path in direct host kernel; do
    for mode in stream blocking; do
      y=0
      [ "$mode" = blocking ] && y=1
      rc=0
      : >"$d/allreduce_8B_${mode}_${path}.times"
      for ((r = 1; r <= LAT_REPS && rc == 0; r++)); do
        f=$d/allreduce_8B_${mode}_${path}_$r.txt
        # shellcheck disable=SC2086
        BRAID_CUDA_HOST_MAX=$(host_max "$path") \
          BRAID_CUDA_KERNEL_MAX=$(kernel_max "$path") run_perf "$f" 2 -b 8 -e 8 \
          $lat -c 1 -d float32 -y "$y" || rc=$?
        perf_row "$f" | awk '{ print $6 }' >>"$d/allreduce_8B_${mode}_${path}.times"
      done
      LAT[$t.$mode.$path]=$(median_range "$d/allreduce_8B_${mode}_${path}.times")
      [ "$rc" -eq 0 ] || LAT[$t.$mode.$path]="failed (exit $rc)"
    done
  done
  # 4. the two paths from 8 B to 4 MiB (2 ranks, CUDA stream)
  for path in direct host kernel; do
    SWEEP_RC[$t.$path]=0
    # shellcheck disable=SC2086
    BRAID_CUDA_HOST_MAX=$(host_max "$path") \
      BRAID_CUDA_KERNEL_MAX=$(kernel_max "$path") run_perf "$d/allreduce_sweep_$path.txt" 2 \
      -b 8 -e 4M -f 4 $sw -c 1 -d float32 || SWEEP_RC[$t.$path]=$?
  done
}

# The bandwidth rows after the defaults: direct:<BRAID_CUDA_BUFFSIZE>,
# kernel:<BRAID_CUDA_KERNEL_SLOT>, then blocks:<BRAID_CUDA_KERNEL_BLOCKS>
# or blocks:<BRAID_CUDA_KERNEL_BLOCKS>@<BRAID_CUDA_KERNEL_SLOT>.
bw_rows() {
  local v
  for v in $CUDA_BUFFSIZES; do echo "direct:$v"; done
  for v in $KERNEL_SLOTS; do echo "kernel:$v"; done
  for v in $KERNEL_BLOCKS; do echo "blocks:$v"; done
}

# The median of the numbers in a file, one a line, and their range when
# they differ: "8.34 (7.98-13.98)"
median_range() {
  sort -g "$1" | awk 'NF { a[++n] = $1 }
    END { if (n) printf "%s", a[int((n + 1) / 2)]
          if (n > 1 && a[1] != a[n]) printf " (%s-%s)", a[1], a[n] }'
}

# BRAID_CUDA_HOST_MAX of a path: direct (0) or through host memory
host_max() { if [ "$1" = host ]; then echo "$HOST_MAX"; else echo 0; fi; }
# BRAID_CUDA_KERNEL_MAX of a path: allreduce kernels ($KERNEL_MAX) or none
kernel_max() { if [ "$1" = kernel ]; then echo "$KERNEL_MAX"; else echo 0; fi; }

# ---- the markdown section (report) ----
# size, out-of-place time and wrong elements of every data row of a sweep
sweep_rows() {
  sed -n 's/^\[0\] *//p' "$1" |
    awk '$1 ~ /^[0-9]+$/ && NF >= 13 { print $1, $6, $9 + $13 }'
}

tables() { # tag
  local t=$1 d=$LOG_DIR/$1 k v path label row kind val
  echo "Allreduce, float32 sum, $SIZE, k ranks on one GPU (\`braidrun -n k"
  echo "braid-perf all_reduce -G 1\`, CUDA stream). Bound: ring over CUDA IPC,"
  echo "busbw <= 2B / (9k) (see \"Device buffers\"); target >= 0.70."
  echo "Iterations: ${ITERS[$t]:-none ran}."
  echo
  echo "| path and slots | ranks | busbw out-of-place (GB/s) | busbw in-place (GB/s) | bound 2B/(9k) (GB/s) | out-of-place / bound | in-place / bound | #wrong |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  for k in 2 4; do
    if [ -z "${BW_OOP[$t.$k]:-}" ]; then
      echo "| defaults (no variable set) | $k | not measured | | | | | |"
      continue
    fi
    awk -v k="$k" -v b="$B" -v o="${BW_OOP[$t.$k]}" -v i="${BW_INP[$t.$k]}" \
      -v w="${WRONG[$t.$k]}" 'BEGIN {
        bound = 2 * b / (9 * k);
        printf "| defaults (no variable set) | %d | %.1f | %.1f | %.1f | %.2f | %.2f | %d |\n",
               k, o, i, bound, o / bound, i / bound, w }'
  done
  for row in $(bw_rows); do
    kind=${row%%:*}
    val=${row#*:}
    case $kind in
    direct) label="direct, BRAID_CUDA_BUFFSIZE=$val" ;;
    kernel) label="allreduce kernels, BRAID_CUDA_KERNEL_SLOT=$val" ;;
    *) label="allreduce kernels, BRAID_CUDA_KERNEL_BLOCKS=${val%@*}"
       [ "${val#*@}" = "$val" ] ||
         label="allreduce kernels, BRAID_CUDA_KERNEL_SLOT=${val#*@}, BRAID_CUDA_KERNEL_BLOCKS=${val%@*}" ;;
    esac
    for k in 2 4; do
      v=${BWS[$t.$kind$val.$k]:-not measured}
      case $v in
      not* | failed*) echo "| $label | $k | $v | | | | | |" ;;
      *) awk -v k="$k" -v b="$B" -v bs="$label" -v v="$v" 'BEGIN {
           split(v, f, " "); bound = 2 * b / (9 * k);
           printf "| %s | %d | %.1f | %.1f | %.1f | %.2f | %.2f | %d |\n",
                  bs, k, f[1], f[2], bound, f[1] / bound, f[2] / bound, f[3] }' ;;
      esac
    done
  done
  echo
  echo "8-byte allreduce on device buffers, 2 ranks on one GPU (target < 10 us),"
  echo "by each path: direct (CUDA IPC between the ranks, \`BRAID_CUDA_HOST_MAX=0\`),"
  echo "through pinned host memory (\`BRAID_CUDA_HOST_MAX=$HOST_MAX\`) and as one"
  echo "allreduce kernel per rank (\`BRAID_CUDA_KERNEL_MAX=$KERNEL_MAX\`); the median"
  echo "of $LAT_REPS runs, with their range where they differ:"
  echo
  echo "| mode | direct (us) | through host memory (us) | allreduce kernel (us) |"
  echo "|---|---:|---:|---:|"
  echo "| CUDA stream (braid_stream_from_cuda), synchronized after the loop | ${LAT[$t.stream.direct]:-n/a} | ${LAT[$t.stream.host]:-n/a} | ${LAT[$t.stream.kernel]:-n/a} |"
  echo "| synchronized after each call (\`-y 1\`) | ${LAT[$t.blocking.direct]:-n/a} | ${LAT[$t.blocking.host]:-n/a} | ${LAT[$t.blocking.kernel]:-n/a} |"
  echo
  echo "Allreduce time by size, 2 ranks, CUDA stream, float32 sum, out of place"
  echo "(where the paths cross: what the defaults of BRAID_CUDA_HOST_MAX and"
  echo "BRAID_CUDA_KERNEL_MAX should be; above KERNEL_MAX the kernel column is direct):"
  echo
  echo "| size (B) | direct (us) | through host memory (us) | allreduce kernel (us) | #wrong (all three) |"
  echo "|---:|---:|---:|---:|---:|"
  for path in direct host kernel; do
    [ -f "$d/allreduce_sweep_$path.txt" ] || : >"$d/allreduce_sweep_$path.txt"
  done
  join <(join <(sweep_rows "$d/allreduce_sweep_direct.txt" | sort -k1,1) \
    <(sweep_rows "$d/allreduce_sweep_host.txt" | sort -k1,1)) \
    <(sweep_rows "$d/allreduce_sweep_kernel.txt" | sort -k1,1) |
    sort -n | awk '{ printf "| %s | %s | %s | %s | %d |\n", $1, $2, $4, $6, $3 + $5 + $7 }'
  for path in direct host kernel; do
    case ${SWEEP_RC[$t.$path]:-none} in
    0) ;;
    none) echo "(the $path sweep did not run)" ;;
    *) echo "(the $path sweep failed: exit ${SWEEP_RC[$t.$path]}; see its log)" ;;
    esac
  done
}

report() { # the whole section; STOPPED: why it is incomplete
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader \
  -i 0 2>/dev/null | head -1 || true)
echo "### Device buffers: measured $(date -u +%Y-%m-%d) on ${GPU:-GPU 0}"
echo
echo "Reduction kernels, $SIZE per buffer (\`device/bench/reduce_bench\`);"
echo "cudaMemcpy device to device: **$B GB/s** (B, counting read + write)."
echo
grep '^|' "$LOG_DIR/reduce_bench.txt"
echo
[ -z "${STOPPED:-}" ] || { echo "**Incomplete: $STOPPED.**"; echo; }
echo "#### Under MPS (\`nvidia-cuda-mps-control -d\`: the ranks' work runs side by side)"
echo
if [ -n "$MPS_NOTE" ]; then
  echo "($MPS_NOTE)"
else
  tables mps
fi
echo
echo "#### The ranks as separate processes (no MPS: the GPU runs one at a time)"
echo
if [ -n "$PLAIN_NOTE" ]; then
  echo "($PLAIN_NOTE)"
else
  tables plain
fi
}

# A time limit (perf/cuda/device_kit.sh runs this under timeout) stops the
# run with SIGTERM: the section then says so and holds what was measured.
on_term() {
  [ -z "${JOB:-}" ] || kill -KILL "$JOB" 2>/dev/null || true
  mps_stop
  STOPPED="stopped by SIGTERM (a time limit) during the $PHASE runs"
  log "run_device.sh: $STOPPED"
  report
  exit 124
}
# shellcheck source=perf/cuda/mps.sh
. "$ROOT/perf/cuda/mps.sh"
PHASE=MPS
MPS_NOTE="not reached: stopped before"
PLAIN_NOTE="not reached: stopped before"
trap on_term TERM

QUICK=0
if [ "${MPS:-1}" = 0 ]; then
  MPS_NOTE="MPS=0: not measured"
elif mps_start "$LOG_DIR"; then
  MPS_NOTE=""
  rc=0
  measure mps 0 || rc=$?
  mps_stop
  [ "$rc" -eq 0 ] || MPS_NOTE="the runs under MPS failed (exit $rc; see $LOG_DIR/mps)"
  QUICK=1
else
  MPS_NOTE="$MPS_WHY: not measured"
fi
PHASE=plain
if [ "${PLAIN:-1}" = 0 ]; then
  PLAIN_NOTE="PLAIN=0: not measured"
else
  PLAIN_NOTE=""
  rc=0
  measure plain "$QUICK" || rc=$?
  [ "$rc" -eq 0 ] || PLAIN_NOTE="the runs failed (exit $rc; see $LOG_DIR/plain)"
fi
report
