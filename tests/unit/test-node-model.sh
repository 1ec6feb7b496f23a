#!/bin/sh
# test-node-model.sh NM LIBRARY SRC - fails when the node's sandbox model
# references a feature, or a room of the node one above it.
#
# src/node is in layers (docs/INTERNALS.md, "The node's rooms"): the model
# (src/node/model: struct sandbox, its map, states and references, the hooks
# the features register) at the bottom, then the rooms of $rooms in that
# order, then the rest of src/node. Calls go down, never up. So no
# object of a room may reference a symbol that an object of the node's
# library (airlock_node, LIBRARY) outside that room and the rooms below it
# defines. A room's objects are named by its sources under SRC (base names
# are unique in the tree). ctest runs this with `nm` and the library as
# built (CMakeLists.txt).
nm_bin=$1
lib=$2
src=$3
rooms="model proc cluster artifacts net tmpl life suspend"      # bottom first
if [ -z "$nm_bin" ] || [ ! -f "$lib" ] || [ ! -d "$src/src/node/model" ]; then
	echo "usage: $0 NM LIBRARY SRC" >&2
	exit 2
fi
# -A: each line names its object, as LIBRARY:OBJECT: ...
if ! all=$("$nm_bin" -A "$lib"); then
	echo "FAIL: $nm_bin could not list the symbols of $lib" >&2
	exit 1
fi
# OBJECT TYPE SYMBOL for every line
rows=$(printf '%s\n' "$all" | awk '{ n = split($1, p, ":"); print p[2], $(NF - 1), $NF }')
fail=0
below=""
for room in $rooms; do
	mine=$(for f in "$src"/src/node/"$room"/*.c; do basename "$f"; done | sed 's/$/.o/')
	below="$below
$mine"
	# symbols defined outside this room and the rooms below it
	above=$(printf '%s\n' "$rows" | awk -v keep="$below" '
		BEGIN { n = split(keep, k, "\n"); for (i = 1; i <= n; i++) if (k[i] != "") in_[k[i]] = 1 }
		$2 ~ /^[A-TV-Z]$/ && !($1 in in_) { print $3 }' | sort -u)
	refs=$(printf '%s\n' "$rows" | awk -v keep="$mine" '
		BEGIN { n = split(keep, k, "\n"); for (i = 1; i <= n; i++) if (k[i] != "") in_[k[i]] = 1 }
		$2 == "U" && ($1 in in_) { print $1, $3 }')
	if [ -z "$refs" ] || [ -z "$above" ]; then
		echo "FAIL: no objects of src/node/$room in $lib, or none above it: not the library we meant?" >&2
		exit 1
	fi
	bad=$(printf '%s\n' "$refs" | awk -v syms="$above" '
		BEGIN { n = split(syms, s, "\n"); for (i = 1; i <= n; i++) up[s[i]] = 1 }
		$2 in up { print "  " $1 " references " $2 }')
	if [ -n "$bad" ]; then
		echo "FAIL: src/node/$room references what is above it:" >&2
		printf '%s\n' "$bad" >&2
		fail=1
	fi
done
[ "$fail" = 0 ] || exit 1
echo "ok: no object of src/node/{$(echo $rooms | tr ' ' ,)} references a symbol of the node above it"
