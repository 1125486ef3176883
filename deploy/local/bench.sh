#!/usr/bin/env bash
# Runs `stockledger-bench` (release build, with the `stockledger` binary its
# memory scenario starts) against the local stack (started if needed).
# Extra arguments go to the bench, e.g. --quick or --out DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/local/stack.sh up
eval "$(deploy/local/stack.sh env)"
cargo build --release --locked --quiet -p stockledger-cli -p stockledger-bench
exec "${CARGO_TARGET_DIR:-$PWD/target}/release/stockledger-bench" "$@"
