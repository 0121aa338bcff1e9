#!/bin/sh
# ctest driver: two network-namespace hosts, one rank each, exchanging over
# tp_tcp and tp_ofi (tcp;ofi_rxm), first on a clean link, then with a 1 Gbit/s
# token bucket and 1% random loss on every host's egress. Every run is bounded
# by timeout. Exit 77 (reported as skipped) when namespaces cannot be made.
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
  if [ $s0 = 77 ] || [ $s1 = 77 ]; then
    echo "[$label $tp $md] SKIP: transport $tp not available"
    return 77
  fi
  if [ $s0 != 0 ] || [ $s1 != 0 ]; then
    echo "[$label $tp $md] FAILED: rank 0 exit $s0, rank 1 exit $s1 (124: timed out)"
    return 1
  fi
  return 0
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
for tp in tcp ofi; do
  run_pair $tp check clean
  r=$?
  [ $r = 0 ] || [ $r = 77 ] || fail=1
done

"$netns" down --prefix "$prefix"
"$netns" up 2 --prefix "$prefix" --rate 1gbit --loss 1 || {
  echo "FAILED: netns.sh up 2 --rate 1gbit --loss 1"
  exit 1
}
for tp in tcp ofi; do
  run_pair $tp check impaired
  r=$?
  [ $r = 0 ] || [ $r = 77 ] || fail=1
done
for h in 0 1; do
  drops=$(ip netns exec "${prefix}h$h" nft list chain inet braid_loss out 2>/dev/null |
    sed -n 's/.*counter packets \([0-9]*\).*/\1/p')
  echo "host $h: ${drops:-?} packets dropped by the 1% loss rule"
done
for h in 0 1; do
  ip netns exec "${prefix}h$h" tc -s qdisc show dev eth0 | sed -n '1,2p' |
    sed "s/^/host $h tbf: /"
done
[ $fail = 0 ] && echo "netns: all exchanges exact"
exit $fail
