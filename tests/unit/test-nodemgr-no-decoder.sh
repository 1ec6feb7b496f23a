#!/bin/sh
# test-nodemgr-no-decoder.sh NM LIBRARY - fails when the root helper's code
# can decode bytes from inside a sandbox.
#
# nodemgr runs as root; what a guest channel carries comes from inside a
# jail. So no object of its library (airlock_nodemgr, LIBRARY) may
# reference the channel protocol's decoder in src/proto: frame parsing and
# validation, field iteration and lookup, the proto_dec_* of each message,
# the receive buffer (proto_rx_*). Encoding frames to send (proto_enc_*) is
# fine. ctest runs this with `nm` and the library as built (CMakeLists.txt).
nm_bin=$1
lib=$2
if [ -z "$nm_bin" ] || [ ! -f "$lib" ]; then
	echo "usage: $0 NM LIBRARY" >&2
	exit 2
fi
# -A: each line names the object it is about.
if ! syms=$("$nm_bin" -A -u "$lib"); then
	echo "FAIL: $nm_bin could not list the symbols of $lib" >&2
	exit 1
fi
if [ -z "$syms" ]; then
	echo "FAIL: $lib references no symbol at all: not the library we meant?" >&2
	exit 1
fi
bad=$(printf '%s\n' "$syms" | grep -E ' U proto_(parse|validate_fields|iter_|find|get_|dec_|rx_)')
if [ -n "$bad" ]; then
	echo "FAIL: nodemgr calls the channel protocol's decoder:" >&2
	printf '%s\n' "$bad" >&2
	exit 1
fi
echo "ok: no object of $(basename "$lib") references the decoder"
