#!/usr/bin/env bash
# Runs `stockledger-bench` (release build, with the `stockledger` binary its
# memory scenario starts) against the local stack (started if needed).
# Extra arguments go to the bench, e.g. --quick or --out DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/local/stack.sh up
eval "$(deploy/local/stack.sh env)"
# Which broker runs (and where it keeps its log): the figures depend on it.
broker=$(deploy/local/stack.sh env | sed -n 's/^# broker: //p')
echo "bench: broker $KAFKA_BROKERS ($broker)" >&2
export STOCKLEDGER_BENCH_BROKER=$broker
# The gateway scenarios' HTTP load generator, built once from crates.io.
OHA_VERSION=1.16.0
oha="${STOCKLEDGER_HOME:-$HOME/.stockledger}/oha/bin/oha"
if ! "$oha" --version 2>/dev/null | grep -q "$OHA_VERSION"; then
  echo "bench: installing oha $OHA_VERSION (the HTTP load generator) into ${oha%/bin/oha}" >&2
  cargo install "oha@$OHA_VERSION" --locked --quiet --root "${oha%/bin/oha}"
fi
cargo build --release --locked --quiet -p stockledger-cli -p stockledger-bench
exec "${CARGO_TARGET_DIR:-$PWD/target}/release/stockledger-bench" "$@"
