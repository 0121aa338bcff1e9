#!/usr/bin/env bash
# braid-bench, the braid harness of perf/compare, on 2 ranks at tiny sizes
# under one call pattern: every collective, and the barrier, over shm and
# TCP exits 0 (its spot checks pass) and prints lines of the documented
# shape (harness.h).
# In the warm run also braid-tcpbw's stream mode (perf/compare/tcpbw.c).
# Correctness only: no time is compared with anything.
#
#   test_compare_bench.sh <braidrun> <braid-bench> warm|first|gap:<us>
set -uo pipefail
braidrun=$1 bench=$2 pattern=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() {
  echo "FAILED: $*"
  fails=$((fails + 1))
}

# The lines of one run: 8 and 16 bytes, 5 columns (6 for first and gap:
# the first call, the median call), numbers, the size in the first
# column.
shape() { # file ncols
  awk -v nc="$2" '
    /^#/ { next }
    {
      if (NF != nc) { print "columns: " $0; bad = 1; next }
      for (i = 1; i <= NF; i++)
        if ($i !~ /^[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?$/) {
          print "not a number: " $0; bad = 1; next
        }
      seen[$1] = 1
    }
    END {
      if (!seen[8] || !seen[16]) { print "sizes 8 and 16 missing"; bad = 1 }
      exit bad
    }' "$1"
}

# refused WHAT CMD...: CMD is a bad command line: exit 2 and its usage.
refused() {
  local what=$1 st
  shift
  "$@" >"$T/raw" 2>&1
  st=$?
  if [ $st = 2 ] && grep -q usage "$T/raw"; then
    ok "$what: exit 2"
  else
    bad "$what: exit $st"
    cat "$T/raw"
  fi
}

ncols=5
[ "$pattern" != warm ] && ncols=6
for tp in shm tcp; do
  for coll in allreduce allgather reduce_scatter broadcast; do
    what="$coll over $tp, pattern $pattern"
    BRAID_TRANSPORT=$tp BRAID_TIMEOUT=60 timeout 120 "$braidrun" -n 2 \
      "$bench" "$coll" 8 16 5 2 "$pattern" >"$T/raw" 2>&1
    st=$?
    # Rank 0 prints the table; braidrun prefixes "[0] ".
    sed -n 's/^\[0\] //p' "$T/raw" >"$T/out"
    if [ $st != 0 ]; then
      bad "$what: exit $st"
      cat "$T/raw"
    elif ! shape "$T/out" $ncols; then
      bad "$what: output"
      cat "$T/raw"
    elif ! grep -q "^# pattern ${pattern%%:*}" "$T/out"; then
      bad "$what: no '# pattern' line"
      cat "$T/raw"
    elif [ $ncols = 6 ] && ! awk '!/^#/ && !($6 > 0) { exit 1 }' "$T/out"; then
      bad "$what: a 6th column that is not a time"
      cat "$T/raw"
    elif [ "${pattern%%:*}" = gap ] &&
      ! grep -q '^# size_bytes .* median_us$' "$T/out"; then
      bad "$what: the header does not name median_us"
      cat "$T/raw"
    else
      ok "$what"
    fi
  done
done

# barrier: one line of size 0 whatever the sizes asked, a time above 0
for tp in shm tcp; do
  what="barrier over $tp, pattern $pattern"
  BRAID_TRANSPORT=$tp BRAID_TIMEOUT=60 timeout 120 "$braidrun" -n 2 \
    "$bench" barrier 0 64 5 2 "$pattern" >"$T/raw" 2>&1
  st=$?
  sed -n 's/^\[0\] //p' "$T/raw" >"$T/out"
  if [ $st != 0 ]; then
    bad "$what: exit $st"
    cat "$T/raw"
  elif ! grep -q '^# braid barrier ' "$T/out" ||
    ! awk -v nc=$ncols '!/^#/ { n++; if (NF != nc || $1 != 0 || $2 != 0 ||
      !($3 > 0)) bad = 1 } END { exit bad || n != 1 }' "$T/out"; then
    bad "$what: output"
    cat "$T/raw"
  else
    ok "$what"
  fi
done

if [ "$pattern" = warm ]; then
  # The 5-argument form is the warm pattern.
  if BRAID_TRANSPORT=shm timeout 120 "$braidrun" -n 2 "$bench" allreduce 8 8 \
    5 2 >"$T/raw" 2>&1 && grep -q '^\[0\] # pattern warm' "$T/raw"; then
    ok "5 arguments: warm"
  else
    bad "5 arguments"
    cat "$T/raw"
  fi
  # braid-tcpbw's streams, a repeated small broadcast over TCP with no
  # library: one line per size, a time above 0; another third argument is
  # refused.
  tcpbw=$(dirname "$bench")/braid-tcpbw
  for mode in stream stream-poll; do
    if timeout 120 "$tcpbw" 8 16 $mode >"$T/raw" 2>&1 &&
      grep -q '^# size_bytes stream_us$' "$T/raw" &&
      awk '!/^#/ { n++; if (NF != 2 || !($2 > 0)) bad = 1; seen[$1] = 1 }
        END { exit bad || n != 2 || !seen[8] || !seen[16] }' "$T/raw"; then
      ok "braid-tcpbw $mode"
    else
      bad "braid-tcpbw $mode"
      cat "$T/raw"
    fi
  done
  refused "braid-tcpbw: a bad mode" "$tcpbw" 8 16 streams
  # A bad pattern is a bad command line (exit 2) before any rank joins.
  refused "bad pattern" "$bench" allreduce 8 8 5 2 gap:x
fi

[ $fails = 0 ] || {
  echo "$fails failed"
  exit 1
}
