#!/usr/bin/env bash
# Installs (once, and again when a source changes) and runs the check of the
# live stock page (check.mjs) in headless Chromium; arguments go to it, e.g.
#   examples/browser/run.sh --gateway http://127.0.0.1:8080 --sku SKU-1 --port 8099 --out /tmp/shots
# Needs Node.js 20 or newer and Chromium (deploy/local/browser.sh prints its
# path, installing Debian's package when missing); the driver, puppeteer-core,
# comes from the npm registry and downloads no browser.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$("$here/../npm-install.sh" "$here" browser)
# Run beside its node_modules: an ES module finds packages from where it lies.
cp "$here/check.mjs" "$out/"
exec node "$out/check.mjs" --page-dir "$here" "$@"
