#!/usr/bin/env bash
# Builds (once, and again when a source changes) and runs the Java order
# service against a stockledger pipeline; arguments go to it, e.g.
#   examples/java/run.sh --brokers 127.0.0.1:9092 --topic stock.ledger
# Needs Java 17 and Maven; the jars come from Maven Central into ~/.m2.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${STOCKLEDGER_HOME:-$HOME/.stockledger}/example-java
stamp=$(cat "$here/pom.xml" "$here"/src/main/java/stockledger/example/*.java | sha256sum | cut -c1-16)
if [ "$(cat "$out/.stamp" 2>/dev/null)" != "$stamp" ]; then
  mvn -B -q -Dstyle.color=never -f "$here/pom.xml" -DbuildDir="$out" package >&2
  echo "$stamp" >"$out/.stamp"
fi
exec java -cp "$out/classes:$(cat "$out/classpath.txt")" stockledger.example.OrderService \
  --schemas "$here/../../schemas/history" "$@"
