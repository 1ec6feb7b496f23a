#!/bin/sh
# tests/s3/setup.sh - install the npm packages the object store's s3 tests
# use (s3rver, @aws-sdk/client-s3) into tests/s3/node_modules, exactly as
# package-lock.json pins them (npm ci, from npm's configured registry).
# Skips the work when node_modules is newer than the lockfile. `make test`
# and `make test-unit` run it; scripts/setup-deps.sh installs node and npm.
set -eu
cd "$(dirname "$0")"
if ! command -v npm >/dev/null 2>&1; then
	echo "tests/s3/setup.sh: npm is missing (scripts/setup-deps.sh installs it)" >&2
	exit 1
fi
if [ -f node_modules/.package-lock.json ] && [ node_modules/.package-lock.json -nt package-lock.json ]; then
	exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
