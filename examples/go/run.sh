#!/usr/bin/env bash
# Builds (when a source changes) and runs the Go order service against a
# stockledger pipeline; arguments go to it, e.g.
#   examples/go/run.sh --brokers 127.0.0.1:9092 --topic stock.ledger
# Needs Go; the modules come from the Go module proxy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${STOCKLEDGER_HOME:-$HOME/.stockledger}/example-go
(cd "$here" && go build -o "$out/order-service" .)
exec "$out/order-service" --schemas "$here/../../schemas/history" "$@"
