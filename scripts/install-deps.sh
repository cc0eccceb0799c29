#!/usr/bin/env bash
# Installs every Debian package Strata needs to build, test and run.
# Idempotent: packages already present are not touched, and apt-get is not
# called at all when nothing is missing.
set -euo pipefail

PACKAGES=(
  # build
  cmake ninja-build ccache g++ git
  # MLIR / LLVM 19
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
  # frontends and tools
  libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  # tests
  libgtest-dev libgmock-dev python3
  # the HTML plan report's browser test (tests/report; skipped without it)
  chromium
  # runtime: CPU kernels and MPI
  # libdnnl-dev's CMake package config requires OpenCL (only a Recommends)
  libdnnl-dev ocl-icd-opencl-dev libopenmpi-dev openmpi-bin
  # checkpoint checksums (CRC-32)
  zlib1g-dev
  # the independent reference implementation used by end-to-end tests and benchmarks
  python3-torch python3-numpy
  # ONNX import (optional at configure time) and the ONNX backend node tests
  libonnx-dev libonnx-testdata libprotobuf-dev protobuf-compiler
  # fuzzing (scripts/fuzz.sh): libFuzzer with ASan + UBSan
  clang-19 libclang-rt-19-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
