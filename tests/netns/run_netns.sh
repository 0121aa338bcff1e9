#!/bin/sh
# ctest driver: two network-namespace hosts, one rank each, exchanging over
# tp_tcp and tp_ofi (tcp;ofi_rxm), first on a clean link, then with a 1 Gbit/s
# token bucket and 1% random loss on every host's egress. Every run is bounded
# by timeout. A stopped rank on the other host must be named by its tcp
# heartbeat (run_stuck). Exit 77 (reported as skipped) when namespaces cannot be made,
# or when ofi is unavailable (tcp must always be: its exit 77 fails). An
# exchange must say it checked every byte, and the impaired run must have
# dropped packets and been rate-limited (the nft and tbf counters).
#
#   run_netns.sh NETNS_XFER [check|bench]
#   run_netns.sh NETNS_XFER matrix BRAIDRUN COLL_MATRIX
# matrix: the collective correctness matrix with 2 ranks on each of 2 hosts
# (shm inside a host, the network transport between hosts), launched by
# braidrun from inside host 0, on a clean and then on an impaired link.
# BRAID_NETNS_TRANSPORTS (default "auto") lists BRAID_TRANSPORT values to run
# it with ("auto" leaves the choice to braid); BRAID_NETNS_COUNTS (default
# 0,1,7,1023,65539) the element counts of the clean run.
set -u
here=$(cd "$(dirname "$0")" && pwd)
xfer=$1
mode=${2:-check}
braidrun=${3:-}
matrix=${4:-}
prefix="bt$$-"
netns="$here/netns.sh"
work=$(mktemp -d /tmp/braid-netns.XXXXXX)
cleanup() { "$netns" down --prefix "$prefix"; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 1' INT TERM

run_pair() { # transport mode label [extra args]
  tp=$1; md=$2; label=$3; shift 3
  idf="$work/id.$tp.$md.$label"
  rm -f "$idf"
  timeout -k 5 150 ip netns exec "${prefix}h0" "$xfer" --rank 0 --nranks 2 \
    --idfile "$idf" --transport "$tp" --mode "$md" "$@" >"$work/r0.out" 2>&1 &
  p0=$!
  timeout -k 5 150 ip netns exec "${prefix}h1" "$xfer" --rank 1 --nranks 2 \
    --idfile "$idf" --transport "$tp" --mode "$md" "$@" >"$work/r1.out" 2>&1
  s1=$?
  wait $p0
  s0=$?
  cat "$work/r0.out" "$work/r1.out" | sed "s/^/[$label $tp $md] /"
  # tcp is always there: its "unavailable" is a failure
  if [ "$tp" != tcp ] && { [ $s0 = 77 ] || [ $s1 = 77 ]; }; then
    echo "[$label $tp $md] SKIP: transport $tp not available"
    return 77
  fi
  if [ $s0 != 0 ] || [ $s1 != 0 ]; then
    echo "[$label $tp $md] FAILED: rank 0 exit $s0, rank 1 exit $s1 (124: timed out, 77: unavailable)"
    return 1
  fi
  # an exchange that exchanged nothing fails: each rank says it checked
  # every byte
  if [ "$md" = check ]; then
    for r in 0 1; do
      grep -q "^rank $r: .* exchange ok$" "$work/r$r.out" || {
        echo "[$label $tp $md] FAILED: rank $r exited 0 without saying its exchange was checked"
        return 1
      }
    done
  fi
  return 0
}

# run_stuck: a communicator over tcp between the hosts whose rank 1 stops
# itself (SIGSTOP); rank 0 must name it by its unanswered heartbeat when its
# call times out (netns_xfer --mode stuck), then kills it.
run_stuck() {
  idf="$work/id.stuck"
  rm -f "$idf"
  BRAID_HEARTBEAT_MS=300 timeout -k 5 60 ip netns exec "${prefix}h1" "$xfer" \
    --rank 1 --nranks 2 --idfile "$idf" --transport tcp --mode stuck \
    >"$work/s1.out" 2>&1 &
  p1=$!
  BRAID_HEARTBEAT_MS=300 timeout -k 5 60 ip netns exec "${prefix}h0" "$xfer" \
    --rank 0 --nranks 2 --idfile "$idf" --transport tcp --mode stuck \
    >"$work/s0.out" 2>&1
  s0=$?
  wait $p1
  cat "$work/s0.out" "$work/s1.out" | grep -v "flight recorder" |
    sed "s/^/[stuck tcp] /"
  if [ $s0 != 0 ] || ! grep -q "^rank 0: stuck ok" "$work/s0.out"; then
    echo "[stuck tcp] FAILED: rank 0 exit $s0 without naming the stopped rank 1 by its heartbeat"
    return 1
  fi
  return 0
}

# run_checks LABEL: the check exchange over tcp, then ofi; fail=1 on a
# failure, skipped_ofi set when ofi was unavailable.
run_checks() {
  for tp in tcp ofi; do
    run_pair $tp check "$1"
    r=$?
    if [ $r = 77 ]; then
      skipped_ofi="$skipped_ofi $1"
    elif [ $r != 0 ]; then
      fail=1
    fi
  done
}

"$netns" up 2 --prefix "$prefix"
st=$?
if [ $st = 77 ]; then
  echo "SKIP: network namespaces cannot be created here (see above)"
  exit 77
fi
[ $st = 0 ] || { echo "FAILED: netns.sh up 2"; exit 1; }

fail=0
export BRAID_OFI_PROVIDER="tcp;ofi_rxm"
if [ "$mode" = matrix ]; then
  run_matrix() { # label counts
    for t in ${BRAID_NETNS_TRANSPORTS:-auto}; do
      if [ "$t" = auto ]; then tv=""; else tv=$t; fi
      echo "[$1 matrix ${t}] braidrun --hosts ${prefix}h0:2,${prefix}h1:2"
      BRAID_TRANSPORT=$tv BRAID_TIMEOUT=120 timeout -k 5 560 \
        ip netns exec "${prefix}h0" "$braidrun" \
        --hosts "${prefix}h0:2,${prefix}h1:2" --timeout 540 \
        "$matrix" --counts "$2" >"$work/m.out" 2>&1
      st=$?
      grep -v '^\[[0-9]*\] [./]' "$work/m.out" | tail -20 | sed "s/^/[$1 matrix $t] /"
      [ $st = 0 ] || { echo "[$1 matrix $t] FAILED (exit $st)"; fail=1; }
    done
  }
  run_matrix clean "${BRAID_NETNS_COUNTS:-0,1,7,1023,65539}"
  "$netns" down --prefix "$prefix"
  "$netns" up 2 --prefix "$prefix" --rate 1gbit --loss 1 || exit 1
  run_matrix impaired "0,7,1023"
  exit $fail
fi
if [ "$mode" = bench ]; then
  for tp in rawtcp tcp ofi; do
    if [ $tp = rawtcp ]; then
      run_pair tcp rawtcp clean --bytes 67108864 --reps 5 || fail=1
    else
      run_pair $tp bench clean --bytes 67108864 --reps 5 || fail=1
    fi
  done
  exit $fail
fi

BRAID_DEBUG=INFO BRAID_DEBUG_SUBSYS=NET run_pair ofi check clean | grep -E "uses provider|FAILED" | head -2
skipped_ofi=
run_checks clean
run_stuck || fail=1

"$netns" down --prefix "$prefix"
"$netns" up 2 --prefix "$prefix" --rate 1gbit --loss 1 || {
  echo "FAILED: netns.sh up 2 --rate 1gbit --loss 1"
  exit 1
}
run_checks impaired
# The impairment must have happened: packets dropped by the loss rule and
# packets held back by the token bucket (tbf's overlimits), summed over
# both hosts.
drops_all=0
over_all=0
for h in 0 1; do
  drops=$(ip netns exec "${prefix}h$h" nft list chain inet braid_loss out 2>/dev/null |
    sed -n 's/.*counter packets \([0-9]*\).*/\1/p')
  echo "host $h: ${drops:-?} packets dropped by the 1% loss rule"
  drops_all=$((drops_all + ${drops:-0}))
  stats=$(ip netns exec "${prefix}h$h" tc -s qdisc show dev eth0 | sed -n '1,2p')
  echo "$stats" | sed "s/^/host $h tbf: /"
  over=$(echo "$stats" | sed -n 's/.*overlimits \([0-9]*\).*/\1/p' | head -1)
  over_all=$((over_all + ${over:-0}))
done
if [ "$drops_all" -eq 0 ]; then
  echo "FAILED: the impaired run dropped no packet (nft counters of the loss rule)"
  fail=1
fi
if [ "$over_all" -eq 0 ]; then
  echo "FAILED: the impaired run was never rate-limited (tbf overlimits 0)"
  fail=1
fi
[ $fail = 0 ] || exit 1
if [ -n "$skipped_ofi" ]; then
  echo "SKIP: ofi (tcp;ofi_rxm) is not available in the namespaces (runs:$skipped_ofi); tcp's exchanges, clean and impaired, were exact"
  exit 77
fi
echo "netns: all exchanges exact; $drops_all packets dropped, $over_all over the rate limit"
exit 0
