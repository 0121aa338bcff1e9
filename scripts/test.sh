#!/usr/bin/env bash
# Builds and runs the whole test suite: a normal build, then an ASan+UBSan
# build (the size-heavy tests smaller there: BRAID_TEST_SMALL), then the
# parsers' fuzz targets for a bounded time (FUZZ_SECONDS per target, 10 by
# default here; longer explorations: topology/fuzz/run.sh). Exits non-zero
# on any failure. Its last line counts each stage's tests that passed,
# failed and skipped, after the list of the skipped tests with their
# reasons.
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
min_normal=230
min_asan=203
# The fewest tests labelled cuda (the emulated-GPU tests among them) the
# normal build must register: the CUDA tier is part of the suite
# (scripts/configure.sh's test profile builds with -DBRAID_CUDA=ON).
min_cuda=71

# The suite's counts, stage by stage ("build: 120 passed, 0 failed, 30
# skipped; ..."), for the last line, and the reasons of the skips.
counts=
skips=$(mktemp)

# stage_counts DIR LOG: says how many of DIR's tests passed, failed and
# skipped, from ctest's output LOG ("... failed out of N", "The following
# tests did not run:"), and lists each skipped test with the reasons its
# output gave (its lines that begin with SKIP, or "[rank] SKIP" under
# braidrun, in the stage's Testing/Temporary/LastTest.log), into $skips. Sets ran, the number of
# tests that ran or were skipped.
stage_counts() {
  local dir=$1 log=$2 failed skipped names name
  ran=$(sed -n 's/.*tests passed, [0-9]* tests\{0,1\} failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests\{0,1\} failed out of.*/\1/p' "$log" | tail -1)
  names=$(sed -n '/^The following tests did not run:/,/^$/s/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$log")
  skipped=$(printf '%s' "$names" | grep -c . || true)
  [ -n "$ran" ] || { counts+="$dir: no tests; "; return; }
  counts+="$dir: $((ran - failed - skipped)) passed, $failed failed, $skipped skipped; "
  for name in $names; do
    awk -v t="$name" -v d="$dir" '
      $0 ~ "^[0-9]+/[0-9]+ Test: " t "$" { on = 1; next }
      on && /^<end of output>$/ { exit }
      on && /^(\[[0-9]+\] )?SKIP/ && !/\(the reasons above\)/ {
        r = $0; sub(/^(\[[0-9]+\] )?SKIP( [^ ]*)?: /, "", r)
        if (!(r in seen)) { seen[r] = 1; order[++n] = r }
        count[r]++
      }
      END {
        if (n == 0) print "   " d ": " t ": skipped, and its output says no reason (no line begins with SKIP)"
        for (i = 1; i <= n; i++)
          print "   " d ": " t ": " order[i] (count[order[i]] > 1 ? " (" count[order[i]] " times)" : "")
      }' "$dir/Testing/Temporary/LastTest.log" >>"$skips"
  done
}

# run_stage DIR MIN [ctest args]: runs ctest in DIR and fails unless it ran
# at least MIN tests, skipped ones included (ctest itself fails on none:
# --no-tests=error).
run_stage() {
  local dir=$1 min=$2 log
  shift 2
  log=$(mktemp)
  local st=0
  (cd "$dir" && ctest --output-on-failure --no-tests=error -j2 --timeout 900 "$@") |
    tee "$log" || st=$?
  stage_counts "$dir" "$log"
  rm -f "$log"
  [ "$st" = 0 ] || return "$st"
  if [ -z "$ran" ] || [ "$ran" -lt "$min" ]; then
    echo "== FAILED: $dir ran ${ran:-no} tests, expected at least $min" \
      "(see scripts/test.sh: min_normal, min_asan)"
    return 1
  fi
  echo "== $dir: $ran tests run (at least $min expected)"
}

# On the way out, failed or not: the skips and their reasons, then the
# counts of every stage that ran.
report() {
  local st=${1:-$?}
  if [ -s "$skips" ]; then
    echo "== skipped tests, and why:"
    cat "$skips"
  fi
  rm -f "$skips"
  if [ "$st" = 0 ]; then
    echo "== all tests passed in $(($(date +%s) - start)) s: ${counts%; }"
  else
    echo "== FAILED (exit $st) after $(($(date +%s) - start)) s: ${counts:-no stage finished}"
  fi
}
trap report EXIT
stop_lint_and_report() {
  local st=$?
  [ -z "$lint_pid" ] || kill -- -"$lint_pid" 2>/dev/null || true
  report "$st"
}

at "build (RelWithDebInfo, -Werror)"
scripts/configure.sh test build
cmake --build build -j"$jobs"
grep -q '^BRAID_CUDA:STRING=ON$' build/CMakeCache.txt || {
  echo "== FAILED: build is not configured with -DBRAID_CUDA=ON"
  exit 1
}
ncuda=$(cd build && ctest -N --no-tests=error -L cuda | sed -n 's/^Total Tests: //p')
if [ "${ncuda:-0}" -lt "$min_cuda" ]; then
  echo "== FAILED: build registers ${ncuda:-no} CUDA-tier tests (label cuda)," \
    "expected at least $min_cuda: the CUDA tier was not built"
  exit 1
fi
lint_pid=
if [ "${BRAID_SKIP_LINT:-0}" != 1 ]; then
  at "lint, in the background on idle CPU time (its output: build/lint.log)"
  idle=(chrt --idle 0)
  "${idle[@]}" true 2>/dev/null || idle=(nice -n 19)
  set -m # its own process group, to stop it whole if the suite stops first
  "${idle[@]}" scripts/lint.sh build >build/lint.log 2>&1 &
  lint_pid=$!
  set +m
  trap stop_lint_and_report EXIT
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
  at "fuzzing the topology and schedule parsers ($FUZZ_SECONDS s each)"
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
