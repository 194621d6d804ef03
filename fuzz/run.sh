#!/bin/sh
# Runs one fuzz target for a while: fuzz/run.sh <target> [seconds]
# New inputs go to corpus-work/<target> (not committed); the committed seed
# corpus in corpus/<target> is only read. Crashes land in artifacts/<target>.
set -eu
cd "$(dirname "$0")"
target="$1"
secs="${2:-600}"
RUSTC_BOOTSTRAP=1 cargo fuzz build -O "$target"
mkdir -p "artifacts/$target" "corpus-work/$target"
dir="${CARGO_TARGET_DIR:-target}"
exec "$dir/x86_64-unknown-linux-gnu/release/$target" \
    -artifact_prefix="artifacts/$target/" \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    "corpus-work/$target" "corpus/$target"
