#!/bin/sh
# test-node-model.sh NM LIBRARY SRC - fails when the node's sandbox model
# references a feature.
#
# src/node/model/ is the bottom room of the node: struct sandbox, its map,
# states and references, and the hooks the features register
# (docs/INTERNALS.md, "The node's rooms"). The features (processes,
# snapshots, schedule, suspend, ...) and the handlers sit above it and call
# down, never the reverse. So no object of the model room may reference a
# symbol that another object of the node's library (airlock_node, LIBRARY)
# defines. The model room's objects are named by its sources under SRC
# (base names are unique in the tree). ctest runs this with `nm` and the
# library as built (CMakeLists.txt).
nm_bin=$1
lib=$2
src=$3
if [ -z "$nm_bin" ] || [ ! -f "$lib" ] || [ ! -d "$src/src/node/model" ]; then
	echo "usage: $0 NM LIBRARY SRC" >&2
	exit 2
fi
model=$(for f in "$src"/src/node/model/*.c; do basename "$f"; done | sed 's/$/.o/')
if [ -z "$model" ]; then
	echo "FAIL: no source in $src/src/node/model" >&2
	exit 1
fi
# -A: each line names its object, as LIBRARY:OBJECT: ...
if ! all=$("$nm_bin" -A "$lib"); then
	echo "FAIL: $nm_bin could not list the symbols of $lib" >&2
	exit 1
fi
# OBJECT TYPE SYMBOL for every line
rows=$(printf '%s\n' "$all" | awk '{ n = split($1, p, ":"); print p[2], $(NF - 1), $NF }')
is_model() { printf '%s\n' "$model" | grep -qxF "$1"; }
above=$(printf '%s\n' "$rows" | while read -r obj type sym; do
	case $type in [A-TV-Z]) is_model "$obj" || echo "$sym";; esac
done | sort -u)
refs=$(printf '%s\n' "$rows" | while read -r obj type sym; do
	[ "$type" = U ] && is_model "$obj" && echo "$obj $sym"
done)
if [ -z "$refs" ] || [ -z "$above" ]; then
	echo "FAIL: $lib has no model objects or none above them: not the library we meant?" >&2
	exit 1
fi
bad=$(printf '%s\n' "$refs" | while read -r obj sym; do
	printf '%s\n' "$above" | grep -qxF "$sym" && echo "$obj calls $sym"
done)
if [ -n "$bad" ]; then
	echo "FAIL: the node's model references what is above it:" >&2
	printf '%s\n' "$bad" >&2
	exit 1
fi
echo "ok: no object of src/node/model references a symbol of the node above it"
