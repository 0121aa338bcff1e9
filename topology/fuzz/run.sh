#!/bin/sh
# Builds the fuzz targets of the topology parsers and of the schedule file
# parser ("sched") with clang (libFuzzer + ASan) in their own build directory
# and runs each for a bounded time on the seed corpus.
#   FUZZ_SECONDS    seconds per target (default 60)
#   FUZZ_BUILD_DIR  build directory (default <repo>/build-fuzz)
#   FUZZ_JOBS       build parallelism (default 2)
# Exits non-zero when a target finds a crash, leak or timeout; the input is
# saved under $FUZZ_BUILD_DIR/artifacts/.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
secs=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-2}
targets="nccl hwloc braid graphs sched"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DBRAID_FUZZ=ON -DBRAID_TESTS=OFF -DBRAID_WERROR=ON >/dev/null
cmake --build "$build" -j"$jobs" --target \
  $(for t in $targets; do printf 'fuzz_topo_%s ' "$t"; done)

mkdir -p "$build/artifacts"
status=0
for t in $targets; do
  work="$build/corpus-$t"
  mkdir -p "$work"
  echo "== fuzz_topo_$t for ${secs}s"
  if ! "$build/topology/fuzz/fuzz_topo_$t" -max_total_time="$secs" \
      -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$t-" \
      "$work" "$root/topology/fuzz/corpus/$t"; then
    echo "fuzz_topo_$t FAILED: see $build/artifacts/" >&2
    status=1
  fi
done
exit $status
