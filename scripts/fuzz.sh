#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/, clang-19, ASan + UBSan) and
# runs each for a fixed budget; docs/fuzzing.md.
#
#   scripts/fuzz.sh [--budget SECONDS] [--build-only] [TARGET...]
#
# TARGET is model_spec, cluster_spec, safetensors, checkpoint or program
# (default: all). Each run starts from the seeds (examples/, tests/, and the
# runtime tests' programs) plus what earlier runs kept in the corpus, and
# first replays tests/fuzz/regressions/TARGET/ (inputs that once failed).
# Exits 77 (ctest: skipped) when clang++-19 or libFuzzer is missing, 1 on a
# finding (the input is left in $FUZZ_BUILD/artifacts/TARGET/).
# Environment: FUZZ_BUILD (default build/fuzz), JOBS (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUDGET=60
BUILD_ONLY=0
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET=$2; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(model_spec cluster_spec safetensors checkpoint program)

CXX=${FUZZ_CXX:-clang++-19}
if ! command -v "$CXX" >/dev/null ||
   ! ls /usr/lib/llvm-19/lib/clang/19/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz.sh: skipped: $CXX or libFuzzer (libclang-rt-19-dev) is not installed"
  exit 77
fi
BUILD=${FUZZ_BUILD:-$ROOT/build/fuzz}
JOBS=${JOBS:-1}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -G Ninja -S tests/fuzz -B "$BUILD" -DCMAKE_CXX_COMPILER="$CXX" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD" -j "$JOBS" >/dev/null
[ "$BUILD_ONLY" = 1 ] && exit 0

SEEDS=$BUILD/seeds
rm -rf "$SEEDS"
mkdir -p "$SEEDS/model_spec" "$SEEDS/cluster_spec"
"$BUILD/fuzz_program_seeds" "$SEEDS"
seed() { # seed DIR FILE...: copies, named by their paths so none collide
  local dir=$1; shift
  for f in "$@"; do cp "$f" "$SEEDS/$dir/$(echo "$f" | tr / _)"; done
}
seed model_spec examples/models/*.yaml tests/lit/frontend/Inputs/*.yaml \
  tests/reference/specs/*.yaml bench/train/*.yaml \
  tests/lit/planner/Inputs/gpt-39b.yaml
seed cluster_spec examples/clusters/*.yaml tests/lit/planner/Inputs/bad-cluster.yaml

status=0
for t in "${TARGETS[@]}"; do
  bin=$BUILD/fuzz_$t
  [ -x "$bin" ] || { echo "fuzz.sh: no harness '$t'" >&2; exit 2; }
  corpus=$BUILD/corpus/$t
  artifacts=$BUILD/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  opts=(-rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10
        -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/")
  regressions=tests/fuzz/regressions/$t
  if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
    if ! "$bin" "${opts[@]}" "$regressions"/* >"$artifacts/regressions.log" 2>&1; then
      echo "fuzz.sh: $t: a regression input fails again; see $artifacts/regressions.log" >&2
      tail -40 "$artifacts/regressions.log" >&2
      status=1
      continue
    fi
  fi
  echo "fuzz.sh: $t: ${BUDGET}s"
  if ! "$bin" "${opts[@]}" -max_total_time="$BUDGET" "$corpus" "$SEEDS/$t" \
      >"$artifacts/run.log" 2>&1; then
    echo "fuzz.sh: $t: FOUND a failure; input and log in $artifacts/" >&2
    grep -m1 -A30 "ERROR\|runtime error\|deadly signal\|terminate called" \
      "$artifacts/run.log" >&2 || tail -40 "$artifacts/run.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$artifacts/run.log" | tail -2 |
      sed "s/^/fuzz.sh: $t: /"
  fi
done
exit $status
