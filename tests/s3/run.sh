#!/bin/sh
# tests/s3/run.sh MODE BIN_DIR - run one s3 test of the object store against
# a real S3-compatible server (s3rver, started here by s3server.js on
# 127.0.0.1 and a free port, stopped by its pid on every exit).
#
#   conformance  build/bin/test-objstore's checks over the s3 driver, path
#                style and virtual-host style
#   interop      tests/s3/interop.js: the official AWS client and our driver
#                read each other's objects; corruption; unreachable stores
#
# Exits 77 (skipped) when node or tests/s3/node_modules is missing
# (tests/s3/setup.sh installs it; make test runs that).
set -eu
mode=$1
bin=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1 || [ ! -d "$here/node_modules/s3rver" ] ||
   [ ! -d "$here/node_modules/@aws-sdk/client-s3" ]; then
	echo "skip: node or tests/s3/node_modules missing (run tests/s3/setup.sh)"
	exit 77
fi
tmp=$(mktemp -d /tmp/airlock-s3test.XXXXXX)
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
# s3rver's continuation tokens use DES, which OpenSSL 3 keeps in its legacy
# provider; without it a paged ListObjectsV2 answers 500.
mkfifo "$tmp/hold"
node --openssl-legacy-provider "$here/s3server.js" airlock vh.localhost <"$tmp/hold" >"$tmp/port" &
pid=$!
exec 9>"$tmp/hold"   # the server's stdin: it stops when this closes
i=0
while [ ! -s "$tmp/port" ]; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "FAIL: s3server.js did not start" >&2
		exit 1
	fi
	sleep 0.1
done
port=$(cat "$tmp/port")
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AIRLOCK_S3_PORT="$port"
case $mode in
conformance)
	AIRLOCK_TEST_S3_URL="s3://airlock?endpoint=http://127.0.0.1:$port&region=us-east-1&path_style=1" \
		"$bin/test-objstore"
	# virtual-host style: Host vh.localhost:PORT, which s3rver maps to the
	# bucket "vh.localhost" (it has no *.s3.<domain> for loopback names)
	AIRLOCK_TEST_S3_URL="s3://vh?endpoint=http://localhost:$port&region=us-east-1&path_style=0" \
		"$bin/test-objstore"
	;;
interop)
	AIRLOCK_BIN="$bin" node --openssl-legacy-provider "$here/interop.js"
	;;
*)
	echo "usage: $0 conformance|interop BIN_DIR" >&2
	exit 2
	;;
esac
