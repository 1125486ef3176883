#!/usr/bin/env bash
# Prints the path of Chromium, which the browser test drives headless,
# installing Debian's chromium package when no Chromium is on PATH (or
# STOCKLEDGER_CHROMIUM names one).
set -euo pipefail
if [ -n "${STOCKLEDGER_CHROMIUM:-}" ] && [ -x "$STOCKLEDGER_CHROMIUM" ]; then
  echo "$STOCKLEDGER_CHROMIUM"
  exit 0
fi
for name in chromium chromium-browser; do
  if command -v "$name" >/dev/null; then
    command -v "$name"
    exit 0
  fi
done
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
printf 'browser: installing Debian'"'"'s chromium package\n' >&2
export DEBIAN_FRONTEND=noninteractive
as_root apt-get install -y -qq --no-install-recommends chromium >&2 ||
  { as_root apt-get update -qq >&2 && as_root apt-get install -y -qq --no-install-recommends chromium >&2; }
command -v chromium
