#!/usr/bin/env bash
# The layering of the includes, then clang-format and clang-tidy over
# braid's own C sources. Needs a configured build directory with
# compile_commands.json (default: build). Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
echo "== includes and layering (DESIGN.md section 2)"
tests/layering/check_includes.sh
files=$(git ls-files '*.c' '*.h' '*.cc' 2>/dev/null || find include src collectives transports device topology tools perf trainer tests -name '*.[ch]')
echo "== clang-format ($(echo "$files" | wc -l) files)"
# one process for all files (one per file spent 20 s starting them); the
# findings name file and line
# shellcheck disable=SC2086
clang-format --dry-run -Werror $files || { echo "run: clang-format -i <file>"; exit 1; }

# clang-tidy on the library and tools (the code users run).
lib=$(git ls-files 'src/*.c' 'collectives/*.c' 'transports/*.c' 'transports/*/*.c' 'device/*.c' \
  'topology/*.c' 'tools/*.c' 2>/dev/null)
# A source built into several targets (the library and a test that compiles
# it directly) has one entry per target in compile_commands.json, and
# clang-tidy analyses every entry: one entry per file, the library's first.
db=$(mktemp -d)
trap 'rm -rf "$db"' EXIT
python3 - "$build/compile_commands.json" "$db/compile_commands.json" <<'PY'
import json, sys
entries = json.load(open(sys.argv[1]))
entries.sort(key=lambda e: "braid_obj.dir" not in e.get("command", e.get("output", "")))
seen, keep = set(), []
for e in entries:
    if e["file"] not in seen:
        seen.add(e["file"])
        keep.append(e)
json.dump(keep, open(sys.argv[2], "w"))
PY
echo "== clang-tidy ($(echo "$lib" | wc -w) files, -j$(nproc))"
# Findings make clang-tidy exit non-zero (WarningsAsErrors), and so does a
# file it could not analyse: either fails the lint.
log="$build/clang-tidy.log"
status=0
echo "$lib" | xargs -P "$(nproc)" -n 1 clang-tidy -p "$db" --quiet >"$log" 2>&1 ||
  status=$?
if grep -E "(warning|error):" "$log"; then
  echo "clang-tidy found the above (whole output: $log)"
  exit 1
fi
if [ "$status" -ne 0 ]; then
  tail -n 30 "$log"
  echo "clang-tidy failed (exit $status; whole output: $log)"
  exit 1
fi
echo "== lint clean"
