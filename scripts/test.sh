#!/usr/bin/env bash
# The README's test command: install dependencies, build, run every test
# (GoogleTest units, lit + FileCheck, end-to-end runs) through one ctest.
#
#   bash scripts/test.sh                 # set up (idempotent), build, test
#   bash scripts/test.sh --no-setup      # test the tree as built
#   bash scripts/test.sh -R lit          # further arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP=1
if [ "${1:-}" = "--no-setup" ]; then
  SETUP=0
  shift
fi
if [ "$SETUP" = 1 ]; then
  bash scripts/install-deps.sh
  bash scripts/build.sh
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
