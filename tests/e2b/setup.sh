#!/bin/sh
# tests/e2b/setup.sh - install the e2b SDK (the unmodified npm package, pinned
# in package-lock.json) into tests/e2b/node_modules with `npm ci`, for
# tests/e2b/suite.mjs (tests/e2e/test_e2b.py) and bench/sdk-e2b.mjs.
# Skips the work when node_modules is newer than the lockfile.
set -eu
cd "$(dirname "$0")"
if ! command -v npm >/dev/null 2>&1; then
	echo "tests/e2b/setup.sh: npm is missing (scripts/setup-deps.sh installs it)" >&2
	exit 1
fi
if [ -f node_modules/.package-lock.json ] && [ node_modules/.package-lock.json -nt package-lock.json ]; then
	exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
