#!/usr/bin/env bash
# Prints the path of promtool (Prometheus' own checker, which the HTTP tests
# run on every /metrics), fetching it once when it is not on PATH: the
# binary alone, taken out of Debian's prometheus package into
# ~/.stockledger/tools, so no Prometheus server is installed or started.
set -euo pipefail

STATE=${STOCKLEDGER_HOME:-$HOME/.stockledger}
TOOLS=$STATE/tools
if command -v promtool >/dev/null; then
  command -v promtool
  exit 0
fi
if [ -x "$TOOLS/bin/promtool" ]; then
  echo "$TOOLS/bin/promtool"
  exit 0
fi
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'promtool: fetching Debian'"'"'s prometheus package for its promtool\n' >&2
(cd "$work" && apt-get download -qq prometheus 2>/dev/null) ||
  { as_root apt-get update -qq && (cd "$work" && apt-get download -qq prometheus); }
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$TOOLS/bin"
install -m 0755 "$work/root/usr/bin/promtool" "$TOOLS/bin/promtool"
echo "$TOOLS/bin/promtool"
