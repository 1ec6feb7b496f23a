#!/bin/sh
# template-build.sh KIND ARG OUTDIR PACKAGES
#
# Builds a root filesystem in OUTDIR (an empty or absent directory inside a
# fresh template subvolume). Run by the node manager as root; every line on
# stdout/stderr is streamed to the client as progress. Exit status 0 = done.
#
#   debian  ARG = suite (e.g. bookworm); PACKAGES = extra comma-separated packages
#   busybox ARG unused; /bin/busybox from the host plus applet symlinks
#   code    ARG = suite: debian with Jupyter's Python kernel,
#           numpy, pandas, matplotlib, nodejs and bash, plus Airlock's code
#           service (scripts/code-interpreter, beside this script), started
#           at boot by /etc/airlock/start as the user `user` (uid 1000)
#   dir     ARG = host directory, copied with cp -a --reflink=auto
#   tar     ARG = host tar file, extracted with --numeric-owner
#   oci     ARG = host image: a `docker save` tar, or an OCI image layout (a
#           directory, or a tar of one); applied layer by layer by
#           $AIRLOCK_OCI_TOOL (airlock-oci, src/oci), which refuses what would
#           write outside OUTDIR and writes the image's defaults (Env,
#           WorkingDir, User, Entrypoint, Cmd) to OUTDIR/../image.json
#
# When AIRLOCK_SOURCE_UID/GID are set (the request came from the unprivileged
# node, not root), the host source of "dir", "tar" and "oci" is read with that uid,
# so a template can never contain a file the requester could not read itself.
# The guest agent is not copied in: the jail executes it from the host.
#
# For the vm backend the rootfs is also written as an ext4 image next to it,
# OUTDIR/../rootfs.ext4 (so in the template subvolume; a sandbox's snapshot
# then holds a copy-on-write copy of it). Skipped when mkfs.ext4 is missing or
# AIRLOCK_TEMPLATE_EXT4=0.
set -eu

KIND=${1:?kind}
ARG=${2:-}
OUT=${3:?outdir}
PACKAGES=${4:-}

log() { echo "template-build: $*"; }

# Run "$@" as the requester when one is set (see above).
as_source() {
	if [ -n "${AIRLOCK_SOURCE_UID:-}" ]; then
		setpriv --reuid="$AIRLOCK_SOURCE_UID" --regid="${AIRLOCK_SOURCE_GID:?}" \
			--clear-groups -- "$@"
	else
		"$@"
	fi
}

log "$0 $KIND $ARG"
mkdir -p "$OUT"

# Numbered steps ("step 2/4: ..."), which the node passes on as the build's
# progress: the kind's own (debian: mmdebstrap and extracting), finishing
# the tree, and the ext4 image when one is made.
STEPS=2
[ "$KIND" = debian ] && STEPS=3
[ "$KIND" = code ] && STEPS=4
[ "${AIRLOCK_TEMPLATE_EXT4:-1}" != 0 ] && command -v mkfs.ext4 >/dev/null 2>&1 && STEPS=$((STEPS + 1))
STEP=0
step() { STEP=$((STEP + 1)); log "step $STEP/$STEPS: $*"; }

# The code interpreter is debian with these, and the service added below.
CODE_PACKAGES=python3-ipykernel,python3-jupyter-client,python3-numpy,python3-pandas,python3-matplotlib,nodejs,bash,util-linux
CODE_DIR="$(dirname "$0")/code-interpreter"
if [ "$KIND" = code ]; then
	[ -r "$CODE_DIR/airlock-code.py" ] || { log "no code service in $CODE_DIR"; exit 1; }
	PACKAGES="$CODE_PACKAGES${PACKAGES:+,$PACKAGES}"
fi

case "$KIND" in
debian|code)
	include=python3,git,curl,ca-certificates,procps
	[ -n "$PACKAGES" ] && include="$include,$PACKAGES"
	step "mmdebstrap $ARG (minbase, include $include)"
	# No mirror named: mmdebstrap uses the host's apt sources.
	tarball="$OUT.tar"
	mmdebstrap --variant=minbase --include="$include" "$ARG" "$tarball" 2>&1
	step "extracting"
	tar -C "$OUT" --numeric-owner -xpf "$tarball"
	rm -f "$tarball"
	# Trim what a sandbox never needs.
	rm -rf "$OUT"/var/cache/apt/archives/*.deb "$OUT"/var/lib/apt/lists/* 2>/dev/null || true
	if [ "$KIND" = code ]; then
		step "the code service"
		# The sandbox's own user: kernels run as uid 1000, not root.
		grep -q '^user:' "$OUT/etc/passwd" || {
			echo 'user:x:1000:1000:user:/home/user:/bin/bash' >>"$OUT/etc/passwd"
			echo 'user:x:1000:' >>"$OUT/etc/group"
			echo 'user:*:19000:0:99999:7:::' >>"$OUT/etc/shadow"
		}
		mkdir -p "$OUT/home/user" "$OUT/opt/airlock/code" "$OUT/etc/airlock"
		chown 1000:1000 "$OUT/home/user"
		install -m 0644 "$CODE_DIR/airlock-code.py" "$CODE_DIR/runner.js" "$CODE_DIR/kernel.py" \
			"$CODE_DIR/airlock_loopback.py" "$OUT/opt/airlock/code/"
		install -m 0755 "$CODE_DIR/start" "$OUT/etc/airlock/start"
		# Scripts get Agg; the kernels get the inline backend (PNG results).
		rc="$OUT/etc/matplotlibrc"
		if [ -f "$rc" ] && [ ! -L "$rc" ] && grep -q '^#* *backend *:' "$rc"; then
			sed -i 's/^#* *backend *:.*/backend: Agg/' "$rc"
		else
			rm -f "$rc"
			echo 'backend: Agg' >"$rc"
		fi
		echo 'MPLBACKEND=Agg' >>"$OUT/etc/environment"
	fi
	;;
busybox)
	bb=/bin/busybox
	step "busybox rootfs"
	[ -x "$bb" ] || { log "no $bb on the host (install busybox-static)"; exit 1; }
	mkdir -p "$OUT/bin" "$OUT/sbin" "$OUT/usr/bin" "$OUT/usr/sbin" "$OUT/etc" \
		"$OUT/root" "$OUT/sys" "$OUT/var" "$OUT/run"
	cp "$bb" "$OUT/bin/busybox"
	chmod 0755 "$OUT/bin/busybox"
	# Every applet as a symlink in /bin (busybox --install -s style).
	for applet in $("$bb" --list); do
		[ "$applet" = busybox ] && continue
		[ -e "$OUT/bin/$applet" ] || ln -s busybox "$OUT/bin/$applet"
	done
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' \
		>"$OUT/etc/passwd"
	printf 'root:x:0:\ntty:x:5:\nnogroup:x:65534:\n' >"$OUT/etc/group"
	chmod 0700 "$OUT/root"
	log "busybox rootfs with $(ls "$OUT/bin" | wc -l) entries in /bin"
	;;
dir)
	[ -d "$ARG" ] || { log "not a directory: $ARG"; exit 1; }
	step "copying $ARG"
	if [ -n "${AIRLOCK_SOURCE_UID:-}" ]; then
		# Read as the requester, write as root with owners kept.
		as_source tar -C "$ARG" -cf - . | tar -C "$OUT" --numeric-owner -xpf -
	else
		cp -a --reflink=auto "$ARG"/. "$OUT"/
	fi
	;;
tar)
	step "extracting $ARG"
	as_source cat "$ARG" | tar -C "$OUT" --numeric-owner -xpf -
	;;
oci)
	tool=${AIRLOCK_OCI_TOOL:?the node manager names airlock-oci}
	step "importing the image"
	cfg="$(dirname "$OUT")/image.json"
	# The bytes come through a pipe from a process running as the
	# requester: root opens nothing of theirs. (No pipefail in sh: a
	# failed read shows as a truncated archive, so say why first.)
	if as_source test -d "$ARG"; then
		as_source test -r "$ARG" -a -x "$ARG" || { log "cannot read $ARG"; exit 1; }
		log "importing the OCI image layout $ARG"
		as_source tar -C "$ARG" -cf - . | "$tool" "$OUT" "$cfg"
	else
		as_source test -r "$ARG" -a -f "$ARG" || { log "cannot read $ARG (or not a file)"; exit 1; }
		log "importing the image archive $ARG"
		as_source cat "$ARG" | "$tool" "$OUT" "$cfg"
	fi
	;;
*)
	log "unknown kind: $KIND"
	exit 2
	;;
esac

# Trust the deployment's gateway CA (TLS interception for credential
# injection): in the system bundle and as a file of its own for
# NODE_EXTRA_CA_CERTS. The node points SSL_CERT_FILE, REQUESTS_CA_BUNDLE and
# NODE_EXTRA_CA_CERTS at these when a sandbox has credentials.
# Every rootfs has these too: mount points for the jail, and the workdir.
# (/sys only for the vm backend: the ns jail leaves it empty.)
# The tree may hold symlinks anywhere (a tar, a directory, an image): with
# airlock-oci this is done beneath OUT without following one; the shell
# version below is for running this script by hand on a trusted tree.
step "finishing the tree"
if [ -n "${AIRLOCK_OCI_TOOL:-}" ]; then
	"$AIRLOCK_OCI_TOOL" --finish "$OUT" "${AIRLOCK_CA_CERT:-}"
else
	if [ -n "${AIRLOCK_CA_CERT:-}" ] && [ -r "$AIRLOCK_CA_CERT" ]; then
		mkdir -p "$OUT/etc/airlock" "$OUT/usr/local/share/ca-certificates" "$OUT/etc/ssl/certs"
		cp "$AIRLOCK_CA_CERT" "$OUT/etc/airlock/gateway-ca.crt"
		cp "$AIRLOCK_CA_CERT" "$OUT/usr/local/share/ca-certificates/airlock-gateway.crt"
		bundle="$OUT/etc/ssl/certs/ca-certificates.crt"
		[ -L "$bundle" ] && rm -f "$bundle"   # never write through a link out of the tree
		cat "$AIRLOCK_CA_CERT" >>"$bundle"
		chmod 0644 "$OUT/etc/airlock/gateway-ca.crt" "$bundle"
		log "trusts the gateway CA"
	fi
	mkdir -p "$OUT/proc" "$OUT/dev" "$OUT/sys" "$OUT/tmp" "$OUT/work" "$OUT/etc"
	chmod 1777 "$OUT/tmp"
	chmod 0755 "$OUT/proc" "$OUT/dev" "$OUT/sys"
	[ -e "$OUT/etc/hostname" ] || echo sandbox >"$OUT/etc/hostname"
fi

# The ext4 image for the vm backend: sparse, sized rootfs * 1.3 + 256 MiB so a
# sandbox has room to write, with enough inodes for trees of small files.
# Owners and modes are copied as they are (root_owner: / itself is root's).
if [ "${AIRLOCK_TEMPLATE_EXT4:-1}" != 0 ] && command -v mkfs.ext4 >/dev/null 2>&1; then
	img="$(dirname "$OUT")/rootfs.ext4"
	kib=$(du -sk -x "$OUT" | cut -f1)
	files=$(find "$OUT" -xdev | wc -l)
	size_mib=$((kib * 13 / 10 / 1024 + 256))
	# mkfs's default is one inode per 16 KiB; ask for more when the tree
	# needs them (2x its file count, so a sandbox can add as many again).
	inodes=$((size_mib * 64))
	[ "$inodes" -lt $((files * 2)) ] && inodes=$((files * 2))
	rm -f "$img"
	truncate -s "${size_mib}M" "$img"
	step "ext4 image: ${size_mib} MiB, $files files"
	mkfs.ext4 -q -F -L rootfs -N "$inodes" -m 0 -E root_owner=0:0 -d "$OUT" "$img" 2>&1
fi
log "done"
