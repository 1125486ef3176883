#!/usr/bin/env bash
# Refreshes the copy of RustSec's advisory database that CI checks the
# dependencies against (.ci/advisories): deploy/advisories/advisory-db.tar.gz
# and SOURCE, which names the commit and its date. Run it where GitHub can be
# reached, and commit both files:
#
#   deploy/advisories/refresh.sh                 # from GitHub
#   deploy/advisories/refresh.sh /path/to/clone  # from a clone of it
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
from=${1:-https://github.com/rustsec/advisory-db}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git clone --quiet --depth 1 "$from" "$work/db"
git -C "$work/db" archive --format=tar HEAD crates rust | gzip -9n >"$work/advisory-db.tar.gz"
commit=$(git -C "$work/db" rev-parse HEAD)
date=$(git -C "$work/db" log -1 --format=%cI)
mv "$work/advisory-db.tar.gz" "$here/advisory-db.tar.gz"
cat >"$here/SOURCE" <<SOURCE
url https://github.com/rustsec/advisory-db
commit $commit
date $date
SOURCE
echo "advisories: rustsec/advisory-db at $commit ($date)"
