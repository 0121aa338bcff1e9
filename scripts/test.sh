#!/usr/bin/env bash
# Builds and runs the whole test suite: a normal build, then an ASan+UBSan
# build (the size-heavy tests smaller there: BRAID_TEST_SMALL), then the
# parsers' fuzz targets for a bounded time (FUZZ_SECONDS per target, 10 by
# default here; longer explorations: topology/fuzz/run.sh). Exits non-zero
# on any failure.
#
# The lint (clang-format, clang-tidy: 2 to 3 minutes of both cores) runs in
# the background under SCHED_IDLE from the first build on, so that it takes
# only the CPU time the tests leave idle (a fifth of it in the normal
# stage: ranks waiting on each other, timeouts being waited out); its
# output is shown, and its failure fails the suite, at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
start=$(date +%s)
at() { echo "== $* (at $(( $(date +%s) - start )) s)"; }

# The fewest tests each ctest stage must run: a stage that runs fewer lost
# tests (a feature not found at configure time, a folder not registered),
# and the suite fails rather than pass on what is left. Raise them when
# tests are added.
min_normal=149
min_asan=127

# run_stage DIR MIN [ctest args]: runs ctest in DIR and fails unless it ran
# at least MIN tests (ctest itself fails on none: --no-tests=error).
run_stage() {
  local dir=$1 min=$2 log
  shift 2
  log=$(mktemp)
  local st=0
  (cd "$dir" && ctest --output-on-failure --no-tests=error -j2 --timeout 900 "$@") |
    tee "$log" || st=$?
  local ran
  ran=$(sed -n 's/.*tests passed, [0-9]* tests\{0,1\} failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  rm -f "$log"
  [ "$st" = 0 ] || return "$st"
  if [ -z "$ran" ] || [ "$ran" -lt "$min" ]; then
    echo "== FAILED: $dir ran ${ran:-no} tests, expected at least $min" \
      "(see scripts/test.sh: min_normal, min_asan)"
    return 1
  fi
  echo "== $dir: $ran tests run (at least $min expected)"
}

at "build (RelWithDebInfo, -Werror)"
scripts/configure.sh test build
cmake --build build -j"$jobs"
lint_pid=
if [ "${BRAID_SKIP_LINT:-0}" != 1 ]; then
  at "lint, in the background on idle CPU time (its output: build/lint.log)"
  idle=(chrt --idle 0)
  "${idle[@]}" true 2>/dev/null || idle=(nice -n 19)
  set -m # its own process group, to stop it whole if the suite stops first
  "${idle[@]}" scripts/lint.sh build >build/lint.log 2>&1 &
  lint_pid=$!
  set +m
  trap '[ -z "$lint_pid" ] || kill -- -"$lint_pid" 2>/dev/null || true' EXIT
fi
at tests
run_stage build "$min_normal"

if [ "${BRAID_SKIP_SANITIZE:-0}" != 1 ]; then
  at "build with AddressSanitizer + UBSan"
  scripts/configure.sh asan build-asan
  cmake --build build-asan -j"$jobs"
  at "tests under ASan + UBSan"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    LSAN_OPTIONS=suppressions="$PWD/tests/lsan.supp" \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_stage build-asan "$min_asan" -LE nosan
fi

if [ "${BRAID_SKIP_FUZZ:-0}" != 1 ] && [ -x topology/fuzz/run.sh ]; then
  export FUZZ_SECONDS=${FUZZ_SECONDS:-10}
  at "fuzzing the topology parsers ($FUZZ_SECONDS s each)"
  topology/fuzz/run.sh
fi
if [ -n "$lint_pid" ]; then
  at "waiting for the lint"
  lint_st=0
  wait "$lint_pid" || lint_st=$?
  lint_pid=
  cat build/lint.log
  [ "$lint_st" = 0 ] || { echo "== FAILED: the lint (exit $lint_st)"; exit 1; }
fi
echo "== all tests passed in $(( $(date +%s) - start )) s"
