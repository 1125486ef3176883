#!/usr/bin/env bash
# Runs `stockledger-bench` (release build, with the `stockledger` binary its
# memory scenario starts) against the local stack (started if needed).
# Extra arguments go to the bench, e.g. --quick or --out DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/local/stack.sh up
eval "$(deploy/local/stack.sh env)"
# Which engine the stack's broker keeps its log in: the figures depend on it.
storage=$(cat "${STOCKLEDGER_HOME:-$HOME/.stockledger}/tansu.storage" 2>/dev/null || echo "not started by stack.sh")
echo "bench: broker $KAFKA_BROKERS, tansu storage: $storage" >&2
cargo build --release --locked --quiet -p stockledger-cli -p stockledger-bench
exec "${CARGO_TARGET_DIR:-$PWD/target}/release/stockledger-bench" "$@"
