#!/bin/sh
# sdk/typescript/setup.sh - install the TypeScript SDK's dev tooling
# (typescript, @types/node) into sdk/typescript/node_modules exactly as
# package-lock.json pins it (npm ci, from npm's configured registry), then
# compile src/ to dist/ (ESM + .d.ts). The SDK itself has no runtime
# dependencies. `make npm-deps` runs it; scripts/setup-deps.sh installs node
# and npm. Skips npm ci when node_modules is newer than the lockfile, and tsc
# when dist/ is newer than the sources.
set -eu
cd "$(dirname "$0")"
if ! command -v npm >/dev/null 2>&1; then
	echo "sdk/typescript/setup.sh: npm is missing (scripts/setup-deps.sh installs it)" >&2
	exit 1
fi
if ! [ -f node_modules/.package-lock.json ] || ! [ node_modules/.package-lock.json -nt package-lock.json ]; then
	npm ci --no-audit --no-fund --loglevel=error
fi
# tsc rewrites every output, so dist/index.js is as new as the last build.
if [ -f dist/index.js ] && [ -z "$(find src tsconfig.json package-lock.json -newer dist/index.js | head -1)" ]; then
	exit 0
fi
npm run --silent build
