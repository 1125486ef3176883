#!/usr/bin/env bash
# Runs the Python order service against a stockledger pipeline. Creates (once)
# a virtual environment with confluent-kafka and fastavro from PyPI under
# ~/.stockledger/venv-python-example; arguments go to order_service.py, e.g.
#   examples/python/run.sh --brokers 127.0.0.1:9092 --topic stock.ledger
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${STOCKLEDGER_HOME:-$HOME/.stockledger}/venv-python-example
stamp="$venv/.requirements"
if ! cmp -s "$here/requirements.txt" "$stamp" 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
  cp "$here/requirements.txt" "$stamp"
fi
exec "$venv/bin/python" "$here/order_service.py" "$@"
