#!/usr/bin/env bash
# The main demo: install what is missing, build, then train the reference
# model for one epoch on 2 ranks over braid and show an allreduce sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/configure.sh demo build
cmake --build build -j"$(nproc)"
echo
echo "== braid-perf: allreduce on 2 ranks over shared memory"
build/tools/braidrun -n 2 build/perf/braid-perf all_reduce -b 8 -e 16M -f 8 -c 1
echo
echo "== the reference trainer: LeNet on Fashion-MNIST, 2 ranks, 1 epoch"
build/tools/braidrun -n 2 build/trainer/braid-trainer --epochs 1
