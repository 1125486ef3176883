#!/usr/bin/env bash
# Runs a Python example in its own virtual environment, created (once, and
# again when its requirements change) under ~/.stockledger/:
#   with_venv.sh VENV_NAME REQUIREMENTS_FILE SCRIPT [ARGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${STOCKLEDGER_HOME:-$HOME/.stockledger}/$1
requirements=$here/$2
script=$here/$3
shift 3
stamp="$venv/.requirements"
if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >&2
  cp "$requirements" "$stamp"
fi
exec "$venv/bin/python" "$script" "$@"
