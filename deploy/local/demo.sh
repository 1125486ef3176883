#!/usr/bin/env bash
# Runs the flash-sale demo end to end against the local stack (started if
# needed). Extra arguments go to `stockledger demo`, e.g. --orders 20000.
#
# The demo is built in the dev profile, the one `deploy/local/test.sh`
# builds, so the two share one compile (on 2 cores about 5 minutes from
# nothing, against 8.5 for an optimised build). A first argument --release
# builds and runs the optimised binary instead, for rates worth quoting.
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=()
if [ "${1:-}" = --release ]; then
  profile=(--release)
  shift
fi
deploy/local/stack.sh up
eval "$(deploy/local/stack.sh env)"
exec cargo run "${profile[@]}" --locked --quiet -p stockledger-cli -- demo "$@"
