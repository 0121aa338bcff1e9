#!/bin/sh
# 64 MiB float32 sum allreduce between two network-namespace hosts
# (netns.sh), one rank per host, on the same veth/bridge path:
#   braid tcp        braidrun --hosts h0:1,h1:1 braid-perf, BRAID_TRANSPORT=tcp
#   braid ofi        the same with BRAID_TRANSPORT=ofi, provider tcp;ofi_rxm
#   ompi tcp         mpirun (launched inside h0, orted started in h1 through
#                    an ssh-like agent that runs `ip netns exec`)
#                    braid-mpi-bench, pml ob1, btl tcp,self on eth0
#   raw tcp 1-way    netns_xfer --mode rawtcp: one plain TCP stream h0 -> h1
#   raw tcp bidir    two plain TCP streams at once, h0 -> h1 and h1 -> h0
#                    (python3), what a 2-rank allreduce needs of the link
# Everything runs --repeat times (default 3); the best time of each path is
# kept. One table: time, busbw (GB/s, 10^9 bytes/s) and braid's busbw over
# each path's.
#
#   bench_allreduce.sh [-B BUILDDIR] [--repeat N] [--iters N] [--warmup N]
#                      [--bytes SIZE]
#   bench_allreduce.sh --mpirun-check [-B BUILDDIR] [--counts LIST]
#
# --mpirun-check: instead of the benchmark, the collective correctness matrix
# (tests/core/coll_matrix) under Open MPI's mpirun, one rank per namespace
# host, braid's rendezvous through MASTER_ADDR/MASTER_PORT on host 0 (ctest
# netns_mpirun). BUILDDIR defaults to ../../build next to this script. Every
# command is bounded by timeout. Exit: 0 ok, 77 namespaces cannot be made
# here (or a needed program is missing), 1 failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
repeat=3
iters=5
warmup=2
bytes=64M
mode=bench
counts=0,1,7,1023
while [ $# -gt 0 ]; do
  case "$1" in
  -B) build=$2; shift 2 ;;
  --repeat) repeat=$2; shift 2 ;;
  --iters) iters=$2; shift 2 ;;
  --warmup) warmup=$2; shift 2 ;;
  --bytes) bytes=$2; shift 2 ;;
  --counts) counts=$2; shift 2 ;;
  --mpirun-check) mode=check; shift ;;
  -h | --help)
    sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  *) echo "bench_allreduce.sh: unknown option '$1' (see --help)" >&2; exit 1 ;;
  esac
done
for v in "$repeat" "$iters" "$warmup"; do
  case "$v" in
  '' | *[!0-9]* | 0*) echo "bench_allreduce.sh: '$v' is not a positive count" >&2; exit 1 ;;
  esac
done
case "$bytes" in
*[Kk]) nbytes=$((${bytes%?} * 1024)) ;;
*[Mm]) nbytes=$((${bytes%?} * 1048576)) ;;
*[Gg]) nbytes=$((${bytes%?} * 1073741824)) ;;
*) nbytes=$bytes ;;
esac
case "$nbytes" in
'' | *[!0-9]* | 0*) echo "bench_allreduce.sh: --bytes '$bytes' is not a size" >&2; exit 1 ;;
esac
[ $((nbytes % 4)) = 0 ] || { echo "bench_allreduce.sh: --bytes must be a multiple of 4 (float32)" >&2; exit 1; }

braidrun="$build/tools/braidrun"
perf="$build/perf/braid-perf"
xfer="$build/tests/netns/netns_xfer"
mpibench="$build/perf/compare/braid-mpi-bench"
matrix="$build/tests/core/coll_matrix"
need() {
  for p in "$@"; do
    [ -x "$p" ] || { echo "SKIP: $p is not built (build dir $build)"; exit 77; }
  done
}

prefix="nb$$-"
netns="$here/netns.sh"
work=$(mktemp -d /tmp/braid-netbench.XXXXXX)
cleanup() { sh "$netns" down --prefix "$prefix"; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

a0=$(sh "$netns" addr 0)
a1=$(sh "$netns" addr 1)
port=29517

# ssh-like agent for Open MPI's rsh launcher: "agent HOST CMD..." runs CMD
# inside the namespace host whose address (or name) is HOST.
cat >"$work/agent.sh" <<EOF
#!/bin/sh
host=\$1
shift
case "\$host" in
$a0 | ${prefix}h0) ns=${prefix}h0 ;;
$a1 | ${prefix}h1) ns=${prefix}h1 ;;
*) echo "agent: unknown host '\$host'" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF
chmod +x "$work/agent.sh"

have_mpirun() { command -v mpirun >/dev/null 2>&1; }
mpirun_2() { # seconds, then the program and its arguments
  t=$1
  shift
  timeout -k 5 "$t" ip netns exec "${prefix}h0" mpirun --allow-run-as-root \
    --oversubscribe --bind-to none -np 2 -H "$a0,$a1" \
    --mca plm_rsh_agent "$work/agent.sh" \
    --mca oob_tcp_if_include eth0 \
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include eth0 \
    "$@"
}

if [ "$mode" = check ]; then
  need "$matrix"
  have_mpirun || { echo "SKIP: no mpirun (Debian openmpi-bin)"; exit 77; }
fi
if [ "$mode" = bench ]; then
  need "$braidrun" "$perf" "$xfer"
fi

sh "$netns" up 2 --prefix "$prefix"
st=$?
if [ $st = 77 ]; then
  echo "SKIP: network namespaces cannot be created here (see above)"
  exit 77
fi
[ $st = 0 ] || { echo "FAILED: netns.sh up 2"; exit 1; }

if [ "$mode" = check ]; then
  echo "mpirun -H $a0,$a1 (hosts ${prefix}h0, ${prefix}h1) coll_matrix --counts $counts"
  # Open MPI passes only the variables named with -x to the remote host.
  xs="-x MASTER_ADDR -x MASTER_PORT -x BRAID_TIMEOUT"
  for v in BRAID_TRANSPORT BRAID_OFI_PROVIDER BRAID_DEBUG BRAID_DEBUG_SUBSYS; do
    eval "[ -n \"\${$v:-}\" ]" && xs="$xs -x $v"
  done
  MASTER_ADDR=$a0 MASTER_PORT=$port BRAID_TIMEOUT=60 \
    mpirun_2 170 $xs "$matrix" --counts "$counts" >"$work/m.out" 2>&1
  st=$?
  grep -v '^\[[0-9]*\] [./]' "$work/m.out" | tail -20
  ranks=$(grep -c 'coll_matrix rank [0-9]* of 2: [0-9]* passed, 0 failed' "$work/m.out")
  if [ $st != 0 ]; then
    echo "FAILED: mpirun exit $st (124: timed out)"
    exit 1
  fi
  # Open MPI prints the output of both ranks; rank 0's summary at least.
  [ "$ranks" -ge 1 ] || { echo "FAILED: no passing summary line"; exit 1; }
  echo "mpirun across namespaces: coll_matrix passed"
  exit 0
fi

awk '{print "load average at start: " $1 ", " $2 ", " $3}' /proc/loadavg
log="$work/bench.log"
: >"$log"
best_set() { # name time_us [busbw]: keep the smaller time
  # busbw of a 2-rank allreduce: bytes / time x 2(n-1)/n = bytes / time.
  set -- "$1" "$2" "${3:-$(awk -v b="$nbytes" -v t="$2" 'BEGIN{printf "%.3f", b / t / 1e3}')}"
  f="$work/best.$1"
  if [ ! -s "$f" ] || awk -v t="$2" '{exit !(t < $1)}' "$f"; then
    echo "$2 $3" >"$f"
  fi
  echo "$2 $3" >>"$work/all.$1"
}

braid_run() { # name transport
  BRAID_TRANSPORT=$2 BRAID_OFI_PROVIDER="tcp;ofi_rxm" BRAID_TIMEOUT=60 \
    timeout -k 5 170 ip netns exec "${prefix}h0" "$braidrun" \
    --hosts "${prefix}h0:1,${prefix}h1:1" --timeout 160 \
    "$perf" all_reduce -b "$nbytes" -e "$nbytes" -n "$iters" -w "$warmup" \
    -c 1 -y 1 >"$work/o" 2>&1
  st=$?
  sed "s/^/[$1] /" "$work/o" >>"$log"
  # [0] size count type redop root time algbw busbw #wrong (out-of-place)
  line=$(awk -v n="$nbytes" '$1 == "[0]" && $2 == n {print $7, $9, $10; exit}' "$work/o")
  if [ $st != 0 ] || [ -z "$line" ]; then
    echo "[$1] FAILED (exit $st)"
    tail -5 "$work/o"
    return 1
  fi
  set -- "$1" $line
  [ "$4" = 0 ] || { echo "[$1] FAILED: $4 wrong elements"; return 1; }
  best_set "$1" "$2"
}

mpi_run() {
  mpirun_2 170 "$mpibench" allreduce "$nbytes" "$nbytes" "$iters" "$warmup" \
    >"$work/o" 2>&1
  st=$?
  sed "s/^/[ompi-tcp] /" "$work/o" >>"$log"
  # size_bytes count time_us algbw busbw
  line=$(awk -v n="$nbytes" '$1 == n {print $3; exit}' "$work/o")
  if [ $st != 0 ] || [ -z "$line" ]; then
    echo "[ompi-tcp] FAILED (exit $st)"
    tail -5 "$work/o"
    return 1
  fi
  best_set ompi-tcp "$line"
}

raw_run() {
  rm -f "$work/id"
  timeout -k 5 100 ip netns exec "${prefix}h0" "$xfer" --rank 0 --nranks 2 \
    --idfile "$work/id" --transport tcp --mode rawtcp --bytes "$nbytes" \
    --reps "$iters" >"$work/r0" 2>&1 &
  p0=$!
  timeout -k 5 100 ip netns exec "${prefix}h1" "$xfer" --rank 1 --nranks 2 \
    --idfile "$work/id" --transport tcp --mode rawtcp --bytes "$nbytes" \
    --reps "$iters" >"$work/o" 2>&1
  st=$?
  wait $p0
  s0=$?
  cat "$work/r0" "$work/o" | sed "s/^/[raw-1way] /" >>"$log"
  g=$(sed -n 's/^BEST .*GBps=\([0-9.]*\).*/\1/p' "$work/o")
  if [ $st != 0 ] || [ $s0 != 0 ] || [ -z "$g" ]; then
    echo "[raw-1way] FAILED (exit $s0, $st)"
    tail -3 "$work/r0" "$work/o"
    return 1
  fi
  best_set raw-1way "$(awk -v b="$nbytes" -v g="$g" 'BEGIN{printf "%.1f", b / g / 1e3}')" "$g"
}

# Both directions at once over one connection: each side sends and receives
# N bytes per repetition (a sender thread, the receiver in the main thread),
# after a one-byte handshake; the time is from the handshake to both done.
cat >"$work/bidir.py" <<'EOF'
import socket, sys, threading, time
role, addr, port, n, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
chunk = 1 << 20
if role == "server":
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port)); ls.listen(1); ls.settimeout(60); s, _ = ls.accept()
else:
    s = None
    for _ in range(300):
        try:
            s = socket.create_connection((addr, port), timeout=60); break
        except OSError:
            time.sleep(0.1)
    if s is None:
        sys.exit("bidir: cannot connect to %s:%d" % (addr, port))
s.settimeout(60)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
out = bytearray(b"\x5a" * chunk); inb = bytearray(chunk); mv = memoryview(inb)
def send():
    left = n
    while left:
        k = min(left, chunk); s.sendall(memoryview(out)[:k]); left -= k
def recv_exact(k):
    got = 0
    while got < k:
        r = s.recv_into(mv[got:k], k - got)
        if r == 0:
            sys.exit("bidir: peer closed")
        got += r
best = None
for rep in range(reps):
    if role == "client":
        s.sendall(b"g"); recv_exact(1)
    else:
        recv_exact(1); s.sendall(b"g")
    t0 = time.perf_counter()
    th = threading.Thread(target=send); th.start()
    left = n
    while left:
        k = min(left, chunk); recv_exact(k); left -= k
    th.join()
    t = time.perf_counter() - t0
    best = t if best is None or t < best else best
    if role == "client":
        print("RESULT rep=%d ms=%.1f GBps=%.3f" % (rep, t * 1e3, n / t / 1e9))
if role == "client":
    print("BEST us=%.1f GBps=%.3f" % (best * 1e6, n / best / 1e9))
EOF

bidir_run() {
  timeout -k 5 100 ip netns exec "${prefix}h1" python3 "$work/bidir.py" \
    server "$a1" 29600 "$nbytes" "$iters" >"$work/r1" 2>&1 &
  p1=$!
  timeout -k 5 100 ip netns exec "${prefix}h0" python3 "$work/bidir.py" \
    client "$a1" 29600 "$nbytes" "$iters" >"$work/o" 2>&1
  st=$?
  wait $p1
  s1=$?
  cat "$work/o" "$work/r1" | sed "s/^/[raw-bidir] /" >>"$log"
  line=$(sed -n 's/^BEST us=\([0-9.]*\) GBps=\([0-9.]*\)/\1 \2/p' "$work/o")
  if [ $st != 0 ] || [ $s1 != 0 ] || [ -z "$line" ]; then
    echo "[raw-bidir] FAILED (exit $st, $s1)"
    tail -3 "$work/o" "$work/r1"
    return 1
  fi
  best_set raw-bidir $line
}

fail=0
have_mpi=1
if ! have_mpirun || [ ! -x "$mpibench" ]; then
  echo "note: ompi-tcp skipped (no mpirun or $mpibench not built)"
  have_mpi=0
fi
have_py=1
command -v python3 >/dev/null 2>&1 || { echo "note: raw-bidir skipped (no python3)"; have_py=0; }
r=1
while [ $r -le "$repeat" ]; do
  echo "round $r of $repeat"
  braid_run braid-tcp tcp || fail=1
  braid_run braid-ofi ofi || fail=1
  [ $have_mpi = 1 ] && { mpi_run || fail=1; }
  raw_run || fail=1
  [ $have_py = 1 ] && { bidir_run || fail=1; }
  r=$((r + 1))
done
awk '{print "load average at end: " $1 ", " $2 ", " $3}' /proc/loadavg

echo
echo "allreduce float32 sum, $nbytes bytes, 2 namespace hosts x 1 rank, best of $repeat (x $iters iterations)"
echo "busbw GB/s (10^9 B/s); raw rows: per-direction stream rate, time = one transfer"
echo "ratio = braid busbw / row busbw"
printf '| %-14s | %10s | %7s | %14s | %14s | %-20s |\n' path "time (ms)" busbw "braid-tcp/this" "braid-ofi/this" "all runs (busbw)"
printf '|%s|%s|%s|%s|%s|%s|\n' ---------------- ------------ --------- ---------------- ---------------- ----------------------
bt=$(awk '{print $2}' "$work/best.braid-tcp" 2>/dev/null)
bo=$(awk '{print $2}' "$work/best.braid-ofi" 2>/dev/null)
for p in braid-tcp braid-ofi ompi-tcp raw-1way raw-bidir; do
  [ -s "$work/best.$p" ] || continue
  runs=$(awk '{printf "%s%s", (NR > 1 ? ", " : ""), $2}' "$work/all.$p")
  awk -v p="$p" -v bt="${bt:-0}" -v bo="${bo:-0}" -v runs="$runs" '{
    r1 = (bt > 0 && $2 > 0) ? sprintf("%.2f", bt / $2) : "-";
    r2 = (bo > 0 && $2 > 0) ? sprintf("%.2f", bo / $2) : "-";
    printf "| %-14s | %10.1f | %7.3f | %14s | %14s | %-20s |\n", p, $1 / 1e3, $2, r1, r2, runs
  }' "$work/best.$p"
done
if [ $fail != 0 ]; then
  echo "some runs failed; raw output:"
  cat "$log"
fi
exit $fail
