#!/usr/bin/env bash
# Runs the whole test suite against the local stack (started if needed).
# Extra arguments go to `cargo test`, e.g. deploy/local/test.sh -p stockledger-core
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/local/stack.sh up
eval "$(deploy/local/stack.sh env)"
exec cargo test --workspace --locked "$@"
