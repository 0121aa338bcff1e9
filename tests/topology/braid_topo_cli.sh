#!/bin/sh
# braid-topo end to end: models, show, path, convert, render.
#   braid_topo_cli.sh BRAID_TOPO WORKDIR AZURE_DIR
# Exit 1 on a failure; 77 (ctest: skipped) when the convert checks (no
# AZURE_DIR) or the svg and png renders (no Graphviz) could not run.
set -u
tool=$1
work=$2
azure=$3
mkdir -p "$work"
fail=0
skipped=
check() { # description, command...
  d=$1
  shift
  if "$@" >"$work/out" 2>"$work/err"; then
    echo "ok   $d"
  else
    echo "FAIL $d"
    cat "$work/out" "$work/err"
    fail=1
  fi
}
has() { grep -q -- "$1" "$work/out" || { echo "FAIL: output lacks '$1'"; cat "$work/out"; fail=1; }; }

check "models" "$tool" models
has "dgx-h100"
has "DGX-A100 *8 GPU, 8 NIC"
check "show dgx1-v100" "$tool" show --machine dgx1-v100
has "GPU0  X     NV1   NV1   NV2   NV2"
check "path" "$tool" path GPU0 GPU5 --machine dgx1-v100
has "NVB, 50.00 GB/s"
check "show a 4-host cluster" "$tool" show --machine dgx-h100 --hosts 4 --nic-bw 50
has "4 hosts, 32 GPU"
check "show live" "$tool" show
has "CPU0 NUMA"
# refuse WORDS ARGS...: braid-topo ARGS exits 2 and says WORDS
refuse() {
  w=$1
  shift
  "$tool" "$@" >"$work/out" 2>&1
  rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$w" "$work/out"; then
    echo "FAIL braid-topo $*: exit $rc, expected 2 with '$w'"
    cat "$work/out"
    fail=1
  else
    echo "ok   braid-topo $* refused"
  fi
}
# options and words a command does not read are mistakes, not ignored
refuse "unexpected argument 'extra'" show extra
refuse "takes no -o" show -o x.svg
refuse "give --hosts too" show --machine dgx-h100 --nic-bw 50
refuse "takes no --machine" convert --from a.xml --to b.topo --machine dgx1-v100
refuse "takes 2 names, given 1" path GPU0 --machine dgx1-v100
if "$tool" show --file "$work/missing.xml" >"$work/out" 2>&1; then
  echo "FAIL a missing file is an error"
  fail=1
else
  has "missing.xml"
fi

if [ -d "$azure" ]; then
  check "convert NCCL -> braid" "$tool" convert --from "$azure/ndv4-topo.xml" --to "$work/ndv4.topo"
  check "convert braid -> NCCL" "$tool" convert --from "$work/ndv4.topo" --to "$work/ndv4.xml"
  check "convert NCCL -> hwloc" "$tool" convert --from "$work/ndv4.xml" --to "$work/ndv4-hwloc.xml" --format hwloc
  check "show the hwloc file" "$tool" show --file "$work/ndv4-hwloc.xml"
  has "8 GPU, 8 NIC, 4 NUMA node, 4 PCI switch"
  grep -q "<topology" "$work/ndv4-hwloc.xml" || { echo "FAIL not hwloc XML"; fail=1; }
else
  skipped="$skipped convert"
  echo "SKIP convert: $azure is missing (clone shared/ beside the repository)"
fi

if command -v dot >/dev/null 2>&1; then
  check "render svg" "$tool" render --format svg -o "$work/a100.svg" --machine dgx-a100
  head -c 200 "$work/a100.svg" | grep -q "<?xml" && grep -q "<svg" "$work/a100.svg" &&
    grep -q "NVS0" "$work/a100.svg" || { echo "FAIL not an SVG of the machine"; fail=1; }
  check "render png" "$tool" render --format png -o "$work/v100.png" --machine dgx1-v100
  magic=$(head -c 8 "$work/v100.png" | od -An -tx1 | tr -d ' \n')
  [ "$magic" = "89504e470d0a1a0a" ] || { echo "FAIL not a PNG ($magic)"; fail=1; }
  # a name with quotes and a backslash, through the braid writer and both
  # pictures (the picture of the machine and of a schedule on it)
  if [ -f "$work/ndv4.topo" ]; then
    sed 's/^name .*/name "Lab \\"A\\" \\\\ box"/' "$work/ndv4.topo" >"$work/quoted.topo"
    check "convert a quoted name" "$tool" convert --from "$work/quoted.topo" --to "$work/quoted2.topo"
    check "render a quoted name" "$tool" render --format svg -o "$work/quoted.svg" --file "$work/quoted2.topo"
    check "render a schedule on it" "$tool" schedule --file "$work/quoted2.topo" --coll allreduce --size 1M --render svg -o "$work/quoted-s.svg"
    grep -q 'Lab &quot;A&quot; \\ box' "$work/quoted.svg" || { echo "FAIL quoted name in the picture"; fail=1; }
  fi
else
  skipped="$skipped render"
  echo "SKIP render: Graphviz 'dot' is not installed (svg and png not checked)"
fi
# DOT text is braid-topo's own, Graphviz or not
check "render dot" "$tool" render --format dot -o "$work/live.dot"
grep -q "^graph braid_topology" "$work/live.dot" || { echo "FAIL dot text"; fail=1; }
[ $fail = 0 ] || exit 1
[ -z "$skipped" ] || exit 77
exit 0
