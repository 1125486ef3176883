#!/usr/bin/env bash
# Runs the console's check (check.mjs) in headless Chromium, with the
# driver the live stock page's check installs (examples/browser); arguments
# go to it. Needs Node.js 20 or newer and Chromium (deploy/local/browser.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
browser=$here/../../../../examples/browser
out=$("$browser/../npm-install.sh" "$browser" browser)
# Run beside the driver's node_modules: an ES module finds packages from where it lies.
cp "$here/check.mjs" "$out/console-check.mjs"
exec node "$out/console-check.mjs" "$@"
