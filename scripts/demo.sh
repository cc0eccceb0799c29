#!/usr/bin/env bash
# The README's main command: install dependencies, build, then show what
# Strata does on the demo model — import it (IR + summary), let the planner
# choose a plan for local CPU ranks, compile it into one executable and train
# it on those ranks with MPI, the loss falling.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
BIN=${BUILD_DIR:-build}/bin
MODEL=${MODEL:-examples/models/gpt-tiny.yaml}
STEPS=${STEPS:-60}
RANKS=${RANKS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== strata import $MODEL --summary (first lines of the IR)"
"$BIN/strata" import "$MODEL" --summary -o "${BUILD_DIR:-build}/demo.mlir"
head -n 12 "${BUILD_DIR:-build}/demo.mlir"
echo "   ... ($(wc -l < "${BUILD_DIR:-build}/demo.mlir") lines in ${BUILD_DIR:-build}/demo.mlir)"

echo "== strata compile $MODEL --cluster local:$RANKS (the planner chooses the plan)"
"$BIN/strata" compile "$MODEL" --cluster "local:$RANKS" -o "${BUILD_DIR:-build}/demo-train"

echo "== training $STEPS steps on $RANKS local ranks (synthetic token stream)"
mpirun --oversubscribe -np "$RANKS" "${BUILD_DIR:-build}/demo-train" \
  --steps "$STEPS" --print-every 10 --log "${BUILD_DIR:-build}/demo-train.jsonl"
