#!/usr/bin/env bash
# A long series of random pipelines compared with PostgreSQL (the suite runs
# 500 of a fixed seed; this runs more, of a fresh seed unless one is given).
#   bash tests/pipelines.sh [CASES] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
export ONETRIP_PIPELINE_CASES=${1:-20000}
export ONETRIP_PIPELINE_SEED=${2:-$(date +%s)}
echo "random pipelines: $ONETRIP_PIPELINE_CASES cases of seed $ONETRIP_PIPELINE_SEED"
cargo test -p onetrip-tests --test pipelines -- --nocapture
