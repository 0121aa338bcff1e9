#!/bin/sh
# ctest driver: the collective correctness matrix across network-namespace
# hosts (shm inside a host, the network transport between hosts) with the
# hierarchical generators forced (BRAID_ALGO=hier, BRAID_ALGO=chaintree) and
# with the default selection, on 2 hosts x 2 ranks, 3 hosts x 2 ranks and two
# uneven hosts of 3 and 1 ranks. Collectives a forced generator does not make
# keep their usual algorithm (docs/SCHEDULES.md, BRAID_ALGO).
#
#   run_hier.sh BRAIDRUN COLL_MATRIX HIER_SCHED_DUMP
#
# A forced run must also have built its schedules with the forced generator:
# its SCHED trace (BRAID_DEBUG=TRACE, one line per schedule built) has to name
# it, which shows that the communicator passed its host map to the generators.
# Two maps (hier on 3+1, chaintree on 3x2) also run the generators' schedules
# from a schedule file (BRAID_SCHEDULE_FILE, written by HIER_SCHED_DUMP for
# the map; every root, 2 channels), which needs nothing from the
# communicator but the executor. Forced runs use 3x2 and 3+1, the default
# choice 2x2 and 3+1.
# Element counts: 0,1,7,1023,65539 with the schedule files (2 channels at
# every size), 7,300007 with BRAID_ALGO (300007 elements make calls of
# several channels), 0,7,1023,65539 with the default choice;
# BRAID_NETNS_COUNTS sets one list for every run. Exit 77 (skipped) when
# namespaces cannot be made.
set -u
here=$(cd "$(dirname "$0")" && pwd)
braidrun=$1
matrix=$2
dump=$3
prefix="bh$$-"
netns="$here/netns.sh"
work=$(mktemp -d /tmp/braid-hier.XXXXXX)
cleanup() { "$netns" down --prefix "$prefix"; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 1' INT TERM

"$netns" up 3 --prefix "$prefix"
st=$?
if [ $st = 77 ]; then
  echo "SKIP: network namespaces cannot be created here (see above)"
  exit 77
fi
[ $st = 0 ] || { echo "FAILED: netns.sh up 3"; exit 1; }

counts_for() { # file | algo | default
  if [ -n "${BRAID_NETNS_COUNTS:-}" ]; then
    echo "$BRAID_NETNS_COUNTS"
    return
  fi
  case $1 in
  file) echo 0,1,7,1023,65539 ;;
  algo) echo 7,300007 ;;
  *) echo 0,7,1023,65539 ;;
  esac
}
fail=0
n=0
# run LABEL HOSTS ALGO [FILE]: the matrix on HOSTS with BRAID_ALGO=ALGO
# ("" default), or with the schedules of FILE (made by generator ALGO).
run() {
  label=$1; hosts=$2; algo=$3; file=${4:-}
  if [ -n "$file" ]; then
    label="$label file"
    ealgo=""
    want="algorithm from BRAID_SCHEDULE_FILE: $algo,"
    counts=$(counts_for file)
  else
    ealgo=$algo
    want="algorithm $algo,"
    counts=$(counts_for "${algo:+algo}")
  fi
  n=$((n + 1))
  logs="$work/log$n"
  mkdir -p "$logs"
  echo "[$label algo=${algo:-default}] braidrun --hosts $hosts"
  BRAID_ALGO=$ealgo BRAID_SCHEDULE_FILE=$file BRAID_TIMEOUT=120 BRAID_DEBUG=TRACE \
    BRAID_DEBUG_SUBSYS=SCHED BRAID_DEBUG_FILE="$logs/%h.%p" \
    timeout -k 5 560 ip netns exec "${prefix}h0" "$braidrun" \
    --hosts "$hosts" --timeout 540 "$matrix" --counts "$counts" \
    >"$work/m.out" 2>&1
  st=$?
  grep -v '^\[[0-9]*\] [./]' "$work/m.out" | tail -8 | sed "s/^/[$label ${algo:-default}] /"
  if [ $st != 0 ]; then
    echo "[$label ${algo:-default}] FAILED (exit $st; 124: timed out)"
    fail=1
    return
  fi
  # Which algorithms built schedules, over every rank's trace.
  used=$(cat "$logs"/* 2>/dev/null |
    sed -n 's/.*ranks: algorithm \(from BRAID_SCHEDULE_FILE: \)*\([a-z_]*\).*/\2/p' |
    sort | uniq -c | tr '\n' ' ')
  echo "[$label ${algo:-default}] schedules built by: ${used:-(no SCHED trace)}"
  if [ -n "$algo" ] && ! cat "$logs"/* 2>/dev/null | grep -q "$want"; then
    if [ -n "$file" ]; then
      echo "[$label $algo] FAILED: the schedules of $file never ran"
    else
      echo "[$label $algo] FAILED: BRAID_ALGO=$algo never ran $algo (does" \
        "the communicator give the generators its host map?)"
    fi
    fail=1
  fi
}

h0=${prefix}h0 h1=${prefix}h1 h2=${prefix}h2
# Schedules from a file: hier on uneven hosts, chaintree on three hosts.
for m in "hier 3+1 3,1 $h0:3,$h1:1" "chaintree 3x2 2,2,2 $h0:2,$h1:2,$h2:2"; do
  set -- $m
  f="$work/$1.$2.json"
  if "$dump" "$1" "$3" 2 "$f" >/dev/null; then
    run "$2" "$4" "$1" "$f"
  else
    echo "[$2 $1] FAILED: $dump $1 $3 2 $f"
    fail=1
  fi
done
# The communicator's own host map: forced, then the default choice.
for algo in hier chaintree; do
  run "3x2" "$h0:2,$h1:2,$h2:2" "$algo"
  run "3+1" "$h0:3,$h1:1" "$algo"
done
run "2x2" "$h0:2,$h1:2" ""
run "3+1" "$h0:3,$h1:1" ""
[ $fail = 0 ] && echo "netns hier: every run exact"
exit $fail
