#!/bin/sh
# scripts/console-setup.sh - install the web console's npm packages into
# console/node_modules exactly as console/package-lock.json pins them (npm ci,
# from npm's configured registry): xterm.js, which the console serves, and
# playwright-core, which tests/e2e/test_console.py uses to drive Debian's
# chromium (no browser is downloaded). Then copy xterm.js into
# console/static/vendor, the files the build puts into `airlockd api`
# (committed, so that building needs no npm; this keeps them equal to the
# pinned package). Skips npm ci when node_modules is newer than the lockfile.
set -eu
cd "$(dirname "$0")/../console"
if ! command -v npm >/dev/null 2>&1; then
	echo "scripts/console-setup.sh: npm is missing (scripts/setup-deps.sh installs it)" >&2
	exit 1
fi
if ! [ -f node_modules/.package-lock.json ] || ! [ node_modules/.package-lock.json -nt package-lock.json ]; then
	npm ci --no-audit --no-fund --loglevel=error
fi
mkdir -p static/vendor
copy() {   # only when different, so the build does not re-embed for nothing
	cmp -s "$1" "static/vendor/$2" || cp "$1" "static/vendor/$2"
}
copy node_modules/@xterm/xterm/lib/xterm.mjs xterm.mjs
copy node_modules/@xterm/xterm/css/xterm.css xterm.css
copy node_modules/@xterm/addon-fit/lib/addon-fit.mjs addon-fit.mjs
copy node_modules/@xterm/xterm/LICENSE xterm-LICENSE.txt
