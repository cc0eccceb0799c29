#!/usr/bin/env bash
# The GPU check in two halves (docs/gpu-check.md):
#
#   bash scripts/gpu-check.sh prepare [DIR]   # here: build, compile the
#       cases, run their CPU references, carry the launcher's libraries;
#       writes DIR/gpu-check.tar.xz (default DIR: build/gpu-check)
#   bash scripts/gpu-check.sh run [DIR|ARCHIVE] [run_checks.py options]
#       # on a GPU machine: unpack and run the `gpu` suite and the
#       # benchmark; prints a table last (options: --peer none|eager|
#       # compile|both, --only kernels,cases,plans,bench,profile, --out DIR)
#
# The GPU machine needs the NVIDIA driver, CUDA 13's cuBLASLt, python3 with
# numpy (torch for the PyTorch peer) and, for the multi-rank plans, mpirun;
# nothing of this build.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd="${1:-}"
shift || true
case "$cmd" in
  prepare)
    dir="${1:-${BUILD_DIR:-build}/gpu-check}"
    if [ "${STRATA_GPU_CHECK_NO_BUILD:-0}" != 1 ]; then
      bash scripts/build.sh
    fi
    mkdir -p "$dir"
    /usr/bin/python3 tests/gpu/prepare.py --build "${BUILD_DIR:-build}" \
      --out "$dir"
    tar -C "$dir/stage" -cf - . | xz -T0 -6 > "$dir/gpu-check.tar.xz"
    size=$(stat -c %s "$dir/gpu-check.tar.xz")
    echo "gpu-check: $dir/gpu-check.tar.xz ($((size / 1048576)) MiB)"
    if [ "$size" -ge $((64 * 1048576)) ]; then
      echo "gpu-check: the archive is over 64 MiB" >&2
      exit 1
    fi
    echo "on the GPU machine: bash scripts/gpu-check.sh run $dir/gpu-check.tar.xz"
    ;;
  run)
    src="${1:-${BUILD_DIR:-build}/gpu-check}"
    shift || true
    if [ -f "$src" ]; then
      stage="$(mktemp -d /tmp/strata-gpu-check.XXXXXX)"
      xz -dc "$src" | tar -C "$stage" -xf -
    elif [ -d "$src/stage" ]; then
      stage="$src/stage"
    else
      echo "gpu-check run: $src is neither the archive nor a prepared folder" >&2
      exit 2
    fi
    exec python3 "$stage/run_checks.py" "$@"
    ;;
  *)
    echo "usage: bash scripts/gpu-check.sh prepare [DIR] | run [DIR|ARCHIVE] [options]" >&2
    exit 2
    ;;
esac
