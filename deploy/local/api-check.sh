#!/usr/bin/env bash
# The gateway's HTTP contract, checked by tools nobody here wrote:
#   1. Redocly's linter on docs/openapi.json (no error allowed);
#   2. schemathesis, a property-based API fuzzer, against a real gateway
#      (with an applier behind it) on the local stack: once with an
#      operator's key, once with a producer's. Every answer must be one the
#      document lists for its route, with the body and headers it declares,
#      no answer may be a 5xx, and no request the document calls valid may
#      be refused (400, 413, 415, 422): the document states every rule the
#      gateway enforces.
#
#   deploy/local/api-check.sh [--examples N]   (default 30 per operation)
#
# The tools are fetched once into ~/.stockledger/tools (npm, PyPI). The
# run uses topics and a Redis prefix of its own and removes its processes.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

EXAMPLES=30
while [ $# -gt 0 ]; do
  case "$1" in
    --examples) EXAMPLES=$2; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "api-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

STATE=${STOCKLEDGER_HOME:-$HOME/.stockledger}
TOOLS=$STATE/tools
REDOCLY_VERSION=2.77.0
SCHEMATHESIS_VERSION=4.32.5
log() { printf 'api-check: %s\n' "$*" >&2; }

if [ "$("$TOOLS/node_modules/.bin/redocly" --version 2>/dev/null)" != "$REDOCLY_VERSION" ]; then
  log "fetching @redocly/cli $REDOCLY_VERSION from npm"
  npm install --prefix "$TOOLS" --no-audit --no-fund --silent "@redocly/cli@$REDOCLY_VERSION"
fi
if ! "$TOOLS/venv/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  log "fetching schemathesis $SCHEMATHESIS_VERSION from PyPI"
  python3 -m venv "$TOOLS/venv"
  "$TOOLS/venv/bin/pip" install --quiet "schemathesis==$SCHEMATHESIS_VERSION"
fi

log "linting docs/openapi.json"
REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
  "$TOOLS/node_modules/.bin/redocly" lint --format=summary docs/openapi.json

deploy/local/stack.sh up
eval "$(deploy/local/stack.sh env)"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/stockledger/target}
cargo build --locked --quiet --bin stockledger
BIN=$CARGO_TARGET_DIR/debug/stockledger

RUN=apicheck-$$-$(date +%s)
WORK=$(mktemp -d)
export STOCKLEDGER_TOPIC=$RUN.ledger STOCKLEDGER_OUTCOMES_TOPIC=$RUN.outcomes \
  STOCKLEDGER_DLQ_TOPIC=$RUN.dlq STOCKLEDGER_PREFIX=$RUN \
  STOCKLEDGER_APPLIER_GROUP=$RUN-applier STOCKLEDGER_ARCHIVER_GROUP=$RUN-archiver
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$BIN" topics create --partitions 3 >/dev/null
"$BIN" apply --dynamic-membership 2>"$WORK/apply.log" &
PIDS+=($!)
"$BIN" archive --dynamic-membership 2>"$WORK/archive.log" &
PIDS+=($!)
token() { # name role -> the token; the stanza goes to the keys file
  "$BIN" keys new --name "$1" --role "$2" >"$WORK/$1.key"
  sed -n '/^\[\[keys\]\]/,$p' "$WORK/$1.key" >>"$WORK/keys.toml"
  grep '^slk_' "$WORK/$1.key"
}
OPERATOR=$(token fuzz-operator operator)
PRODUCER=$(token fuzz-producer producer)
"$BIN" serve --listen 127.0.0.1:0 --api-keys "$WORK/keys.toml" \
  >"$WORK/serve.out" 2>"$WORK/serve.log" &
PIDS+=($!)
for _ in $(seq 1 100); do
  grep -q '^listening on ' "$WORK/serve.out" 2>/dev/null && break
  sleep 0.2
done
BASE=$(sed -n 's/^listening on //p' "$WORK/serve.out")
[ -n "$BASE" ] || { log "the gateway did not start:"; cat "$WORK/serve.log" >&2; exit 1; }

# The event streams (GET .../events) are left out: their answer never
# ends, so a fuzzer waiting for the end of it would time out every case;
# crates/cli/tests/http.rs tests their refusals and their streams.
fuzz() { # who token
  log "fuzzing $BASE with the $1 key ($EXAMPLES examples per operation)"
  # Run from the scratch directory: schemathesis keeps its example
  # database in the working directory.
  # api_check_hooks.py lets through the refusals by rules across two
  # values, or against the clock, that no JSON Schema can state.
  (cd "$WORK" && PYTHONPATH="$ROOT/deploy/local" SCHEMATHESIS_HOOKS=api_check_hooks \
    "$TOOLS/venv/bin/schemathesis" --no-color run "$ROOT/docs/openapi.json" --url "$BASE" \
    --header "Authorization: Bearer $2" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,positive_data_acceptance \
    --max-examples "$EXAMPLES" --generation-deterministic --request-timeout 10 \
    --exclude-path-regex '/events$')
}
status=0
fuzz operator "$OPERATOR" || status=1
fuzz producer "$PRODUCER" || status=1
if [ $status -ne 0 ]; then
  # Its warnings and errors, not the refusals the producer key earns.
  log "the gateway's warnings and errors:"
  grep -E ' (WARN|ERROR) ' "$WORK/serve.log" | grep -v 'stockledger_http::access' | tail -n 20 >&2 || true
fi
exit $status
