#!/usr/bin/env bash
# The README's main command: install dependencies, build, then show what
# Strata does on the demo model — import it (IR + summary), let the planner
# choose a plan for local CPU ranks, compile it into one executable and train
# it on those ranks with MPI, the loss falling.
#
#   bash scripts/demo.sh              # set up (idempotent), build, run the demo
#   bash scripts/demo.sh --no-setup   # run the demo with the tree already built
#
# MODEL, STEPS, RANKS and BUILD_DIR override the defaults below.
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP=1
for arg in "$@"; do
  case "$arg" in
    --no-setup) SETUP=0 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown argument '$arg' (expected --no-setup)" >&2; exit 2 ;;
  esac
done
if [ "$SETUP" = 1 ]; then
  bash scripts/install-deps.sh
  bash scripts/build.sh
fi
BUILD=${BUILD_DIR:-build}
BIN=$BUILD/bin
if [ ! -x "$BIN/strata" ]; then
  echo "demo.sh: $BIN/strata is not built; run bash scripts/demo.sh without --no-setup" >&2
  exit 1
fi
MODEL=${MODEL:-examples/models/gpt-tiny.yaml}
STEPS=${STEPS:-60}
RANKS=${RANKS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== strata import $MODEL --summary (first lines of the IR)"
"$BIN/strata" import "$MODEL" --summary -o "$BUILD/demo.mlir"
head -n 12 "$BUILD/demo.mlir"
echo "   ... ($(wc -l < "$BUILD/demo.mlir") lines in $BUILD/demo.mlir)"

echo "== strata compile $MODEL --cluster local:$RANKS (the planner chooses the plan)"
"$BIN/strata" compile "$MODEL" --cluster "local:$RANKS" -o "$BUILD/demo-train"

echo "== training $STEPS steps on $RANKS local ranks (synthetic token stream)"
mpirun --oversubscribe -np "$RANKS" "$BUILD/demo-train" \
  --steps "$STEPS" --print-every 10 --log "$BUILD/demo-train.jsonl"
