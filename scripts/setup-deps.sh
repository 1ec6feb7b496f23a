#!/bin/sh
# Install the Debian packages Airlock needs, only those missing, from the
# machine's own apt sources. Idempotent; run as root.
set -eu

PKGS="build-essential cmake pkg-config clang libsqlite3-dev libseccomp-dev libssl-dev
      sqlite3 libpq-dev postgresql-15 btrfs-progs mmdebstrap busybox-static bubblewrap util-linux passwd
      iproute2 nftables openssl python3 ca-certificates qemu-system-x86 kmod cpio e2fsprogs
      libzstd-dev zstd zlib1g-dev libc-ares-dev python3-yaml python3-jsonschema chromium python3-cryptography
      systemd-container"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
# chromium: the web console's browser tests (tests/e2e/test_console.py).
# node and npm run the object store's s3 tests (tests/s3): Debian's, unless
# the machine already has a node of its own (nodesource's nodejs bundles npm
# and conflicts with Debian's npm package).
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -z "$missing" ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "setup-deps: missing packages:$missing (run as root to install them)" >&2
	exit 1
fi
echo "setup-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
