#!/usr/bin/env bash
# Device calls plan on the ranks' GPUs: four ranks on four emulated GPUs
# placed (by bus id) on GPU0-3 of the DGX-1 V100 model given as
# BRAID_TOPO_FILE. The correctness matrix must be exact, every rank must say
# it plans on its GPUs, and the topology-aware generators must have run for
# real: multi-ring and tree packing chosen by the selector, hybrid
# NVLink+PCIe where BRAID_ALGO names it (the runtime does not choose it by
# itself yet: docs/SCHEDULES.md §4), its host-routed channels through
# pinned host memory over shm rather than CUDA IPC. The last run gives CUDA
# IPC larger slots (BRAID_CUDA_BUFFSIZE=1M: 128 KiB slices) than the host
# transports' (BRAID_BUFFSIZE=64K: 8 KiB): hybrid's NVLink channels and its
# host-routed ones then cut one call into slices of two sizes.
# usage: run_gpu_view.sh BRAIDRUN MATRIX_BLOCKING MATRIX_STREAM MACHINES_DIR
#            [LARGE]
# LARGE (default 262147) is the largest element count: calls that large
# make plans of several channels.
set -u
braidrun=$1 blocking=$2 stream=$3 machines=$4 large=${5:-262147}
log=$(mktemp /tmp/braid-gpu-view.XXXXXX)
trap 'rm -f "$log"' EXIT
export BRAID_TOPO_FILE="$machines/dgx1-v100.topo"
export CUDA_EMU_BUSID=0000:06:00.0,0000:07:00.0,0000:0a:00.0,0000:0b:00.0
export BRAID_DEBUG=TRACE BRAID_DEBUG_SUBSYS=SCHED,INIT BRAID_TIMEOUT=120
fail=0
# 8 channels leave room for the 4-ring and 6-ring plans, 2 for tree packing
runs=0
for run in "8 - $blocking 0,7,1023,$large - -" \
  "2 - $stream 0,7,1023,$large - -" "8 hybrid $blocking 7,$large - -" \
  "8 hybrid $blocking 7,65539 64K 1M"; do
  set -- $run
  algo=$2 bs=$5 cbs=$6
  [ "$algo" = - ] && algo=
  [ "$bs" = - ] && bs=
  [ "$cbs" = - ] && cbs=
  runs=$((runs + 1))
  echo "== BRAID_NCHANNELS=$1 BRAID_ALGO=$algo BRAID_BUFFSIZE=$bs" \
    "BRAID_CUDA_BUFFSIZE=$cbs $(basename "$3") --counts $4"
  if ! BRAID_NCHANNELS=$1 BRAID_ALGO=$algo BRAID_BUFFSIZE=$bs \
      BRAID_CUDA_BUFFSIZE=$cbs "$braidrun" -n 4 --timeout 600 "$3" \
      --counts "$4" >>"$log" 2>&1; then
    grep -v "TRACE\|INFO" "$log" | tail -20
    echo "FAILED: the matrix on the ranks' GPUs (exit above)"
    fail=1
  fi
done
grep "passed" "$log"
planned=$(grep -c "schedules for the ranks' GPUs" "$log")
if [ "$planned" != $((4 * runs)) ]; then
  echo "FAILED: $planned of $((4 * runs)) rank setups planned on the ranks' GPUs"
  fail=1
fi
for algo in multiring hybrid treepack; do
  n=$(grep -c "algorithm $algo," "$log")
  echo "$algo: $n schedules"
  if [ "$n" = 0 ]; then
    echo "FAILED: the selector never ran $algo on the GPUs"
    fail=1
  fi
done
# hybrid's host-routed channels: every rank reached both its ring
# neighbours through host memory (a rank logs each such peer once per
# communicator); the plain runs route nothing through the host
hosted=$(grep -c "host-routed channels reach rank" "$log")
echo "host-routed peers: $hosted"
if [ "$hosted" -lt 16 ]; then
  echo "FAILED: hybrid's host channels reached $hosted peers through host memory (want >= 16: two per rank in each hybrid run)"
  fail=1
fi
[ $fail = 0 ] && echo "gpu view: every run exact, topology-aware plans ran"
exit $fail
