#!/usr/bin/env bash
# perf/compare/compare.py with a call pattern and busy processes, at one
# tiny size: it exits 0, braid's numbers (braid-bench over shm and TCP) and
# those of every peer that was built reach compare.json, the first call
# alone is kept for the first pattern and the median call for gap:G, and
# no busy process outlives the run.
# Correctness only: no time is compared with anything.
#
#   test_compare_driver.sh <build dir> <compare.py>
set -uo pipefail
build=$1 compare=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() {
  echo "FAILED: $*"
  fails=$((fails + 1))
}

for pattern in first gap:20; do
  out=$T/${pattern%%:*}
  /usr/bin/python3 "$compare" --build "$build" --only braid,ompi,gloo \
    --collectives allreduce,broadcast --points 8 --pattern "$pattern" \
    --busy 1 --repeat 1 --iters-scale 0.05 --timeout 120 --out "$out" \
    >"$T/log" 2>&1
  st=$?
  if [ $st != 0 ]; then
    bad "compare.py --pattern $pattern --busy 1: exit $st"
    cat "$T/log"
    continue
  fi
  if /usr/bin/python3 - "$out/compare.json" "$pattern" <<'EOF'; then
import json, sys
d = json.load(open(sys.argv[1]))
first = sys.argv[2] == "first"
assert d["pattern"] == sys.argv[2] and d["busy"] == 1, "pattern/busy"
peers = {"ompi-shm", "ompi-tcp"} if not any(
    "Open MPI" in s for s in d["skipped"]) else set()
if not any("Gloo" in s for s in d["skipped"]):
    peers.add("gloo-tcp")
for coll in ("allreduce", "broadcast"):
    for lib in {"braid-shm", "braid-tcp"} | peers:
        e = d["results"][coll][lib]["8"]
        assert e["time_us"] > 0, (coll, lib)
        assert ("first_us" in e) == first, (coll, lib, "first_us")
        assert ("median_us" in e) != first, (coll, lib, "median_us")
        if not first:
            assert e["median_us"] > 0, (coll, lib, e["median_us"])
        assert "braid-bench" in e["cmd"] or not lib.startswith("braid"), e
EOF
    ok "compare.py --pattern $pattern --busy 1: every library in compare.json"
  else
    bad "compare.py --pattern $pattern: compare.json"
    cat "$T/log"
  fi
  # compare.log names the busy processes it started.
  pids=$(sed -n 's/^# [0-9]* busy processes: //p' "$out/compare.log")
  left=""
  for p in $pids; do
    kill -0 "$p" 2>/dev/null && left="$left $p"
  done
  if [ -z "$pids" ]; then
    bad "compare.log names no busy process"
  elif [ -n "$left" ]; then
    bad "busy processes left after the run:$left"
  else
    ok "the busy processes ($pids) are gone"
  fi
done

[ $fails = 0 ] || {
  echo "$fails failed"
  exit 1
}
