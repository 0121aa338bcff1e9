#!/bin/sh
# braid-doctor against faults created here (tests/doctor/CMakeLists.txt).
# usage: doctor_test.sh CASE DOCTOR HELPER BRAIDRUN
# Exit 0 passed, 1 failed, 77 skipped (the fault cannot be created here).
set -u
case_=$1 DOCTOR=$2 HELPER=$3 BRAIDRUN=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/braid-doctor-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# no BRAID_* setting or launcher variable of the caller leaks in
for v in $(env | sed -n 's/^\(BRAID_[A-Za-z0-9_]*\)=.*/\1/p') RANK WORLD_SIZE \
  LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK \
  OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS PMI_RANK PMI_SIZE; do
  unset "$v"
done

fail() {
  echo "FAIL ($case_): $*"
  for f in "$tmp"/*.out "$tmp"/*.err; do
    [ -s "$f" ] && { echo "--- $f"; cat "$f"; }
  done
  exit 1
}
skip() {
  echo "SKIP ($case_): $*"
  exit 77
}

# finding FILE VERDICT CHECK WHAT FIX: the text report in FILE has a line
# "VERDICT CHECK ..." containing WHAT whose fix line contains FIX ("" for no
# fix asserted). Patterns are fixed strings.
finding() {
  awk -v v="$2" -v c="$3" -v w="$4" -v x="$5" '
    hit && /^ +fix: / { if (index($0, x)) found = 1; hit = 0; next }
    { hit = 0 }
    $1 == v && $2 == c && index($0, w) { if (x == "") found = 1; else hit = 1 }
    END { exit found ? 0 : 1 }' "$1" ||
    fail "no '$2 $3' finding with '$4' and fix '$5' in $1"
}

# The exit status a report must have: the worst of the fault's verdict and
# what this machine shows without the fault (baseline, same options).
want_exit() {
  b=$1 v=$2
  [ "$b" -gt "$v" ] && echo "$b" || echo "$v"
}

baseline() {
  "$DOCTOR" "$@" >"$tmp/base.out" 2>"$tmp/base.err"
  echo $?
}

# cma_under MODE: the doctor's report without a filter ($b, base.out: cma
# works) and under the helper's seccomp MODE ($rc, r.out); skips where no
# filter can be installed.
cma_under() {
  b=$(baseline --local-ranks 2)
  "$HELPER" "$1" "$DOCTOR" --local-ranks 2 >"$tmp/r.out" 2>"$tmp/r.err"
  rc=$?
  [ $rc -eq 77 ] && skip "$(cat "$tmp/r.err")"
  finding "$tmp/base.out" ok cma "cross-memory attach works" ""
}

need_python() {
  command -v python3 >/dev/null 2>&1 || skip "python3 is needed to parse JSON"
}

case $case_ in
json)
  need_python
  "$DOCTOR" --local-ranks 2 --json >"$tmp/r.out" 2>"$tmp/r.err"
  rc=$?
  python3 - "$tmp/r.out" "$rc" <<'EOF' || fail "JSON report"
import json, sys
r = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
rank = {"ok": 0, "warning": 1, "error": 2}
checks = {f["check"] for f in r["findings"]}
for c in ("env", "shm", "cma", "net", "limits", "rdma", "gpu", "cores"):
    assert c in checks, "no finding of check " + c
for f in r["findings"]:
    assert f["verdict"] in rank, f
    assert f["what"], f
    assert (f["fix"] != "") == (f["verdict"] != "ok"), f
worst = max(rank[f["verdict"]] for f in r["findings"])
assert r["exit"] == worst == rc, (r["exit"], worst, rc)
assert r["verdict"] == ["ok", "warning", "error"][worst]
assert r["warnings"] == sum(f["verdict"] == "warning" for f in r["findings"])
print("json: %d findings, exit %d" % (len(r["findings"]), rc))
EOF
  ;;
shm_tiny)
  need_python
  command -v unshare >/dev/null 2>&1 || skip "no unshare command"
  unshare -m true 2>/dev/null || skip "unshare -m is not permitted here"
  # only inside the private mount namespace: the machine's /dev/shm stays
  unshare -m sh -c '
    mount -t tmpfs -o size=1M tmpfs /dev/shm || exit 77
    "$1" --local-ranks 2 --json >"$2/r.out" 2>"$2/r.err"
    echo $? >"$2/rc"
    BRAID_RANK=0 BRAID_SIZE=2 BRAID_LOCAL_RANK=0 BRAID_LOCAL_SIZE=2 \
      "$1" --local-ranks 2 >"$2/t.out" 2>"$2/t.err"
    "$3" -n 2 --timeout 20 "$4" init >"$2/job.out" 2>"$2/job.err"
    echo $? >"$2/job.rc"' sh "$DOCTOR" "$tmp" "$BRAIDRUN" "$HELPER"
  [ $? -eq 77 ] && skip "cannot mount a tmpfs on /dev/shm in a private namespace"
  [ "$(cat "$tmp/rc")" = 2 ] || fail "exit $(cat "$tmp/rc"), want 2"
  python3 - "$tmp/r.out" <<'EOF' || fail "JSON report"
import json, sys
r = json.load(open(sys.argv[1]))
shm = [f for f in r["findings"] if f["check"] == "shm"]
assert len(shm) == 1 and shm[0]["verdict"] == "error", shm
assert "/dev/shm: 1.0 MiB" in shm[0]["what"], shm
assert "--shm-size=" in shm[0]["fix"] and "BRAID_BUFFSIZE" in shm[0]["fix"], shm
assert r["exit"] == 2 and r["verdict"] == "error"
EOF
  # the local ranks of the launcher (braidrun's variables) count too
  finding "$tmp/t.out" error shm "2 ranks on this host" "--shm-size="
  # a real job in the tiny /dev/shm fails, and the library logs the
  # doctor's finding and its fix with the init error
  [ "$(cat "$tmp/job.rc")" != 0 ] || fail "a 2-rank job formed in 1 MiB"
  grep -q "doctor shm error: /dev/shm: 1.0 MiB" "$tmp/job.err" ||
    fail "the init failure does not log the doctor's shm finding"
  grep -q "fix: enlarge /dev/shm" "$tmp/job.err" ||
    fail "the init failure does not log the fix"
  ;;
cma_seccomp)
  cma_under seccomp
  finding "$tmp/r.out" warning cma "process_vm_readv on this process failed" \
    "seccomp profile"
  finding "$tmp/r.out" warning cma "copied twice" "BRAID_SHM_CMA=0"
  [ $rc -eq "$(want_exit "$b" 1)" ] || fail "exit $rc (baseline $b), want 1+"
  # BRAID_SHM_CMA=0: nothing to warn about, the copies are asked for
  BRAID_SHM_CMA=0 "$HELPER" seccomp "$DOCTOR" --local-ranks 2 \
    >"$tmp/off.out" 2>&1
  finding "$tmp/off.out" ok cma "BRAID_SHM_CMA=0" ""
  ;;
cma_write_seccomp)
  # reads allowed, writes refused: the doctor names the write, and a job
  # whose root cannot write into its peer (the shared single copy) still
  # broadcasts every byte right, the receiver reading what the root could
  # not write
  cma_under seccomp-write
  finding "$tmp/r.out" warning cma "process_vm_writev on this process failed" \
    "allow process_vm_writev"
  finding "$tmp/r.out" warning cma "receivers copy all of it" ""
  [ $rc -eq "$(want_exit "$b" 1)" ] || fail "exit $rc (baseline $b), want 1+"
  BRAID_DEBUG=INFO BRAID_DEBUG_SUBSYS=SHM "$BRAIDRUN" -n 2 "$HELPER" \
    seccomp-write "$HELPER" bcast >"$tmp/job.out" 2>"$tmp/job.err" ||
    fail "the broadcast job failed under the write filter"
  [ "$(grep -c "bcast success, right" "$tmp/job.out")" -eq 2 ] ||
    fail "not every rank broadcast right"
  grep -q "writing into its memory failed" "$tmp/job.err" ||
    fail "the root never tried (or never logged) a refused write"
  ;;
ifname)
  BRAID_SOCKET_IFNAME==braid-no-such-if0 "$DOCTOR" --local-ranks 2 \
    >"$tmp/r.out" 2>"$tmp/r.err"
  rc=$?
  [ $rc -eq 2 ] || fail "exit $rc, want 2"
  finding "$tmp/r.out" error net "BRAID_SOCKET_IFNAME==braid-no-such-if0 matches no interface" \
    "set BRAID_SOCKET_IFNAME to an interface that is up here"
  # the fix names the interfaces that are up (loopback at least)
  finding "$tmp/r.out" error net "matches no interface" "lo 127.0.0.1"
  # a filter that matches picks that interface
  BRAID_SOCKET_IFNAME==lo "$DOCTOR" --local-ranks 2 >"$tmp/lo.out" 2>&1
  grep -q "^[a-z]* *net *bootstrap and tcp would use lo 127.0.0.1 (the first that BRAID_SOCKET_IFNAME==lo matches)" \
    "$tmp/lo.out" || fail "BRAID_SOCKET_IFNAME==lo: $(grep net "$tmp/lo.out")"
  ;;
env_unknown)
  b=$(baseline --local-ranks 2)
  BRAID_NCHANNEL=4 BRAID_SOKET_IFNAME=lo BRAID_BUFSIZE=1M \
    "$DOCTOR" --local-ranks 2 >"$tmp/r.out" 2>"$tmp/r.err"
  rc=$?
  finding "$tmp/r.out" warning env "BRAID_NCHANNEL is set but braid does not read it" \
    "did you mean BRAID_NCHANNELS?"
  finding "$tmp/r.out" warning env "BRAID_SOKET_IFNAME is set" \
    "did you mean BRAID_SOCKET_IFNAME?"
  finding "$tmp/r.out" warning env "BRAID_BUFSIZE is set" \
    "did you mean BRAID_BUFFSIZE?"
  [ $rc -eq "$(want_exit "$b" 1)" ] || fail "exit $rc (baseline $b), want 1+"
  # launcher variables and the scripts' variables are known
  BRAID_SKIP_LINT=1 BRAID_RENDEZVOUS_DIR=/tmp "$DOCTOR" --local-ranks 2 \
    >"$tmp/known.out" 2>&1
  finding "$tmp/known.out" ok env "2 BRAID_* variables set, all known" ""
  ;;
env_refused)
  b=$(baseline --local-ranks 2)
  BRAID_NSLOTS=1000 BRAID_TIMEOUT=soon "$DOCTOR" --local-ranks 2 \
    >"$tmp/r.out" 2>"$tmp/r.err"
  rc=$?
  finding "$tmp/r.out" warning env "BRAID_NSLOTS=1000 is not an integer in [2, 64]" \
    "set BRAID_NSLOTS to a value braid takes"
  finding "$tmp/r.out" warning env "BRAID_TIMEOUT=soon is not an integer" \
    "set BRAID_TIMEOUT to a value braid takes"
  [ $rc -eq "$(want_exit "$b" 1)" ] || fail "exit $rc (baseline $b), want 1+"
  # a size with a blank and a minus sign (strtoull reads " -1" as the
  # largest size), and slots larger than the shm ring takes
  BRAID_SHM_CMA_THRESHOLD=" -1" BRAID_BUFFSIZE=64G "$DOCTOR" --local-ranks 2 \
    >"$tmp/s.out" 2>&1
  finding "$tmp/s.out" warning env "BRAID_SHM_CMA_THRESHOLD= -1 is not a size" \
    "set BRAID_SHM_CMA_THRESHOLD to a value braid takes"
  finding "$tmp/s.out" warning env "BRAID_BUFFSIZE=64G makes slots of more than 4 GiB" \
    "set BRAID_BUFFSIZE to a value braid takes"
  # a transport that does not exist stops every communicator: an error
  BRAID_TRANSPORT=infiniband "$DOCTOR" --local-ranks 2 >"$tmp/t.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "BRAID_TRANSPORT=infiniband: exit $rc, want 2"
  finding "$tmp/t.out" error env "BRAID_TRANSPORT=infiniband is not a transport" \
    "BRAID_TRANSPORT takes shm, tcp, ofi or ibverbs"
  # the command line: an option without its value is named as such
  "$DOCTOR" --ranks >"$tmp/o.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "--ranks without a value: exit $rc, want 2"
  grep -q -- "--ranks needs a value" "$tmp/o.out" ||
    fail "--ranks without a value: $(cat "$tmp/o.out")"
  ;;
limits)
  # a job of 1000 ranks (the launcher's size) under a soft limit of 128
  # open files
  (ulimit -Sn 128 || exit 77
    RANK=0 WORLD_SIZE=1000 exec "$DOCTOR" --local-ranks 2) \
    >"$tmp/r.out" 2>"$tmp/r.err"
  rc=$?
  [ $rc -eq 77 ] && skip "cannot lower the open-file limit"
  [ $rc -eq 2 ] || fail "exit $rc, want 2"
  finding "$tmp/r.out" error limits "open files: 128 (soft) is below" \
    "raise the limit: ulimit -n"
  ;;
ranks_unreachable)
  ports=$("$HELPER" ports) || skip "no free TCP port"
  set -- $ports
  good=$1 closed=$2
  start=$(date +%s)
  # rank 0 runs the root at $good; rank 1 is given $closed, where nobody
  # listens, so it cannot reach the root
  RANK=0 WORLD_SIZE=2 BRAID_COMM_ID=127.0.0.1:$good \
    "$DOCTOR" --ranks 2 --local-ranks 1 --timeout 3 >"$tmp/r0.out" 2>"$tmp/r0.err" &
  p0=$!
  RANK=1 WORLD_SIZE=2 BRAID_COMM_ID=127.0.0.1:$closed \
    "$DOCTOR" --ranks 2 --local-ranks 1 --timeout 3 >"$tmp/r1.out" 2>"$tmp/r1.err"
  rc1=$?
  wait $p0
  rc0=$?
  took=$(($(date +%s) - start))
  [ $rc1 -eq 2 ] || fail "rank 1 exit $rc1, want 2"
  [ $rc0 -eq 2 ] || fail "rank 0 exit $rc0, want 2"
  finding "$tmp/r1.out" error ranks "rank 1 of 2 (torchrun): forming the communicator" \
    "check that every rank reaches rank 0's address"
  grep -q "^error *ranks .*cannot reach the bootstrap root.*127.0.0.1:$closed" \
    "$tmp/r1.out" ||
    fail "rank 1's finding does not name the address it could not reach"
  finding "$tmp/r0.out" error ranks "rank 0 of 2 (torchrun): forming the communicator" \
    "a rank did not join"
  grep -q "^error *ranks .*(missing: 1)" "$tmp/r0.out" ||
    fail "rank 0's finding does not name the rank that did not join"
  # bounded by --timeout (3 s each), with room for a slow machine
  [ "$took" -le 30 ] || fail "took $took s with --timeout 3"
  echo "rank 1: $(grep '^error *ranks' "$tmp/r1.out")"
  echo "rank 0: $(grep '^error *ranks' "$tmp/r0.out")"
  ;;
ranks_disagree)
  # rank 1 forces tcp, rank 0 takes the automatic choice: the communicator
  # cannot form, and both ranks say why
  ports=$("$HELPER" ports) || skip "no free TCP port"
  set -- $ports
  RANK=0 WORLD_SIZE=2 BRAID_COMM_ID=127.0.0.1:$1 \
    "$DOCTOR" --ranks 2 --local-ranks 2 --timeout 5 >"$tmp/r0.out" 2>"$tmp/r0.err" &
  p0=$!
  RANK=1 WORLD_SIZE=2 BRAID_COMM_ID=127.0.0.1:$1 BRAID_TRANSPORT=tcp \
    "$DOCTOR" --ranks 2 --local-ranks 2 --timeout 5 >"$tmp/r1.out" 2>"$tmp/r1.err"
  rc1=$?
  wait $p0
  rc0=$?
  [ $rc0 -eq 2 ] && [ $rc1 -eq 2 ] || fail "exits $rc0 and $rc1, want 2 and 2"
  for r in 0 1; do
    finding "$tmp/r$r.out" error ranks "rank $r of 2 (torchrun): forming the communicator" \
      "the ranks disagree: give every rank the same BRAID_* settings"
  done
  ;;
ranks_ok)
  "$BRAIDRUN" -n 2 --timeout 30 "$DOCTOR" --ranks 2 --timeout 10 \
    >"$tmp/r.out" 2>"$tmp/r.err"
  rc=$?
  [ $rc -le 1 ] || fail "braidrun exit $rc"
  for r in 0 1; do
    grep -q "^\[$r\] ok *ranks *rank $r of 2 (braidrun): rendezvous, a 4-byte allreduce and a send/receive with every other rank worked" \
      "$tmp/r.out" || fail "rank $r did not report the rendezvous ok"
  done
  # --ranks that disagrees with the launcher is an error (braidrun stops
  # the other rank once the first exits with it, so one report is enough)
  "$BRAIDRUN" -n 2 --timeout 30 "$DOCTOR" --ranks 3 >"$tmp/m.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "--ranks 3 under 2 ranks: braidrun exit $rc, want 2"
  grep -q "^\[[01]\] error *ranks *--ranks 3 but the launcher (braidrun) says 2 ranks" \
    "$tmp/m.out" || fail "--ranks 3 under 2 ranks not reported"
  ;;
ranks_all_reports)
  # every rank warns (a misspelled variable): under braidrun, which stops
  # the job at the first rank that exits non-zero, every rank's report still
  # comes out whole; rank 0 exits with the worst verdict of all, the others
  # with 0
  b=$(baseline --local-ranks 3)
  BRAID_NCHANNEL=4 "$BRAIDRUN" -n 3 --timeout 40 "$DOCTOR" --ranks 3 \
    --timeout 10 >"$tmp/r.out" 2>"$tmp/r.err"
  rc=$?
  [ $rc -eq "$(want_exit "$b" 1)" ] || fail "braidrun exit $rc (baseline $b), want 1+"
  for r in 0 1 2; do
    grep -q "^\[$r\] warning *env *BRAID_NCHANNEL is set but braid does not read it" \
      "$tmp/r.out" || fail "rank $r: no env warning"
    grep -q "^\[$r\] ok *ranks *rank $r of 3 (braidrun): rendezvous" \
      "$tmp/r.out" || fail "rank $r: no ranks finding"
    grep -q "^\[$r\] [0-9]* warnings*, [0-9]* errors*: " "$tmp/r.out" ||
      fail "rank $r: its report was cut short (no summary line)"
    grep -q "^\[$r\] job of 3 ranks: the worst verdict of every rank's report is .*warnings on ranks 0, 1, 2" \
      "$tmp/r.out" || fail "rank $r: no job line naming the ranks that warn"
  done
  grep -q "^\[0\] rank 0 exits with $rc, the job's worst verdict; the other ranks with 0" \
    "$tmp/r.out" || fail "rank 0 does not say it exits with $rc"
  grep -q "^\[1\] rank 1 exits with 0; rank 0 exits with $rc" "$tmp/r.out" ||
    fail "rank 1 does not say it exits with 0"
  # the same in JSON: this rank's exit and every rank's verdict
  BRAID_NCHANNEL=4 "$BRAIDRUN" -n 3 --timeout 40 "$DOCTOR" --ranks 3 \
    --timeout 10 --json >"$tmp/j.out" 2>"$tmp/j.err"
  for r in 0 1 2; do
    [ $r -eq 0 ] && x=$rc || x=0
    grep -q "^\[$r\] {.*\"exit\": $x, .*\"job\": {\"rank\": $r, \"ranks\": 3, \"verdict\": \"[a-z]*\", \"verdicts\": \[\"[a-z]*\", \"[a-z]*\", \"[a-z]*\"\]}" \
      "$tmp/j.out" || fail "rank $r: JSON without exit $x and the job's verdicts"
    grep -q "^\[$r\] \]}" "$tmp/j.out" || fail "rank $r: JSON report cut short"
  done
  ;;
launch_vars)
  # the launcher's variables, checked by braid_comm_init_env's own rules
  # without meeting anyone: each value it refuses is an error naming it
  check_launch() {
    want=$1
    shift
    env "$@" "$DOCTOR" --local-ranks 1 >"$tmp/l.out" 2>"$tmp/l.err"
    rc=$?
    [ $rc -eq 2 ] || fail "$*: exit $rc, want 2"
    finding "$tmp/l.out" error launch "braid_comm_init_env would fail: " ""
    finding "$tmp/l.out" error launch "$want" ""
  }
  check_launch "WORLD_SIZE='0' is out of range" RANK=0 WORLD_SIZE=0
  check_launch "RANK=5 is not below WORLD_SIZE=2" RANK=5 WORLD_SIZE=2
  check_launch "MASTER_PORT='99999' is out of range (1..65535)" \
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=99999
  check_launch "MASTER_ADDR is set but MASTER_PORT is not" \
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1
  check_launch "RANK is set but WORLD_SIZE is not" RANK=1
  check_launch "BRAID_SECRET must be 32 hexadecimal digits" \
    RANK=0 WORLD_SIZE=2 BRAID_COMM_ID=127.0.0.1:29500 BRAID_SECRET=abc
  check_launch "span more than one host" OMPI_COMM_WORLD_RANK=0 \
    OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_SIZE=2
  finding "$tmp/l.out" error launch "span more than one host" \
    "set MASTER_ADDR and MASTER_PORT"
  # good values: ok, saying how the ranks would meet
  RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 "$DOCTOR" \
    --local-ranks 1 >"$tmp/ok.out" 2>&1
  finding "$tmp/ok.out" ok launch "rank 1 of 2 (torchrun); the ranks would meet through the root at 127.0.0.1:29500 (MASTER_ADDR/MASTER_PORT)" ""
  "$DOCTOR" --local-ranks 1 >"$tmp/none.out" 2>&1
  finding "$tmp/none.out" ok launch "no launcher's rank or size variable set" ""
  ;;
gpu_emu)
  # DOCTOR is braid-doctor on the emulated GPU (two devices)
  export CUDA_EMU_BUSID=0000:e1:00.0,0000:e2:00.0
  CUDA_MPS_PIPE_DIRECTORY=$tmp/no-mps "$DOCTOR" --local-ranks 4 \
    >"$tmp/r.out" 2>"$tmp/r.err"
  rc=$?
  finding "$tmp/r.out" ok gpu "2 GPUs: GPU0 0000:e1:00.0, GPU1 0000:e2:00.0" ""
  finding "$tmp/r.out" ok gpu "CUDA IPC works: a handle of GPU 0's memory opened in another process on GPU 1" ""
  finding "$tmp/r.out" warning gpu "4 ranks on this host share 2 GPUs and no MPS control daemon was found at $tmp/no-mps/control" \
    "nvidia-cuda-mps-control -d"
  [ $rc -ge 1 ] || fail "exit $rc with a warning"
  # an MPS daemon's pipe where braid looks for it
  mkdir -p "$tmp/mps" && : >"$tmp/mps/control"
  CUDA_MPS_PIPE_DIRECTORY=$tmp/mps "$DOCTOR" --local-ranks 4 >"$tmp/m.out" 2>&1
  finding "$tmp/m.out" ok gpu "4 ranks share 2 GPUs under MPS" ""
  # one rank per GPU: MPS is not needed, nothing said of it
  "$DOCTOR" --local-ranks 2 >"$tmp/two.out" 2>&1
  grep -q "MPS" "$tmp/two.out" && fail "MPS mentioned with one rank per GPU"
  ;;
*)
  echo "unknown case $case_"
  exit 2
  ;;
esac
echo "PASS ($case_)"
exit 0
