#!/usr/bin/env bash
# Regenerates docs/dialect.md from the ODS (the `dialect_docs_current` test
# fails while they differ).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build "${BUILD_DIR:-build}" --target StrataOpsIncGen
cp "${BUILD_DIR:-build}/dialects/strata/StrataOps.md" docs/dialect.md
