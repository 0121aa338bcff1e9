#!/bin/sh
# ctest driver: BRAID_SOCKET_IFNAME across hosts. Two network-namespace
# hosts, each with two links on two subnets: eth0 (198.18.50.0/24, bridge
# br0) and eth1 (198.19.50.0/24, bridge br1) in a switch namespace. Two
# ranks, one per host, over tcp, allreduce 4 MiB of float32 twice
# (ifname_job), and the interface counters (tx_bytes) show where the bytes
# went.
#
#   master:   MASTER_ADDR is host 0's eth0 address, so without the variable
#             every rank listens on eth0 (the route to the root). With
#             BRAID_SOCKET_IFNAME=eth1, =eth1 and ^eth0 (which passes lo too:
#             loopback must not be taken while another interface passes),
#             eth1 must carry the job on both hosts and eth0 only the
#             rendezvous with the root (under 256 KiB).
#   braidrun: the unique-id path: braidrun in host 0 with its root on eth0,
#             the ranks given BRAID_SOCKET_IFNAME=eth1 with -x: the same.
#   nomatch:  BRAID_SOCKET_IFNAME=braid-nope and =nope on both ranks: each
#             rank's init fails, at once, naming the variable and the
#             interfaces it has.
#   doctor:   braid-doctor in host 1 under the variables of the master case
#             reports eth1 and its address, what the ranks used.
#
#   run_ifname.sh IFNAME_JOB [BRAIDRUN [BRAID_DOCTOR]]
# Exit 0 passed, 1 failed, 77 skipped (said on stdout, with the reason) where
# network namespaces, veth pairs or bridges cannot be made.
set -u
job=$1
braidrun=${2:-}
doctor=${3:-}
p="bi$$-"
sw="${p}sw"
work=$(mktemp -d /tmp/braid-ifname.XXXXXX)
made=""
down() {
  for ns in $made; do ip netns del "$ns" 2>/dev/null; done
  made=""
}
cleanup() { down; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
skip() {
  echo "SKIP: $* (BRAID_SOCKET_IFNAME across hosts is not tested here)"
  exit 77
}

[ "$(id -u)" = 0 ] || skip "network namespaces need root (uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (install iproute2)"
ip netns add "$sw" 2>/dev/null || skip "cannot create a network namespace"
made="$sw"
ip -n "$sw" link set lo up
for b in br0 br1; do
  ip -n "$sw" link add "$b" type bridge 2>/dev/null ||
    skip "no bridge support in this kernel"
  ip -n "$sw" link set "$b" up
done
for i in 0 1; do
  h="${p}h$i"
  ip netns add "$h" || { echo "FAILED: cannot create namespace $h"; exit 1; }
  made="$made $h"
  ip -n "$h" link set lo up
  ip -n "$sw" link add "a$i" type veth peer name eth0 netns "$h" 2>/dev/null ||
    skip "cannot create veth pairs"
  ip -n "$sw" link add "b$i" type veth peer name eth1 netns "$h" ||
    { echo "FAILED: veth b$i"; exit 1; }
  ip -n "$sw" link set "a$i" master br0 up &&
    ip -n "$sw" link set "b$i" master br1 up &&
    ip -n "$h" addr add "198.18.50.$((10 + i))/24" dev eth0 &&
    ip -n "$h" addr add "198.19.50.$((10 + i))/24" dev eth1 &&
    ip -n "$h" link set eth0 up && ip -n "$h" link set eth1 up ||
    { echo "FAILED: cannot set up the links of $h"; exit 1; }
done
echo "hosts ${p}h0, ${p}h1: eth0 198.18.50.1x/24, eth1 198.19.50.1x/24"

tx() { # host interface
  ip netns exec "${p}h$1" cat "/sys/class/net/$2/statistics/tx_bytes"
}
snap() { # file
  echo "$(tx 0 eth0) $(tx 0 eth1) $(tx 1 eth0) $(tx 1 eth1)" >"$1"
}

fail=0
port=29500
# check LABEL: the job's bytes crossed eth1 on both hosts, not eth0
check() {
  read -r a00 a01 a10 a11 <"$work/before"
  read -r b00 b01 b10 b11 <"$work/after"
  e0=$((b00 - a00)) e1=$((b01 - a01)) f0=$((b10 - a10)) f1=$((b11 - a11))
  echo "[$1] tx bytes: host 0 eth0 +$e0 eth1 +$e1; host 1 eth0 +$f0 eth1 +$f1"
  min=$((4 << 20)) max=$((256 << 10))
  if [ $e1 -lt $min ] || [ $f1 -lt $min ] || [ $e0 -ge $max ] ||
    [ $f0 -ge $max ]; then
    echo "[$1] FAILED: the job's traffic must cross eth1 (at least $min bytes sent by each host) and not eth0 (under $max)"
    fail=1
  fi
}

# run_master LABEL IF0 IF1: one rank per host through MASTER_ADDR on eth0
run_master() {
  label=$1
  port=$((port + 1))
  for r in 0 1; do
    eval "spec=\$$((r + 2))"
    env BRAID_SOCKET_IFNAME="$spec" RANK=$r WORLD_SIZE=2 \
      MASTER_ADDR=198.18.50.10 MASTER_PORT=$port BRAID_TRANSPORT=tcp \
      BRAID_TIMEOUT=20 timeout -k 5 60 ip netns exec "${p}h$r" "$job" \
      >"$work/r$r.out" 2>&1 &
    eval "pid$r=\$!"
  done
  wait "$pid0"
  s0=$?
  wait "$pid1"
  s1=$?
  sed "s/^/[$label r0] /" "$work/r0.out"
  sed "s/^/[$label r1] /" "$work/r1.out"
  echo "[$label] exit codes: rank 0 $s0, rank 1 $s1"
}

for spec in eth1 =eth1 ^eth0; do
  snap "$work/before"
  run_master "master $spec" "$spec" "$spec"
  snap "$work/after"
  if [ "$s0" != 0 ] || [ "$s1" != 0 ]; then
    echo "[master $spec] FAILED: a rank failed (124: timed out)"
    fail=1
  else
    check "master $spec"
  fi
done

if [ -n "$braidrun" ]; then
  snap "$work/before"
  BRAID_SOCKET_IFNAME=eth0 BRAID_TRANSPORT=tcp BRAID_TIMEOUT=20 \
    timeout -k 5 90 ip netns exec "${p}h0" "$braidrun" --timeout 60 \
    --hosts "${p}h0:1,${p}h1:1" -x BRAID_SOCKET_IFNAME=eth1 "$job" \
    >"$work/br.out" 2>&1
  st=$?
  snap "$work/after"
  sed "s/^/[braidrun] /" "$work/br.out"
  if [ $st != 0 ]; then
    echo "[braidrun] FAILED: braidrun exited $st"
    fail=1
  else
    check braidrun
  fi
fi

for spec in braid-nope =nope; do
  t0=$(date +%s)
  run_master "nomatch $spec" "$spec" "$spec"
  t1=$(date +%s)
  for r in 0 1; do
    eval "st=\$s$r"
    if [ "$st" = 0 ]; then
      echo "[nomatch $spec] FAILED: rank $r joined the job although BRAID_SOCKET_IFNAME=$spec matches no interface"
      fail=1
    elif ! grep -q "BRAID_SOCKET_IFNAME=$spec matches no interface.*eth1 198.19.50.1$r" "$work/r$r.out"; then
      echo "[nomatch $spec] FAILED: rank $r's error does not name BRAID_SOCKET_IFNAME=$spec and the interfaces up"
      fail=1
    fi
  done
  if [ $((t1 - t0)) -gt 15 ]; then
    echo "[nomatch $spec] FAILED: took $((t1 - t0)) s; the ranks must fail at once"
    fail=1
  fi
done

if [ -n "$doctor" ]; then
  for spec in eth1 ^eth0; do
    env BRAID_SOCKET_IFNAME="$spec" RANK=1 WORLD_SIZE=2 \
      MASTER_ADDR=198.18.50.10 MASTER_PORT=29500 timeout -k 5 60 \
      ip netns exec "${p}h1" "$doctor" >"$work/doc.out" 2>&1
    line=$(grep "^[a-z]* *net " "$work/doc.out")
    echo "[doctor $spec] $line"
    case "$line" in
    ok*"use eth1 198.19.50.11 "*) ;;
    *)
      echo "[doctor $spec] FAILED: braid-doctor must report eth1 198.19.50.11, the address the ranks listen on"
      fail=1
      ;;
    esac
  done
fi

[ $fail = 0 ] || exit 1
echo "netns ifname: the job's traffic went where BRAID_SOCKET_IFNAME said; a name matching nothing failed every rank naming the variable"
exit 0
