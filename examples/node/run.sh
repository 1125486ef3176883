#!/usr/bin/env bash
# Installs (once, and again when a source changes) and runs the Node.js order
# service against a stockledger pipeline; arguments go to it, e.g.
#   examples/node/run.sh --brokers 127.0.0.1:9092 --topic stock.ledger
# Needs Node.js 20.19.4 or newer; the packages come from the npm registry.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$("$here/../npm-install.sh" "$here" node)
# Run beside its node_modules: an ES module finds packages from where it lies.
cp "$here/order-service.mjs" "$out/"
exec node "$out/order-service.mjs" --schemas "$here/../../schemas/history" "$@"
