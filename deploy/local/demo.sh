#!/usr/bin/env bash
# Runs the flash-sale demo end to end against the local stack (started if
# needed). Extra arguments go to `stockledger demo`, e.g. --orders 20000.
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/local/stack.sh up
eval "$(deploy/local/stack.sh env)"
exec cargo run --release --locked --quiet -p stockledger-cli -- demo "$@"
