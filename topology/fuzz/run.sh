#!/bin/sh
# Builds the fuzz targets of the topology parsers and of the schedule file
# parser ("sched") with clang (libFuzzer + ASan) in their own build directory
# and runs each for a bounded time on the seed corpus.
#   FUZZ_SECONDS    seconds per target (default 60)
#   FUZZ_BUILD_DIR  build directory (default <repo>/build-fuzz)
#   FUZZ_JOBS       build parallelism (default 2)
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
targets="nccl hwloc braid graphs sched"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DBRAID_FUZZ=ON -DBRAID_TESTS=OFF -DBRAID_WERROR=ON >/dev/null
cmake --build "$build" -j"$jobs" --target \
  $(for t in $targets; do printf 'fuzz_topo_%s ' "$t"; done)

mkdir -p "$build/artifacts"
failed=""
for t in $targets; do
  work="$build/corpus-$t"
  log="$build/log-$t.txt"
  mkdir -p "$work"
  echo "== fuzz_topo_$t for ${secs}s, seed $seed (log: $log)"
  if "$build/topology/fuzz/fuzz_topo_$t" -max_total_time="$secs" -seed="$seed" \
      -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$t-" \
      "$work" "$root/topology/fuzz/corpus/$t" >"$log" 2>&1; then
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
