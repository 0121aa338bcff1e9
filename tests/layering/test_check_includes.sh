#!/usr/bin/env bash
# check_includes.sh on small trees made here: a tree within the layering
# passes (and is told that a listed exception it does not use can go); each
# include that breaks it (a collective or a transport reading the settings,
# topology/ including collectives/, a transport including collectives/, the
# public header including an internal one, perf/ reaching into transports/,
# the device layer including a transport, a tool reaching into src/) fails,
# named by file and line; an exception listed in the script is let through
# only for the file it names.
set -euo pipefail
check=$(cd "$(dirname "$0")" && pwd)/check_includes.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

tree() { # tree DIR: a small tree within the layering
  mkdir -p "$1"/{include,src,collectives,topology,transports,perf,device,tools}
  echo '#include <stddef.h>' >"$1/include/braid.h"
  printf '#include "braid.h"\n#include "src/log.h"\n' >"$1/src/config.h"
  echo '/* log */' >"$1/src/log.h"
  echo '' >"$1/src/doctor.h"
  printf '#include "braid.h"\n#include "src/log.h"\n' >"$1/tools/braid-doctor.c"
  printf '#include "topology/topo.h"\n#include "src/log.h"\n' \
    >"$1/collectives/view.c"
  printf '#include "braid.h"\n' >"$1/topology/topo.h"
  printf '#include "src/bootstrap.h"\n' >"$1/transports/shm.c"
  echo '' >"$1/src/bootstrap.h"
  printf '#include "braid.h"\n#include "perf.h"\n' >"$1/perf/perf.c"
  echo '' >"$1/perf/perf.h"
  printf '#include "transports/shm.h"\n#include "collectives/view.h"\n' \
    >"$1/src/comm.c"
  echo '' >"$1/transports/shm.h"
  echo '' >"$1/collectives/view.h"
}

tree "$work/good"
out=$("$check" "$work/good") || fail "a tree within the layering is refused: $out"
grep -qF 'the exception "tools/braid-doctor.c src/doctor.h" is no longer needed' \
  <<<"$out" || fail "an unused exception is not named: $out"
echo "ok: a tree within the layering passes ($out)"

# bad FILE LINE-TEXT EXPECT: appends LINE-TEXT to FILE of a fresh tree and
# expects a refusal naming FILE and its line, and saying EXPECT
bad() {
  local d="$work/bad$RANDOM$RANDOM"
  tree "$d"
  [ -f "$d/$1" ] || : >"$d/$1"
  echo "$2" >>"$d/$1"
  local n
  n=$(wc -l <"$d/$1")
  local out rc=0
  out=$("$check" "$d" 2>&1) || rc=$?
  [ "$rc" = 1 ] || fail "$1 + '$2': exit $rc, not 1: $out"
  grep -qF "$1:$n: $2" <<<"$out" || fail "$1 + '$2' not named at line $n: $out"
  grep -qF "$3" <<<"$out" || fail "$1 + '$2': no '$3' in: $out"
  echo "ok: $1:$n '$2' refused"
}
bad collectives/view.c '#include "src/config.h"' \
  "collectives use of src/ only log.h and bootstrap.h"
bad topology/graph.c '#include "collectives/view.h"' \
  "topology knows nothing of collectives/"
bad transports/shm.c '#include "collectives/view.h"' \
  "transports know nothing of collectives/"
bad include/braid.h '#include "src/log.h"' \
  "the public header includes only include/"
bad perf/perf.c '#include "transports/shm.h"' \
  "perf/ uses only include/braid.h"
bad device/dev.c '#include "transports/shm.h"' \
  "the device layer knows nothing of transports/"
bad topology/graph.c '#include "../src/config.h"' \
  "topology uses of src/ only log.h and bootstrap.h"
# transports read no settings: src/config.h is refused in every one
bad transports/shm.c '#include "src/config.h"' \
  "transports use of src/ only log.h and bootstrap.h"
# listed exceptions: tools/braid-doctor.c may include src/doctor.h, another
# tool may not
d="$work/exc"
tree "$d"
echo '#include "src/doctor.h"' >>"$d/tools/braid-doctor.c"
out=$("$check" "$d") || fail "a listed exception is refused: $out"
bad tools/braid-trace.c '#include "src/doctor.h"' \
  "tools use only include/, the headers of topology/ and collectives/"
echo "ok: the listed exception passes, the same include elsewhere does not"
