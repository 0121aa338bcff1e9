#!/bin/sh
# Network-namespace "hosts" for multi-host tests on one machine.
#
#   netns.sh up N [--rate RATE] [--loss PCT] [--prefix P]
#       Creates N hosts, namespaces ${P}h0 .. ${P}h(N-1), each with one
#       interface eth0 (198.18.0.(10+i)/15, the range reserved for network
#       benchmarks) joined by veth pairs to a bridge in namespace ${P}sw.
#       --rate: token-bucket limit (tc tbf) on every host's egress, e.g. 1gbit.
#       --loss: nftables rule dropping PCT% of each host's outgoing packets at
#       random (numgen random mod 100 < PCT).
#       --root: also joins this (the launching) namespace to the bridge, as
#       interface ${P}root with 198.18.0.1/15, so that a launcher here (its
#       rendezvous service) is reachable from the hosts:
#         netns.sh up 2 --root
#         BRAID_SOCKET_IFNAME=braid-root braidrun -x BRAID_SOCKET_IFNAME=eth0 \
#           --hosts braid-h0:2,braid-h1:2 prog
#       (braidrun's root listens on braid-root; -x gives the ranks, whose
#       namespaces have eth0, their own value.)
#   netns.sh down [--prefix P]     removes every namespace named ${P}*.
#   netns.sh exec I [--prefix P] CMD...   runs CMD in host I.
#   netns.sh addr I                prints host I's address.
#
# P defaults to "braid-" (hosts braid-h0, braid-h1, ...). "up" removes what a
# previous run left under the same prefix, and cleans up after itself when a
# step fails. Needs root, ip (iproute2), and for the options tc and nft.
# Exit codes: 0 done, 77 namespaces cannot be created here, 1 other failure.
set -u

PREFIX=braid-
die() { echo "netns.sh: $*" >&2; exit 1; }

addr_of() { echo "198.18.0.$((10 + $1))"; }

down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    case "$ns" in
    "${PREFIX}"h[0-9]* | "${PREFIX}sw") ip netns del "$ns" 2>/dev/null ;;
    esac
  done
  return 0
}

can_netns() {
  if [ "$(id -u)" != 0 ]; then
    echo "netns.sh: SKIP: network namespaces need root (uid $(id -u))" >&2
    return 1
  fi
  if ! command -v ip >/dev/null 2>&1; then
    echo "netns.sh: SKIP: no 'ip' command (install iproute2)" >&2
    return 1
  fi
  probe="${PREFIX}probe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "netns.sh: SKIP: cannot create a network namespace here" >&2
    return 1
  fi
  ip netns del "$probe"
  return 0
}

up() {
  n=$1
  shift
  rate=""
  loss=""
  root=""
  while [ $# -gt 0 ]; do
    case "$1" in
    --rate) rate=$2; shift 2 ;;
    --loss) loss=$2; shift 2 ;;
    --prefix) PREFIX=$2; shift 2 ;;
    --root) root=1; shift ;;
    *) die "up: unknown option '$1'" ;;
    esac
  done
  case "$n" in
  [1-9] | [1-9][0-9]) ;;
  *) die "up: host count '$n' is not a number in [1, 99]" ;;
  esac
  can_netns || exit 77
  if [ -n "$rate" ] && ! command -v tc >/dev/null 2>&1; then
    die "--rate needs tc (iproute2)"
  fi
  if [ -n "$loss" ] && ! command -v nft >/dev/null 2>&1; then
    die "--loss needs nft (nftables)"
  fi
  down
  trap 'down; exit 1' INT TERM
  sw="${PREFIX}sw"
  ip netns add "$sw" || { down; die "cannot create namespace $sw"; }
  ip -n "$sw" link add br0 type bridge || { down; die "no bridge support"; }
  ip -n "$sw" link set br0 up
  ip -n "$sw" link set lo up
  i=0
  while [ "$i" -lt "$n" ]; do
    h="${PREFIX}h$i"
    ip netns add "$h" || { down; die "cannot create namespace $h"; }
    # Create the pair inside the switch namespace, then move one end.
    ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$h" ||
      { down; die "cannot create the veth pair for $h"; }
    ip -n "$sw" link set "p$i" master br0 up
    ip -n "$h" link set lo up
    ip -n "$h" addr add "$(addr_of "$i")/15" dev eth0
    ip -n "$h" link set eth0 up
    if [ -n "$rate" ]; then
      ip netns exec "$h" tc qdisc add dev eth0 root tbf rate "$rate" \
        burst 256kb latency 100ms ||
        { down; die "tc tbf rate $rate failed on $h"; }
    fi
    if [ -n "$loss" ]; then
      ip netns exec "$h" nft -f - <<EOF || { down; die "nft loss rule failed on $h"; }
table inet braid_loss {
  chain out {
    type filter hook output priority 0; policy accept;
    oifname "eth0" numgen random mod 100 < $loss counter drop
  }
}
EOF
    fi
    i=$((i + 1))
  done
  if [ -n "$root" ]; then
    rl="${PREFIX}root"
    [ ${#rl} -le 15 ] || { down; die "--root: interface name $rl is too long"; }
    ip link del "$rl" 2>/dev/null
    ip link add "$rl" type veth peer name root netns "$sw" ||
      { down; die "cannot create the root link $rl"; }
    ip -n "$sw" link set root master br0 up
    ip addr add 198.18.0.1/15 dev "$rl" && ip link set "$rl" up ||
      { down; die "cannot address $rl"; }
  fi
  trap - INT TERM
  echo "netns.sh: $n hosts up (${PREFIX}h0..${PREFIX}h$((n - 1)))${rate:+, rate $rate}${loss:+, loss $loss%}${root:+, this namespace on ${PREFIX}root}"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
up)
  [ $# -ge 1 ] || die "usage: netns.sh up N [--rate R] [--loss PCT] [--prefix P]"
  up "$@"
  ;;
down)
  [ "${1:-}" = --prefix ] && PREFIX=$2
  down
  ;;
exec)
  [ $# -ge 2 ] || die "usage: netns.sh exec I [--prefix P] CMD..."
  i=$1
  shift
  if [ "$1" = --prefix ]; then PREFIX=$2; shift 2; fi
  exec ip netns exec "${PREFIX}h$i" "$@"
  ;;
addr)
  [ $# -ge 1 ] || die "usage: netns.sh addr I"
  addr_of "$1"
  ;;
*)
  die "usage: netns.sh up N [--rate R] [--loss PCT] [--prefix P] | down | exec I CMD... | addr I"
  ;;
esac
