#!/usr/bin/env bash
# Runs the whole test suite against the local stack (started if needed).
# Extra arguments go to `cargo test` in place of --workspace, e.g.
#   deploy/local/test.sh -p stockledger-core
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/local/stack.sh up
# The tests get a Redis database of their own, emptied first, so what the
# demo, the bench or earlier runs left in Redis never slows their SCANs.
export STOCKLEDGER_REDIS_DB=${STOCKLEDGER_REDIS_DB:-15}
redis-cli -h 127.0.0.1 -p 6379 -n "$STOCKLEDGER_REDIS_DB" FLUSHDB >/dev/null
eval "$(deploy/local/stack.sh env)"
# Prometheus' own checker, run by the HTTP tests on every /metrics.
STOCKLEDGER_PROMTOOL=$(deploy/local/promtool.sh)
export STOCKLEDGER_PROMTOOL
# Chromium, headless, for the live stock page's and the console's tests
# (installed if missing).
STOCKLEDGER_CHROMIUM=$(deploy/local/browser.sh)
export STOCKLEDGER_CHROMIUM
# What the tests run in their own processes (appliers, archivers) logs
# here, a file per test binary, kept until the next run; the browser tests'
# screenshots too (screenshots-*/): CI's artifacts.
export STOCKLEDGER_TEST_LOG_DIR=${STOCKLEDGER_TEST_LOG_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/test-logs}
rm -rf "$STOCKLEDGER_TEST_LOG_DIR"
mkdir -p "$STOCKLEDGER_TEST_LOG_DIR"
if [ $# -eq 0 ]; then
  set -- --workspace
fi
if cargo test --locked "$@"; then
  echo "test.sh: logs and screenshots kept in $STOCKLEDGER_TEST_LOG_DIR" >&2
  exit 0
fi
# cargo stops at the first test binary that fails: its log is the newest.
last=$(ls -t "$STOCKLEDGER_TEST_LOG_DIR"/*.log 2>/dev/null | head -n 1)
if [ -n "$last" ]; then
  echo "test.sh: the last warnings and errors in $last:" >&2
  grep -E ' (WARN|ERROR) ' "$last" | tail -n 40 >&2 || true
fi
exit 1
