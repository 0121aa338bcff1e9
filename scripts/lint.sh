#!/usr/bin/env bash
# clang-format and clang-tidy over braid's own C sources. Needs a configured
# build directory with compile_commands.json (default: build). Exits non-zero
# on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
files=$(git ls-files '*.c' '*.h' '*.cc' 2>/dev/null || find include src collectives transports topology tools perf trainer tests -name '*.[ch]')
echo "== clang-format ($(echo "$files" | wc -l) files)"
bad=0
for f in $files; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || { echo "not formatted: $f"; bad=1; }
done
[ $bad -eq 0 ] || { echo "run: clang-format -i <file>"; exit 1; }

# clang-tidy on the library and tools (the code users run).
lib=$(git ls-files 'src/*.c' 'collectives/*.c' 'transports/*.c' 'transports/*/*.c' \
  'topology/*.c' 'tools/*.c' 2>/dev/null)
echo "== clang-tidy ($(echo "$lib" | wc -w) files, -j$(nproc))"
echo "$lib" | xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet 2>/dev/null |
  tee /tmp/braid-tidy.log | grep -E "(warning|error):" && { echo "clang-tidy found the above"; exit 1; }
echo "== lint clean"
