#!/bin/sh
# Builds the fuzz targets of the topology parsers, of the schedule file
# parser ("sched") and of the MSCCL XML importer ("msccl") with clang
# (libFuzzer + ASan) in their own build directory and runs each for a
# bounded time on the seed corpus.
#   FUZZ_SECONDS    seconds per target (default 60)
#   FUZZ_BUILD_DIR  build directory (default <repo>/build-fuzz)
#   FUZZ_JOBS       build parallelism, and targets run at a time (default 2)
#   FUZZ_SEED       libFuzzer's seed (default 1: a run is reproducible, and a
#                   suite run fails only on what that seed reaches; 0 draws a
#                   new seed each run, for exploring)
# Exits non-zero when a target finds a crash, leak or timeout; the input is
# saved under $FUZZ_BUILD_DIR/artifacts/.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
secs=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-2}
seed=${FUZZ_SEED:-1}
targets="nccl hwloc braid graphs sched msccl"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DBRAID_FUZZ=ON -DBRAID_TESTS=OFF -DBRAID_WERROR=ON >/dev/null
cmake --build "$build" -j"$jobs" --target \
  $(for t in $targets; do printf 'fuzz_topo_%s ' "$t"; done)

mkdir -p "$build/artifacts"
# fuzz_one TARGET: runs one target; its log says how it went, and
# $build/failed-TARGET exists when it found something.
fuzz_one() {
  t=$1
  work="$build/corpus-$t"
  log="$build/log-$t.txt"
  mkdir -p "$work"
  rm -f "$build/failed-$t"
  "$build/topology/fuzz/fuzz_topo_$t" -max_total_time="$secs" -seed="$seed" \
    -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" \
    "$work" "$root/topology/fuzz/corpus/$t" >"$log" 2>&1 || : >"$build/failed-$t"
}
# FUZZ_JOBS targets at a time (each target is one process): target i runs in
# lane i mod FUZZ_JOBS, a lane's targets one after the other
echo "== $(echo $targets | wc -w) targets, ${secs}s each, seed $seed, $jobs at a time"
lane=0
while [ "$lane" -lt "$jobs" ]; do
  i=0
  mine=""
  for t in $targets; do
    [ $((i % jobs)) -eq "$lane" ] && mine="$mine $t"
    i=$((i + 1))
  done
  (for t in $mine; do fuzz_one "$t"; done) &
  lane=$((lane + 1))
done
wait
failed=""
for t in $targets; do
  log="$build/log-$t.txt"
  echo "== fuzz_topo_$t (log: $log)"
  if [ ! -e "$build/failed-$t" ]; then
    grep -E '^#[0-9]+[[:space:]]+DONE' "$log" || tail -n 3 "$log"
  else
    # the finding, not the mutation chatter before it
    sed -n '/bad error contract\|inconsistent graph\|asymmetric path\|broken hop list\|==[0-9]*==\|^ *#[0-9][0-9]* 0x\|^SUMMARY\|Test unit written/p' \
      "$log" | head -n 60
    echo "fuzz_topo_$t FAILED: input under $build/artifacts/, log $log" >&2
    failed="$failed $t"
  fi
done
if [ -n "$failed" ]; then
  echo "fuzzing FAILED for:$failed (seed $seed)" >&2
  exit 1
fi
