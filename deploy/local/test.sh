#!/usr/bin/env bash
# Runs the whole test suite against the local stack (started if needed).
# Extra arguments go to `cargo test` in place of --workspace, e.g.
#   deploy/local/test.sh -p stockledger-core
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/local/stack.sh up
eval "$(deploy/local/stack.sh env)"
if [ $# -eq 0 ]; then
  set -- --workspace
fi
exec cargo test --locked "$@"
