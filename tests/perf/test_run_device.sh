#!/usr/bin/env bash
# perf/cuda/run_device.sh without a GPU: its tools (braidrun, reduce_bench,
# nvidia-cuda-mps-control) are replaced by fakes that print rows of the
# right shape and log how they were called, so that what the script runs,
# in which order and with which environment, and the report it prints, are
# checked in CI. The measurements themselves need a GPU (docs/PERFORMANCE.md).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
check() { # description command...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fails=$((fails + 1)); fi
}

# A configured build directory (used as it is) whose ninja targets exist.
B=$T/build
mkdir -p "$B/tools" "$B/device/bench" "$T/bin"
echo "CMAKE_BUILD_TYPE:STRING=Release" >"$B/CMakeCache.txt"
printf 'rule nop\n  command = true\nbuild braid-perf braidrun reduce_bench: nop\n' >"$B/build.ninja"
cat >"$B/device/bench/reduce_bench" <<'EOF'
#!/usr/bin/env bash
[ -z "${FAKE_NO_GPU:-}" ] || { echo "reduce_bench: no CUDA device"; exit 2; }
echo "# cudaMemcpy device to device: 4200.0 GB/s"
echo "| dtype | op | reduce GB/s |"
echo "|---|---|---:|"
echo "| float32 | sum | 4000.0 |"
EOF
# braidrun: one line per run in calls.log (MPS or not, the paths' settings,
# the arguments), then braid-perf's data rows as rank 0 prints them; the
# time (us) tells the path apart: 50 direct, 25 host, 5 kernel.
cat >"$B/tools/braidrun" <<'EOF'
#!/usr/bin/env bash
echo "${CUDA_MPS_PIPE_DIRECTORY:+mps}${CUDA_MPS_PIPE_DIRECTORY:-plain} host=${BRAID_CUDA_HOST_MAX:-} kernel=${BRAID_CUDA_KERNEL_MAX:-} buff=${BRAID_CUDA_BUFFSIZE:-} slot=${BRAID_CUDA_KERNEL_SLOT:-} blocks=${BRAID_CUDA_KERNEL_BLOCKS:-} $*" >>"$FAKE_LOG"
sleep "${FAKE_SLEEP:-0}"
t=50
[ "${BRAID_CUDA_HOST_MAX:-0}" = 0 ] || t=25
[ "${BRAID_CUDA_KERNEL_MAX:-0}" = 0 ] || t=5
# the kernel path's 8-byte runs on a stream take 5, 9 and 7 us in turn
if [ "$t" = 5 ] && [[ "$*" == *"-b 8 -e 8 "*"-y 0"* ]]; then
  n=$(grep -c -- '-b 8 -e 8 .*-y 0' "$FAKE_LOG")
  t=$(((n % 3 == 1) ? 5 : (n % 3 == 2) ? 9 : 7))
fi
case "$*" in
*"-e 4M"*) for s in 8 32 4194304; do echo "[0]  $s 2 float sum -1 $t 0.1 0.1 0 $t 0.1 0.1 0"; done ;;
*) echo "[0]  8 2 float sum -1 $t 1.0 $t.5 0 $t 1.0 $t.5 0" ;;
esac
EOF
cat >"$T/bin/mps-ctl" <<'EOF'
#!/usr/bin/env bash
if [ "$1" = -d ]; then echo "start $CUDA_MPS_PIPE_DIRECTORY" >>"$FAKE_MPS_LOG"; else echo "$(cat)" >>"$FAKE_MPS_LOG"; fi
EOF
chmod +x "$B/device/bench/reduce_bench" "$B/tools/braidrun" "$T/bin/mps-ctl"

run() { # name, then environment assignments; status in $T/<name>.rc
  local n=$1
  shift
  local rc=0
  env "$@" FAKE_LOG="$T/$n.calls" FAKE_MPS_LOG="$T/$n.mps" MPS_CTL="$T/bin/mps-ctl" \
    LOG_DIR="$T/$n.logs" "$ROOT/perf/cuda/run_device.sh" "$B" >"$T/$n.md" 2>"$T/$n.err" || rc=$?
  echo "$rc" >"$T/$n.rc"
}
line_of() { grep -n -- "$2" "$1" | head -1 | cut -d: -f1 || true; }

# 1. the whole run: the MPS pass first and in full, then a short pass without
run full
check "full run exits 0" [ "$(cat "$T/full.rc")" = 0 ]
check "MPS daemon started, then quit" [ "$(cut -d' ' -f1 "$T/full.mps" | tr '\n' ' ')" = "start quit " ]
first_plain=$(line_of "$T/full.calls" '^plain')
last_mps=$(grep -n '^mps' "$T/full.calls" | tail -1 | cut -d: -f1 || true)
check "every run under MPS comes before the first without" \
  [ "${last_mps:-none}" -lt "${first_plain:-0}" ] 2>/dev/null
check "MPS pass: 24 bandwidth runs, 6 latency 3 times each, 3 sweeps" \
  [ "$(grep -c '^mps.*-b 256M -e 256M -n 20 -w 5' "$T/full.calls")/$(grep -c '^mps.*-b 8 -e 8 -n 2000 -w 200' "$T/full.calls")/$(grep -c '^mps.*-e 4M -f 4 -n 200 -w 20' "$T/full.calls")" = 24/18/3 ]
check "pass without MPS: the same runs, fewer iterations" \
  [ "$(grep -c '^plain.*-b 256M -e 256M -n 3 -w 1' "$T/full.calls")/$(grep -c '^plain.*-b 8 -e 8 -n 200 -w 20' "$T/full.calls")/$(grep -c '^plain.*-e 4M -f 4 -n 20 -w 2' "$T/full.calls")" = 24/18/3 ]
check "kernel runs set BRAID_CUDA_KERNEL_MAX (256M bandwidth, 4M latency and sweep)" \
  [ "$(grep -c 'kernel=256M .*-b 256M' "$T/full.calls")/$(grep -c 'kernel=4M .*-b 8 -e 8' "$T/full.calls")/$(grep -c 'kernel=4M .*-e 4M' "$T/full.calls")" = 28/12/2 ]
check "bandwidth: the kernel slots of KERNEL_SLOTS, 2 and 4 ranks, 2 passes" \
  [ "$(grep -c 'kernel=256M buff= slot=16M blocks= .*-n 2 ' "$T/full.calls")/$(grep -c 'kernel=256M buff= slot=64M blocks= .*-n 4 ' "$T/full.calls")" = 2/2 ]
check "bandwidth: direct runs pin both paths off, each BRAID_CUDA_BUFFSIZE" \
  [ "$(grep -c '^mps[^ ]* host=0 kernel=0 buff=4M slot= .*-b 256M' "$T/full.calls")/$(grep -c '^mps[^ ]* host=0 kernel=0 buff=128M .*-b 256M' "$T/full.calls")" = 2/2 ]
check "bandwidth: the defaults' runs set no variable" \
  [ "$(grep -c '^mps[^ ]* host= kernel= buff= slot= .*-b 256M' "$T/full.calls")" = 2 ]
check "bandwidth: at most 64 and 128 blocks, default and 16M kernel slots, 2 and 4 ranks, 2 passes" \
  [ "$(grep -c 'kernel=256M buff= slot= blocks=64 .*-b 256M' "$T/full.calls")/$(grep -c 'kernel=256M buff= slot= blocks=128 .*-b 256M' "$T/full.calls")/$(grep -c 'kernel=256M buff= slot=16M blocks=64 .*-b 256M' "$T/full.calls")/$(grep -c 'kernel=256M buff= slot=16M blocks=128 .*-b 256M' "$T/full.calls")" = 4/4/4/4 ]
check "report: a row per block count and slot" \
  [ "$(grep -c '^| allreduce kernels, BRAID_CUDA_KERNEL_BLOCKS=128 | [24] |' "$T/full.md")/$(grep -c '^| allreduce kernels, BRAID_CUDA_KERNEL_SLOT=16M, BRAID_CUDA_KERNEL_BLOCKS=64 | [24] |' "$T/full.md")" = 4/4 ]
check "report: a row per kernel slot" \
  grep -q '^| allreduce kernels, BRAID_CUDA_KERNEL_SLOT=64M | 4 | 5.5 | 5.5 |' "$T/full.md"
m=$(line_of "$T/full.md" '^#### Under MPS')
p=$(line_of "$T/full.md" '^#### The ranks as separate processes')
check "report: the MPS section first" [ -n "$m" ] && [ -n "$p" ] && [ "$m" -lt "$p" ]
check "report: each pass says its iterations" \
  [ "$(grep -c '^Iterations: -n 20 -w 5\|^Iterations: -n 3 -w 1' "$T/full.md")" = 2 ]
check "report: latency rows by the three paths (50, 25, 5 us), the median of 3 runs and their range where they differ (5, 9, 7)" \
  grep -q '^| CUDA stream .* | 50 | 25 | 7 (5-9) |$' "$T/full.md" &&
  grep -q '^| synchronized after each call .* | 50 | 25 | 5 |$' "$T/full.md"
check "report: busbw over the bound (50.5 / 466.7 = 0.11 for 2 ranks)" \
  grep -q '^| defaults (no variable set) | 2 | 50.5 | 50.5 | 466.7 | 0.11 | 0.11 | 0 |$' "$T/full.md"
check "report: not marked incomplete" bash -c "! grep -q Incomplete '$T/full.md'"

# 2. MPS=0: no daemon, the pass without MPS in full
run nomps MPS=0
check "MPS=0 exits 0" [ "$(cat "$T/nomps.rc")" = 0 ]
check "MPS=0: no daemon started" [ ! -s "$T/nomps.mps" ]
check "MPS=0: no run under MPS, all in full" \
  [ "$(grep -c '^mps' "$T/nomps.calls")/$(grep -c '^plain.*-n 20 -w 5' "$T/nomps.calls")" = 0/24 ]
check "MPS=0: the report says so" grep -q '^(MPS=0: not measured)$' "$T/nomps.md"

# 2b. PLAIN=0 RUN_TIMEOUT=45: the MPS pass alone, each braidrun bounded
run noplain PLAIN=0 RUN_TIMEOUT=45
check "PLAIN=0 exits 0" [ "$(cat "$T/noplain.rc")" = 0 ]
check "PLAIN=0: the MPS pass in full, no run without MPS" \
  [ "$(grep -c '^mps.*-n 20 -w 5' "$T/noplain.calls")/$(grep -c '^plain' "$T/noplain.calls")" = 24/0 ]
check "RUN_TIMEOUT=45: every braidrun gets --timeout 45" \
  [ "$(grep -c -- '--timeout 45 ' "$T/noplain.calls")" = "$(wc -l <"$T/noplain.calls")" ]
check "PLAIN=0: the report says so" grep -q '^(PLAIN=0: not measured)$' "$T/noplain.md"

# 3. a time limit during the MPS pass: what was measured, marked, daemon quit
rc=0
FAKE_SLEEP=0.3 FAKE_LOG="$T/term.calls" FAKE_MPS_LOG="$T/term.mps" MPS_CTL="$T/bin/mps-ctl" \
  LOG_DIR="$T/term.logs" timeout 2 "$ROOT/perf/cuda/run_device.sh" "$B" >"$T/term.md" 2>"$T/term.err" || rc=$?
check "SIGTERM: exit 124" [ "$rc" = 124 ]
check "SIGTERM: marked incomplete during the MPS runs" \
  grep -q 'Incomplete: stopped by SIGTERM (a time limit) during the MPS runs' "$T/term.md"
check "SIGTERM: the MPS daemon quit" grep -q '^quit$' "$T/term.mps"
check "SIGTERM: the pass without MPS not reached" grep -q '^(not reached: stopped before)$' "$T/term.md"

# 4. no GPU: exit 2, nothing measured, no daemon
run nogpu FAKE_NO_GPU=1
check "no GPU: exit 2" [ "$(cat "$T/nogpu.rc")" = 2 ]
check "no GPU: no allreduce run" [ ! -s "$T/nogpu.calls" ]

if [ "$fails" -ne 0 ]; then
  echo "$fails checks failed; the outputs:"
  for f in "$T"/*.md "$T"/*.err; do echo "--- $f"; cat "$f"; done
  exit 1
fi
echo "all checks passed"
