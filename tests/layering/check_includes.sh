#!/usr/bin/env bash
# The layering of docs' DESIGN §2, checked on every #include of the tree:
#   include/braid.h   includes nothing of braid but include/
#   src/              may include every layer
#   device/           device, include/; of src/ only log.h and bootstrap.h
#   transports/       transports, device/, include/; of src/ only log.h and
#                     bootstrap.h (settings reach them through what src/
#                     hands them); no collectives/, no topology/
#   collectives/      collectives, topology/topo.h (graph types only),
#                     include/; of src/ only log.h and bootstrap.h
#   topology/         topology, include/; of src/ only log.h and bootstrap.h
#   tools/            tools, topology/ and collectives/ headers, include/;
#                     of src/ only log.h (the message of a failure below)
#   perf/, trainer/, bindings/   their own folder and include/ only
# tests/ may include anything. An include is resolved as the compiler would:
# beside the including file, then from the repository root, then include/,
# then the including file's top folder; one that resolves to no file of the
# tree (a system or generated header) is not braid's to check.
#
# Usage: tests/layering/check_includes.sh [ROOT]   (default: this repository)
# Prints one line per include that breaks the layering (file:line, the
# include, the rule it breaks) and exits 1 when there is any, else 0.
# Known exceptions, each a debt with its issue, are listed below: an entry
# names the including file (a shell pattern) and the header.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"

# FILE-PATTERN HEADER  reason
exceptions='
tools/braid-doctor.c src/doctor.h
'
# braid-doctor runs the library's own preflight.
# An exception that no include uses any more is named (remove it).

dirs=""
for d in include src device collectives topology transports tools perf \
  trainer bindings; do
  [ -d "$d" ] && dirs="$dirs $d"
done
# shellcheck disable=SC2086
files=$(find $dirs -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \
  -o -name '*.cuh' -o -name '*.cc' -o -name '*.cpp' -o -name '*.hpp' \) |
  LC_ALL=C sort)
[ -n "$files" ] || { echo "layering: no sources under $root" >&2; exit 1; }

# shellcheck disable=SC2086
printf '%s\n' "$files" | awk -v exceptions="$exceptions" '
function norm(p,   n, a, out, i, k) {
  n = split(p, a, "/"); k = 0
  for (i = 1; i <= n; i++) {
    if (a[i] == "" || a[i] == ".") continue
    if (a[i] == "..") { if (k > 0) k--; continue }
    out[++k] = a[i]
  }
  p = ""
  for (i = 1; i <= k; i++) p = p (i > 1 ? "/" : "") out[i]
  return p
}
function dirof(p) { sub(/\/[^\/]*$/, "", p); return p }
function top(p) { sub(/\/.*$/, "", p); return p }
function layer(p) { return top(p) }
function resolve(f, h,   c) {
  c = norm(dirof(f) "/" h); if (c in have) return c
  c = norm(h); if (c in have) return c
  c = norm("include/" h); if (c in have) return c
  c = norm(top(f) "/" h); if (c in have) return c
  return ""
}
function lowsrc(t) { return t == "src/log.h" || t == "src/bootstrap.h" }
# why f may not include t ("" when it may)
function breaks(f, t,   lf, lt) {
  lf = layer(f); lt = layer(t)
  if (lt == "include" || lf == lt) return ""
  if (lf == "include") return "the public header includes only include/"
  if (lf == "src") return ""
  if (lf == "device") {
    if (lowsrc(t)) return ""
    if (lt == "src") return "the device layer uses of src/ only log.h and bootstrap.h"
    return "the device layer knows nothing of " lt "/"
  }
  if (lf == "transports") {
    if (lt == "device" || lowsrc(t)) return ""
    if (lt == "src") return "transports use of src/ only log.h and bootstrap.h"
    return "transports know nothing of " lt "/"
  }
  if (lf == "collectives") {
    if (t == "topology/topo.h" || lowsrc(t)) return ""
    if (lt == "topology") return "collectives use of topology/ only topo.h (graph types)"
    if (lt == "src") return "collectives use of src/ only log.h and bootstrap.h"
    return "collectives know nothing of " lt "/"
  }
  if (lf == "topology") {
    if (lowsrc(t)) return ""
    if (lt == "src") return "topology uses of src/ only log.h and bootstrap.h"
    return "topology knows nothing of " lt "/"
  }
  if (lf == "tools")
    return lt == "topology" || lt == "collectives" || t == "src/log.h" ? "" : "tools use only include/, the headers of topology/ and collectives/, and src/log.h"
  if (lf == "perf" || lf == "trainer" || lf == "bindings")
    return lf "/ uses only include/braid.h"
  return ""
}
function excepted(f, t,   i, n, e, pat) {
  for (i = 1; i <= nexc; i++)
    if (match_glob(f, excf[i]) && match_glob(t, exch[i])) { used[i] = 1; return 1 }
  return 0
}
function match_glob(s, g,   re) {
  re = g; gsub(/\./, "\\.", re); gsub(/\*/, ".*", re)
  return s ~ ("^" re "$")
}
BEGIN {
  n = split(exceptions, lines, "\n")
  for (i = 1; i <= n; i++)
    if (split(lines[i], w, " ") == 2) { nexc++; excf[nexc] = w[1]; exch[nexc] = w[2] }
}
{ have[$0] = 1; list[++nf] = $0 }
END {
  bad = 0
  for (i = 1; i <= nf; i++) {
    f = list[i]; ln = 0
    while ((getline line < f) > 0) {
      ln++
      if (line !~ /^[ \t]*#[ \t]*include[ \t]*"/) continue
      h = line; sub(/^[^"]*"/, "", h); sub(/".*$/, "", h)
      t = resolve(f, h)
      if (t == "") continue
      why = breaks(f, t)
      if (why != "" && !excepted(f, t)) {
        printf "%s:%d: #include \"%s\" (%s): %s (DESIGN.md section 2)\n", f, ln, h, t, why
        bad++
      }
    }
    close(f)
  }
  for (i = 1; i <= nexc; i++)
    if (!(i in used) && (excf[i] in have))
      printf "layering: the exception \"%s %s\" is no longer needed: remove it\n", excf[i], exch[i]
  if (bad) { printf "layering: %d include(s) break the layering\n", bad; exit 1 }
  printf "layering: %d files, every include within the layering\n", nf
}'
