#!/bin/sh
# MSCCL XML schedules end to end (docs/SCHEDULES.md, "Importing MSCCL
# schedules"), one case per ctest test:
#   import NAME        braid-topo import accepts NAME.xml (exit 0) and writes
#                      a schedule file
#   args               bad arguments: exit 2 naming them; sizes as schedule's
#   refuse NAME WORDS  braid-topo import refuses NAME.xml (exit 1) and its
#                      message holds every one of WORDS ('|'-separated)
#   run NAME COLL      braidrun -np 4 braid-perf COLL -c 1 over shm with
#                      BRAID_SCHEDULE_FILE=NAME.xml: exact results in and out
#                      of place, and the file's schedule is the one that ran
# usage: msccl_test.sh CASE ARGS... (env TOPO, BRAIDRUN, PERF, DATA, WORK)
set -u
case_=$1
shift
mkdir -p "$WORK"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
case $case_ in
import)
  out="$WORK/$1.json"
  rm -f "$out"
  "$TOPO" import "$DATA/$1.xml" -o "$out" >"$WORK/$1.out" 2>&1 ||
    { cat "$WORK/$1.out"; fail "braid-topo import refused $1.xml"; }
  cat "$WORK/$1.out"
  grep -q "verified out of place and in place" "$WORK/$1.out" ||
    fail "no verdict printed"
  grep -q "simulated on" "$WORK/$1.out" || fail "no simulation printed"
  grep -q '"braid_schedule": 1' "$out" || fail "no schedule file written"
  ;;
args)
  # the command line: an unknown machine is a bad argument (exit 2, named),
  # sizes read as braid-topo schedule reads them, a directory is no file
  x="$DATA/ring_allreduce_4.xml"
  "$TOPO" import "$x" --machine nope >"$WORK/args.out" 2>&1
  rc=$?
  [ "$rc" -eq 2 ] || { cat "$WORK/args.out"; fail "--machine nope: exit $rc, expected 2"; }
  grep -q "unknown machine: no machine model 'nope'" "$WORK/args.out" ||
    { cat "$WORK/args.out"; fail "--machine nope: not named"; }
  "$TOPO" import "$x" --size 64KiB >"$WORK/args.out" 2>&1 ||
    { cat "$WORK/args.out"; fail "--size 64KiB refused"; }
  grep -q ", 65536 bytes:" "$WORK/args.out" ||
    { cat "$WORK/args.out"; fail "--size 64KiB is not 65536 bytes"; }
  "$TOPO" import "$DATA" >"$WORK/args.out" 2>&1
  rc=$?
  [ "$rc" -eq 1 ] && grep -q "cannot read: Is a directory" "$WORK/args.out" ||
    { cat "$WORK/args.out"; fail "a directory: exit $rc, not named"; }
  ;;
refuse)
  name=$1
  "$TOPO" import "$DATA/$name.xml" -o "$WORK/$name.json" \
    >"$WORK/$name.out" 2>&1
  rc=$?
  cat "$WORK/$name.out"
  [ "$rc" -eq 1 ] || fail "exit $rc, expected 1 (refused)"
  [ ! -e "$WORK/$name.json" ] || fail "a refused schedule was written"
  echo "$2" | tr '|' '\n' | while IFS= read -r w; do
    grep -qF -- "$w" "$WORK/$name.out" || { echo "missing: '$w'" >&2; exit 1; }
  done || fail "the reason does not name what breaks"
  ;;
run)
  name=$1
  coll=$2
  log="$WORK/run-$name.log"
  BRAID_SCHEDULE_FILE="$DATA/$name.xml" BRAID_DEBUG=TRACE BRAID_TIMEOUT=60 \
    BRAID_TRANSPORT=shm timeout 240 "$BRAIDRUN" -np 4 "$PERF" "$coll" \
    -b 8 -e 1M -f 8 -n 1 -w 0 -c 1 -d all -o sum >"$log" 2>&1
  rc=$?
  grep -E '^\[0\] +[0-9]+ ' "$log" | head -n 40
  [ "$rc" -eq 0 ] || { tail -n 30 "$log"; fail "braid-perf exit $rc"; }
  grep -q "algorithm from BRAID_SCHEDULE_FILE: " "$log" ||
    fail "the schedule of $name.xml did not run"
  ! grep "algorithm from BRAID_SCHEDULE_FILE: " "$log" | grep -vq "$name" ||
    fail "another schedule ran"
  ;;
*)
  fail "unknown case $case_"
  ;;
esac
echo "PASS: $case_ $*"
