#!/bin/sh
# bench/setup-peers.sh - install the proxies bench/gateway measures the
# gateway against (haproxy, from Debian), when they are missing. Only the
# bench needs them: make test does not. bench/gateway runs it.
set -eu
if command -v haproxy >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "bench/setup-peers.sh: haproxy is missing; run as root to install it" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# (another apt run may hold the lock for a while: wait for it)
apt_get() { apt-get -o DPkg::Lock::Timeout=300 "$@" >/dev/null; }
apt_get install -y --no-install-recommends haproxy || {
	apt_get update
	apt_get install -y --no-install-recommends haproxy
}
# The package starts its own service on the default config: the bench runs
# its own instances only, so that one is stopped (and not started at boot).
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet haproxy 2>/dev/null; then
	systemctl stop haproxy || true
	systemctl disable haproxy >/dev/null 2>&1 || true
fi
command -v haproxy >/dev/null
