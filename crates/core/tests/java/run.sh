#!/usr/bin/env bash
# Builds (once, and again when a source changes) and runs Apache Avro Java
# as the strict-wire test's judge: payloads in on stdin, one hex string a
# line, a verdict a line out (see AvroOracle.java).
# Needs Java 17 and Maven; the jars come from Maven Central into ~/.m2.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${STOCKLEDGER_HOME:-$HOME/.stockledger}/avro-oracle
stamp=$(cat "$here/pom.xml" "$here"/src/main/java/stockledger/oracle/*.java | sha256sum | cut -c1-16)
if [ "$(cat "$out/.stamp" 2>/dev/null)" != "$stamp" ]; then
  mvn -B -q -Dstyle.color=never -f "$here/pom.xml" -DbuildDir="$out" package >&2
  echo "$stamp" >"$out/.stamp"
fi
exec java -cp "$out/classes:$(cat "$out/classpath.txt")" stockledger.oracle.AvroOracle \
  "$here/../../../../schemas/history"
