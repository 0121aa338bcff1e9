#!/bin/sh
# Builds the fuzz targets of the topology parsers (topology/fuzz/), of the
# schedule file parser ("sched") and of the MSCCL XML importer ("msccl",
# both collectives/fuzz/) with clang (libFuzzer + ASan) in their own build
# directory and runs each for a bounded time on its seed corpus
# (<folder>/fuzz/corpus/<name>).
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
# FOLDER:NAME; the target is fuzz_topo_NAME in topology/fuzz/, fuzz_coll_NAME
# in collectives/fuzz/
targets="topology:nccl topology:hwloc topology:braid topology:graphs
  collectives:sched collectives:msccl"
# bin T / corpus T / name T: the binary, seed corpus and target name of T
name() { case ${1%%:*} in topology) echo "fuzz_topo_${1#*:}" ;; *) echo "fuzz_coll_${1#*:}" ;; esac; }
bin() { echo "$build/${1%%:*}/fuzz/$(name "$1")"; }
corpus() { echo "$root/${1%%:*}/fuzz/corpus/${1#*:}"; }

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DBRAID_FUZZ=ON -DBRAID_TESTS=OFF -DBRAID_WERROR=ON >/dev/null
cmake --build "$build" -j"$jobs" --target \
  $(for t in $targets; do printf '%s ' "$(name "$t")"; done)

mkdir -p "$build/artifacts"
# fuzz_one TARGET: runs one target; its log says how it went, and
# $build/failed-TARGET exists when it found something.
fuzz_one() {
  t=${1#*:}
  work="$build/corpus-$t"
  log="$build/log-$t.txt"
  mkdir -p "$work"
  rm -f "$build/failed-$t"
  "$(bin "$1")" -max_total_time="$secs" -seed="$seed" \
    -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" \
    "$work" "$(corpus "$1")" >"$log" 2>&1 || : >"$build/failed-$t"
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
for target in $targets; do
  t=${target#*:}
  log="$build/log-$t.txt"
  echo "== $(name "$target") (log: $log)"
  if [ ! -e "$build/failed-$t" ]; then
    grep -E '^#[0-9]+[[:space:]]+DONE' "$log" || tail -n 3 "$log"
  else
    # the finding, not the mutation chatter before it
    sed -n '/bad error contract\|inconsistent graph\|asymmetric path\|broken hop list\|==[0-9]*==\|^ *#[0-9][0-9]* 0x\|^SUMMARY\|Test unit written/p' \
      "$log" | head -n 60
    echo "$(name "$target") FAILED: input under $build/artifacts/, log $log" >&2
    failed="$failed $t"
  fi
done
if [ -n "$failed" ]; then
  echo "fuzzing FAILED for:$failed (seed $seed)" >&2
  exit 1
fi
