#!/bin/sh
# vm-kernel.sh OUTDIR GUEST
#
# The vm backend's guest kernel and initramfs, made at build time:
#
#   OUTDIR/vmlinuz            Debian's cloud kernel, unpacked from its package
#   OUTDIR/initramfs.cpio.gz  GUEST (the static airlock-guest) as /init, the
#                             few modules the VM needs, and the list
#                             /etc/airlock/modules of their paths in load order
#   OUTDIR/kernel.version     the kernel release (uname -r in the guest)
#
# The package is fetched with `apt-get download` into OUTDIR/cache and unpacked
# with `dpkg-deb -x`; it is never installed on the host and no kernel is built.
# Idempotent: once the unpacked kernel is in the cache, nothing touches the
# network, and the initramfs is rebuilt only when GUEST or this script changed.
#
# The kernel is pinned by package name and exact version. Override with
#   AIRLOCK_KERNEL_PKG=linux-image-...-cloud-amd64 AIRLOCK_KERNEL_PKGVER=...
set -eu

OUT=${1:?usage: vm-kernel.sh OUTDIR GUEST}
GUEST=${2:?usage: vm-kernel.sh OUTDIR GUEST}

KPKG=${AIRLOCK_KERNEL_PKG:-linux-image-6.1.0-57-cloud-amd64}
KPKGVER=${AIRLOCK_KERNEL_PKGVER:-6.1.192-3}

# What the guest needs as modules (TERRAIN: these are =m in the cloud kernel;
# ext4, devtmpfs and the 8250 serial console are built in, checked below).
# virtio_mmio: the microvm machine's transport; virtio_blk: the rootfs (vda);
# virtio_console: the channel (virtio-serial port); virtio_net: networking.
WANT="virtio_mmio virtio_blk virtio_console virtio_net"

log() { echo "vm-kernel: $*" >&2; }
die() { log "$*"; exit 1; }

[ -x "$GUEST" ] || die "no guest agent at $GUEST (build airlock-guest first)"
# A dynamically linked /init cannot run: the initramfs has no libc.
if command -v readelf >/dev/null 2>&1 && readelf -lW "$GUEST" 2>/dev/null | grep -q INTERP; then
	die "$GUEST is not statically linked (sanitizer build?); it cannot be /init"
fi

mkdir -p "$OUT/cache"
OUT=$(cd "$OUT" && pwd)
CACHE="$OUT/cache"
KDIR="$CACHE/$KPKG-$KPKGVER"    # the unpacked package

# ---- 1. the package, unpacked (cached) --------------------------------------
if [ ! -f "$KDIR/.unpacked" ]; then
	command -v apt-get >/dev/null || die "apt-get not found"
	command -v dpkg-deb >/dev/null || die "dpkg-deb not found"
	deb=$(ls "$CACHE/${KPKG}_"*"$KPKGVER"*_amd64.deb 2>/dev/null | head -n1 || true)
	if [ -z "$deb" ]; then
		log "fetching $KPKG=$KPKGVER with apt-get download"
		# The security archive replaces kernel versions; a pin that has
		# gone away must fail loudly, not silently pick another kernel.
		# Stale package lists are the usual cause of a miss: refresh once (root).
		if ! (cd "$CACHE" && apt-get download -q "$KPKG=$KPKGVER" >&2) &&
		   ! { [ "$(id -u)" = 0 ] && apt-get update -qq >&2 &&
		       (cd "$CACHE" && apt-get download -q "$KPKG=$KPKGVER" >&2); }; then
			log "apt cannot find $KPKG version $KPKGVER."
			log "  available: $(apt-cache madison "$KPKG" 2>/dev/null | awk '{print $3}' | tr '\n' ' ')"
			log "  (run apt-get update, or set AIRLOCK_KERNEL_PKG / AIRLOCK_KERNEL_PKGVER)"
			exit 1
		fi
		deb=$(ls "$CACHE/${KPKG}_"*_amd64.deb | head -n1)
	fi
	log "unpacking $(basename "$deb")"
	rm -rf "$KDIR.tmp"
	mkdir -p "$KDIR.tmp"
	dpkg-deb -x "$deb" "$KDIR.tmp"
	rm -rf "$KDIR"
	mv "$KDIR.tmp" "$KDIR"
	touch "$KDIR/.unpacked"
	rm -f "$deb"    # the unpacked tree is the cache; the .deb is ~20 MB more
fi

KVER=$(ls "$KDIR/lib/modules" | head -n1)
[ -n "$KVER" ] || die "no lib/modules in $KDIR"
VMLINUZ="$KDIR/boot/vmlinuz-$KVER"
CONFIG="$KDIR/boot/config-$KVER"
[ -f "$VMLINUZ" ] || die "no $VMLINUZ in the package"

# ---- 2. the module list, in load order --------------------------------------
# What must be built in for init to work without modules.
for opt in CONFIG_DEVTMPFS CONFIG_SERIAL_8250_CONSOLE CONFIG_BLK_DEV_INITRD CONFIG_RD_GZIP; do
	grep -q "^$opt=y" "$CONFIG" || die "$KVER: $opt is not built in"
done
want=$WANT
case "$(grep '^CONFIG_EXT4_FS=' "$CONFIG")" in
CONFIG_EXT4_FS=y) ;;
CONFIG_EXT4_FS=m) want="$want ext4" ;;
*) die "$KVER: no ext4" ;;
esac

MODDIR="$KDIR/lib/modules/$KVER"
if [ ! -f "$MODDIR/modules.dep" ] || [ "$MODDIR/modules.dep" -ot "$KDIR/.unpacked" ]; then
	command -v depmod >/dev/null || die "depmod not found (apt-get install kmod)"
	depmod -b "$KDIR" "$KVER"
fi

# modules.dep: "path/to/m.ko: dep1.ko dep2.ko ..." where the dependencies are
# the full closure, each listed before what it depends on (modprobe loads the
# list back to front). So: dependencies reversed, then the module; first
# occurrence wins.
ORDER=$(awk -v want="$want" '
	BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) wanted[w[i]] = i }
	{
		path = $1; sub(/:$/, "", path)
		name = path; sub(/.*\//, "", name); sub(/\.ko.*$/, "", name); gsub(/-/, "_", name)
		if (!(name in wanted)) next
		line[wanted[name]] = $0
	}
	END {
		for (i = 1; i <= n; i++) {
			if (!(i in line)) { print "MISSING " w[i]; continue }
			k = split(line[i], f, " ")
			f[1] = substr(f[1], 1, length(f[1]) - 1)
			for (j = k; j >= 2; j--) if (!(f[j] in seen)) { seen[f[j]] = 1; print f[j] }
			if (!(f[1] in seen)) { seen[f[1]] = 1; print f[1] }
		}
	}' "$MODDIR/modules.dep")
case "$ORDER" in
*MISSING*) die "$KVER: modules not found: $(echo "$ORDER" | grep MISSING | tr '\n' ' ')" ;;
esac
for m in $ORDER; do
	case "$m" in
	*.ko) ;;
	*) die "$m is compressed; /init loads plain .ko files only" ;;
	esac
done

# ---- 3. outputs --------------------------------------------------------------
# vmlinuz and kernel.version change only with the pin.
if ! cmp -s "$VMLINUZ" "$OUT/vmlinuz" 2>/dev/null; then
	cp "$VMLINUZ" "$OUT/vmlinuz.tmp"
	mv "$OUT/vmlinuz.tmp" "$OUT/vmlinuz"
fi
if [ "$(cat "$OUT/kernel.version" 2>/dev/null || true)" != "$KVER" ]; then
	echo "$KVER" >"$OUT/kernel.version.tmp"
	mv "$OUT/kernel.version.tmp" "$OUT/kernel.version"
fi

# The initramfs depends on the guest binary, this script and the module set.
key=$(printf '%s\n%s\n' "$KVER" "$ORDER" | cksum | cut -d' ' -f1)
img="$OUT/initramfs.cpio.gz"
if [ -f "$img" ] && [ "$(cat "$OUT/initramfs.key" 2>/dev/null || true)" = "$key" ] &&
	[ ! "$GUEST" -nt "$img" ] && [ ! "$0" -nt "$img" ]; then
	exit 0
fi

stage="$CACHE/initramfs.stage"
rm -rf "$stage"
mkdir -p "$stage/etc/airlock" "$stage/dev" "$stage/proc" "$stage/sys" "$stage/newroot"
cp "$GUEST" "$stage/init"
chmod 0755 "$stage/init"
: >"$stage/etc/airlock/modules"
for m in $ORDER; do
	mkdir -p "$stage/lib/modules/$KVER/$(dirname "$m")"
	cp "$MODDIR/$m" "$stage/lib/modules/$KVER/$m"
	echo "/lib/modules/$KVER/$m" >>"$stage/etc/airlock/modules"
done
echo "$KVER" >"$stage/etc/airlock/kernel.version"
command -v cpio >/dev/null || die "cpio not found (apt-get install cpio)"
# newc, owned by root whoever builds it, sorted for a stable image.
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) |
	gzip -n -6 >"$img.tmp"
mv "$img.tmp" "$img"
echo "$key" >"$OUT/initramfs.key"
rm -rf "$stage"
log "initramfs for $KVER: $(echo "$ORDER" | wc -l) modules, $(($(wc -c <"$img") / 1024)) KiB"
