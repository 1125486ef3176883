#!/usr/bin/env bash
# Runs `stockledger bench` (release build) against the local stack (started
# if needed). Extra arguments go to the bench, e.g. --quick or --out DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/local/stack.sh up
eval "$(deploy/local/stack.sh env)"
exec cargo run --release --locked --quiet -p stockledger-cli -- bench "$@"
