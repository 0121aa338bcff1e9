#!/bin/sh
# braid-trace analyze on the dumps under tests/tools/flight/ (written by hand
# in the format of docs/TRACE.md): the report's words for each case.
# usage: trace_test.sh CASE BRAID_TRACE FLIGHT_DIR
# Exit 0 passed, 1 failed.
set -u
case_=$1 TRACE=$2 DIR=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/braid-trace-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL ($case_): $*"
  for f in "$tmp"/out "$tmp"/err; do
    [ -s "$f" ] && { echo "--- $f"; cat "$f"; }
  done
  exit 1
}

# run WANT_RC ARGS...: braid-trace with ARGS exits WANT_RC
run() {
  want=$1
  shift
  "$TRACE" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ "$rc" -eq "$want" ] || fail "exit $rc, expected $want: braid-trace $*"
}
# verdict LINE: the report's first line is exactly LINE
verdict() {
  first=$(head -n 1 "$tmp/out")
  [ "$first" = "$1" ] || fail "first line '$first', expected '$1'"
}
# line LINE [FILE]: FILE (default the report) has a line exactly LINE
line() {
  grep -Fqx -- "$1" "${2:-$tmp/out}" || fail "no line '$1' in ${2:-the report}"
}
# has TEXT [FILE]: FILE (default the report) contains TEXT
has() {
  grep -Fq -- "$1" "${2:-$tmp/out}" || fail "no '$1' in ${2:-the report}"
}
# lacks TEXT [FILE]: FILE (default the report) does not contain TEXT
lacks() {
  ! grep -Fq -- "$1" "${2:-$tmp/out}" || fail "'$1' in ${2:-the report}"
}

case $case_ in
alltoallv)
  # three ranks whose alltoallv #1 sent 3, 5 and 7 elements (counts that
  # differ are no disagreement); in #2 rank 2 passes int32 where ranks 0
  # and 1 (sending 3 and 4) pass float32
  run 0 analyze "$DIR/alltoallv"
  verdict "likely culprit: rank 2 (disagrees on call #2: alltoallv(int32) where ranks 0, 1 call alltoallv(float32))"
  line '  ranks disagree on call #2: ranks 0, 1: alltoallv(float32); rank 2: alltoallv(int32)'
  line "  rank 0's alltoallv #2 failed waiting for rank 1 (channel 0, step 0 RECV): BRAID_ERR_TIMEOUT"
  lacks 'call #1'
  ;;
stopped)
  # rank 2 stopped after allreduce #4; ranks 0, 1 wait for it in #5. Rank
  # 0's dump has unknown keys (one nested) and escapes; rank 1's lists its
  # keys in reverse order.
  run 0 analyze "$DIR/stopped/rank0.json" "$DIR/stopped/rank1.json" \
    "$DIR/stopped/rank2.json"
  verdict "likely culprit: rank 2 (never reached allreduce #5)"
  line 'comm "world", 3 ranks, id 5d2b7e04a91c3f68'
  lacks 'no comm_id'
  line '  rank 2 never reached allreduce #5 (its last call: allreduce #4, done at 12:15:34.001 UTC)'
  line '  rank 0 waits for rank 2 in allreduce #5 (channel 0, step 3 RECV)'
  line '  rank 1 waits for rank 2 in allreduce #5 (channel 0, step 2 RECV)'
  has '  rank 2 is not waiting in braid: stopped, computing, or elsewhere'
  line '  rank 1: allreduce #5, waiting for rank 2, started at 12:15:35.000 UTC'
  line '  none: the ranks agree on every call that several dumps hold'
  lacks 'rank 0 never' && lacks 'rank 1 never' && lacks 'cycle'
  [ ! -s "$tmp/err" ] || fail "warnings for complete dumps"
  # a directory reads the same
  "$TRACE" analyze "$DIR/stopped" >"$tmp/dir" 2>&1 || fail "directory: exit $?"
  cmp -s "$tmp/out" "$tmp/dir" || fail "the directory's report differs"
  ;;
jobs)
  # two jobs' dumps in one folder, as /tmp/braid-flight.* holds them after
  # a second job: both communicators are "comm" of 3 ranks. Job A (id
  # f3a1...) lost rank 0 (stopped: ranks 1, 2 timed out waiting for it);
  # job B (id 0be4..., a minute later) lost rank 1 (it died during
  # allreduce #3). Each is analyzed on its own, the older first.
  run 0 analyze "$DIR/jobs"
  verdict "comm \"comm\" (3 ranks, id f3a1c0de5b7e2290): likely culprit: rank 0 (rank 1's allreduce #11 failed waiting for it: BRAID_ERR_TIMEOUT)"
  line "comm \"comm\" (3 ranks, id 0be428f2ec642130): likely culprit: rank 1 (rank 0's allreduce #3 failed waiting for it: BRAID_ERR_REMOTE)"
  line 'comm "comm", 3 ranks, id f3a1c0de5b7e2290'
  line 'comm "comm", 3 ranks, id 0be428f2ec642130'
  line 'warning: no dump from rank 0'
  line 'warning: no dump from rank 1'
  lacks 'never reached'
  lacks 'no comm_id'
  lacks 'two dumps' "$tmp/err"
  line 'braid-trace: note: 2 communicators named "comm" with 3 ranks (dumps with different comm_id: other jobs, or other communicators of one job); each is analyzed on its own' "$tmp/err"
  # the same dumps without their ids, as an older braid wrote them: still
  # read, grouped by name and size as before, with a note that says so
  mkdir "$tmp/old"
  for f in "$DIR/jobs/"*.jsonl; do
    sed 's/"comm_id":"[0-9a-f]*",//' "$f" >"$tmp/old/${f##*/}"
  done
  run 0 analyze "$tmp/old"
  [ "$(grep -c '^comm "comm", 3 ranks$' "$tmp/out")" -eq 1 ] ||
    fail "dumps without ids not read as one communicator"
  line 'note: these dumps carry no comm_id (an older braid wrote them): grouped by comm name and size alone, so dumps of several jobs would be read as one'
  has 'two dumps of rank 2' "$tmp/err"
  ;;
skipped)
  # rank 1 skipped allreduce #5: its #5 is the broadcast the others call
  # next; rank 2 failed on its message, rank 0 waits for rank 2, rank 1
  # waits for rank 0 in its #6
  run 0 analyze "$DIR/skipped"
  verdict "likely culprit: rank 1 (disagrees on call #5: broadcast(16 x float32, root 1) where ranks 0, 2 call allreduce(16 x float32, sum))"
  line '  ranks disagree on call #5: ranks 0, 2: allreduce(16 x float32, sum); rank 1: broadcast(16 x float32, root 1)'
  line '  rank 1: allreduce #6, waiting for rank 0, started at 12:15:35.001 UTC'
  line '  rank 1 waits for rank 0 in allreduce #6 (channel 0, step 0 RECV)'
  line '  rank 2 is not waiting in braid: its allreduce #5 failed (BRAID_ERR_MISMATCH)'
  lacks 'cycle'
  ;;
mismatch)
  # rank 1 reduces with max where ranks 0 and 2 use sum, at the same seq
  run 0 analyze "$DIR/mismatch"
  verdict "likely culprit: rank 1 (disagrees on call #5: allreduce(16 x float32, max) where ranks 0, 2 call allreduce(16 x float32, sum))"
  line '  ranks disagree on call #5: ranks 0, 2: allreduce(16 x float32, sum); rank 1: allreduce(16 x float32, max)'
  lacks 'never reached'
  ;;
cycle)
  # comm "ring": ranks 0-2 each receive from the one before; rank 3 waits
  # for rank 0 in the barrier after. comm "pair": two ranks each the root
  # of one reduce, each waiting for the other.
  run 0 analyze "$DIR/cycle"
  line 'comm "ring" (4 ranks): likely culprit: ranks 0-2 (they wait for each other: cycle 0 -> 2 -> 1 -> 0)'
  line '  cycle: 0 -> 2 -> 1 -> 0'
  line '  rank 2 waits for rank 1 in a recv (channel 0, step 0 RECV)'
  line '  rank 3 waits for rank 0 in barrier #8 (channel 0, step 0 RECV)'
  has '  rank 0: allreduce #7, done at 12:15:37.000 UTC; then recv from rank 2, waiting for rank 2'
  line 'comm "pair" (2 ranks): likely culprit: ranks 0, 1 (they disagree on call #3, with no majority)'
  line '  cycle: 0 -> 1 -> 0'
  line '  ranks disagree on call #3: rank 0: reduce(16 x float32, sum, root 0); rank 1: reduce(16 x float32, sum, root 1)'
  [ "$(grep -c 'cycle:' "$tmp/out")" -eq 2 ] || fail "not two cycles"
  lacks 'is not waiting in braid'
  ;;
malformed)
  # each fault names its file and line; nothing is analyzed
  for f in syntax:3 type:2 version:1 waits_on:3 not_a_dump:1 escape:2 \
    trailing:2 fp:3 count:2 ncalls:1 kind:3 root:2 comm_id:3; do
    name=${f%:*} at=${f#*:}
    run 2 analyze "$DIR/stopped/rank0.json" "$DIR/malformed/$name.json"
    has "braid-trace: $DIR/malformed/$name.json:$at: " "$tmp/err"
    [ ! -s "$tmp/out" ] || fail "$name: a report despite the error"
  done
  run 2 analyze "$DIR/malformed/syntax.json"
  line "braid-trace: $DIR/malformed/syntax.json:3: ':' expected after key \"kind\" at byte 17" "$tmp/err"
  run 2 analyze "$DIR/malformed/version.json"
  has 'format version 2 ("braid_flight"); this braid-trace reads version 1' "$tmp/err"
  run 2 analyze "$DIR/malformed/waits_on.json"
  has '"waits_on" 7 is not a rank of 3' "$tmp/err"
  # fields the recorder never writes so: refused, not shown as given
  run 2 analyze "$DIR/malformed/count.json"
  has '"count" -100 is below 0' "$tmp/err"
  run 2 analyze "$DIR/malformed/ncalls.json"
  has '"ncalls" -1 is below 0' "$tmp/err"
  run 2 analyze "$DIR/malformed/kind.json"
  has '"kind" "bogus" is not a collective braid records' "$tmp/err"
  run 2 analyze "$DIR/malformed/root.json"
  has '"root" 3 is not a rank of 3' "$tmp/err"
  run 2 analyze "$DIR/malformed/comm_id.json"
  has '"comm_id" must be a string' "$tmp/err"
  # every file of a directory is read: twelve errors, and the file that
  # is no dump left out
  run 2 analyze "$DIR/malformed"
  [ "$(grep -c "^braid-trace: $DIR/malformed/" "$tmp/err")" -eq 12 ] ||
    fail "not twelve errors for the directory"
  line 'braid-trace: 12 unreadable or malformed inputs: no analysis' "$tmp/err"
  line "braid-trace: warning: $DIR/malformed/not_a_dump.json: not a braid flight dump (its first line has no \"braid_flight\"): left out" "$tmp/err"
  # a directory with other JSON files in it, as /tmp may be
  cp "$DIR/stopped/"*.json "$DIR/malformed/not_a_dump.json" "$tmp/"
  printf 'not json\n' >"$tmp/notes.jsonl"
  run 0 analyze "$tmp"
  verdict "likely culprit: rank 2 (never reached allreduce #5)"
  has "notes.jsonl: not a braid flight dump" "$tmp/err"
  run 2 analyze "$DIR/no-such-dump.json"
  has "no-such-dump.json: No such file or directory" "$tmp/err"
  # bytes that are no JSON at all, and a line without its end
  printf '\001\377{"braid_flight"\n' >"$tmp/junk.json"
  run 2 analyze "$tmp/junk.json"
  has "junk.json:1: " "$tmp/err"
  ;;
truncated)
  # rank 0's file ends inside a call line, rank 1's holds fewer calls than
  # its header announces, rank 2's is empty: analyzed, with warnings
  run 0 analyze "$DIR/truncated"
  has "warning: $DIR/truncated/rank0.json:1: the file ends inside line 4" "$tmp/err"
  has "warning: $DIR/truncated/rank1.json:1: its header announces 5 calls, 2 follow" "$tmp/err"
  has "warning: $DIR/truncated/rank2.json: empty, no dump in it" "$tmp/err"
  has "warning: rank 0's dump $DIR/truncated/rank0.json is cut short"
  line 'warning: no dump from rank 2'
  line '  rank 0: allreduce #2, done at 12:15:32.000 UTC'
  verdict "no culprit found"
  ;;
missing)
  # 6 ranks, dumps from 0, 1, 2, 4: ranks 0, 2 wait for 3, rank 1 for 0,
  # rank 4 for 5
  run 0 analyze "$DIR/missing"
  verdict "likely culprit: rank 3 (ranks 0-2 wait for it; no dump from it); other chains end elsewhere"
  line 'warning: no dump from ranks 3, 5'
  line '  rank 3 has no dump: what it does is not known'
  line '  rank 5 has no dump: what it does is not known'
  line '  rank 1 waits for rank 0 in allreduce #3 (channel 1, step 2 RECV)'
  ;;
dead)
  # as the recorder writes it: rank 1 of 2 exited during allreduce #2;
  # rank 0's call failed while it waited for rank 1
  run 0 analyze "$DIR/dead"
  verdict "likely culprit: rank 1 (rank 0's allreduce #2 failed waiting for it: BRAID_ERR_REMOTE)"
  line "  rank 0's allreduce #2 failed waiting for rank 1 (channel 0, step 1 RECV_REDUCE): BRAID_ERR_REMOTE"
  line 'warning: no dump from rank 1'
  line '  rank 0: allreduce #2, failed (BRAID_ERR_REMOTE)'
  ;;
usage)
  run 2
  has "usage: braid-trace analyze DUMP..." "$tmp/err"
  run 2 analyze
  run 2 summarize "$DIR/stopped"
  run 0 --help
  has "usage: braid-trace analyze DUMP..."
  mkdir "$tmp/none"
  run 2 analyze "$tmp/none"
  has "no *.json or *.jsonl file" "$tmp/err"
  line "braid-trace: no dump to analyze" "$tmp/err"
  ;;
*)
  fail "unknown case"
  ;;
esac
echo "PASS ($case_)"
