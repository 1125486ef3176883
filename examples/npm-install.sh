#!/usr/bin/env bash
# Installs the npm packages of the example in directory $1 (from its
# package.json and package-lock.json, with `npm ci`) into
# ~/.stockledger/example-$2, once and again whenever either file changes,
# and prints that directory. The examples run from there: an ES module finds
# its packages from where it lies.
set -euo pipefail
here=$1
out=${STOCKLEDGER_HOME:-$HOME/.stockledger}/example-$2
stamp=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)
if [ "$(cat "$out/.stamp" 2>/dev/null)" != "$stamp" ]; then
  mkdir -p "$out"
  cp "$here/package.json" "$here/package-lock.json" "$out/"
  npm ci --prefix "$out" --loglevel=error --no-audit --no-fund >&2
  echo "$stamp" >"$out/.stamp"
fi
echo "$out"
