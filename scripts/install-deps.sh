#!/usr/bin/env bash
# Installs what braid needs from Debian 12's packages, only what is missing.
# Run as root (or with sudo available).
# CUDA is not installed from here: braid uses NVIDIA's toolkit where it is
# (/usr/local/cuda, found by BRAID_CUDA=AUTO) and builds without it elsewhere.
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build pkg-config clang clang-format clang-tidy
  libclang-rt-14-dev
  libcriterion-dev libhwloc-dev hwloc libxml2-dev zlib1g-dev
  libfabric-dev libibverbs-dev
  openmpi-bin libopenmpi-dev libgloo-dev
  libopenblas-dev dataset-fashion-mnist
  graphviz gnuplot-nox
  iproute2 nftables python3 procps
  python3-torch libtorch-dev pybind11-dev
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: everything is installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
