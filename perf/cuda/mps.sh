# shellcheck shell=bash disable=SC2034 # MPS_*: read by the scripts that source this
# An MPS control daemon of one's own, for perf/cuda/run_device.sh and
# perf/cuda/device_kit.sh (sourced, not run). Several ranks sharing a GPU
# run side by side only under MPS; without it the GPU runs one process at a
# time and every hand-over between ranks waits for a switch
# (docs/PERFORMANCE.md, "Figures").
#
#   mps_start DIR   starts nvidia-cuda-mps-control -d with its pipe and log
#                   folders under DIR and exports CUDA_MPS_PIPE_DIRECTORY and
#                   CUDA_MPS_LOG_DIRECTORY, so that the processes started
#                   after become its clients. Status 0 when it runs; else 1
#                   and MPS_WHY says why (no control program, or -d failed).
#   mps_stop        quits that daemon (if any) and unsets the two variables.
#
# MPS_CTL: the control program (found on PATH or in /usr/local/nvidia/bin).
# MPS_UP: set while the daemon of mps_start runs.

MPS_CTL=${MPS_CTL:-$(command -v nvidia-cuda-mps-control ||
  ls /usr/local/nvidia/bin/nvidia-cuda-mps-control 2>/dev/null || true)}
MPS_UP=
MPS_WHY=

mps_start() {
  local dir=$1
  if [ -z "$MPS_CTL" ]; then
    MPS_WHY="no nvidia-cuda-mps-control on this machine"
    return 1
  fi
  export CUDA_MPS_PIPE_DIRECTORY=$dir/mps-pipe
  export CUDA_MPS_LOG_DIRECTORY=$dir/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if ! "$MPS_CTL" -d; then
    MPS_WHY="nvidia-cuda-mps-control -d failed"
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    return 1
  fi
  MPS_UP=1
  echo "== MPS control daemon started ($MPS_CTL, pipe $CUDA_MPS_PIPE_DIRECTORY)" >&2
}

mps_stop() {
  if [ -n "$MPS_UP" ]; then
    echo quit | "$MPS_CTL" >/dev/null 2>&1 || true
    MPS_UP=
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
