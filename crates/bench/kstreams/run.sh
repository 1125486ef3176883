#!/usr/bin/env bash
# Builds (once, and again when a source changes) and runs the Kafka Streams
# inventory service the bench compares the ledger with; arguments go to it,
# e.g.
#   crates/bench/kstreams/run.sh --brokers 127.0.0.1:9092 --topic stock.ledger \
#     --outcomes-topic peer.outcomes --application-id peer --guarantee exactly_once_v2
# Needs Java 17 and Maven; the jars come from Maven Central into ~/.m2.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${STOCKLEDGER_HOME:-$HOME/.stockledger}/bench-kstreams
stamp=$(cat "$here/pom.xml" "$here"/src/main/java/stockledger/bench/*.java | sha256sum | cut -c1-16)
if [ "$(cat "$out/.stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "kstreams: building the peer into $out" >&2
  mvn -B -q -Dstyle.color=never -f "$here/pom.xml" -DbuildDir="$out" package >&2
  echo "$stamp" >"$out/.stamp"
fi
if [ "${1:-}" = "--build-only" ]; then
  exit 0
fi
exec java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$out/classes:$(cat "$out/classpath.txt")" stockledger.bench.InventoryService \
  --schemas "$here/../../../schemas/history" "$@"
