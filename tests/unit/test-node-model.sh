#!/bin/sh
# test-node-model.sh NM LIBRARY SRC - fails when a room of the node calls
# what is above it: the sandbox model (src/node/model) any feature, or a
# feature's room one its row does not list.
#
# src/node is in layers (docs/INTERNALS.md, "The node's rooms"): the model
# at the bottom (struct sandbox, its map, states and references, the hooks
# the features register), feature rooms above it, and the handlers on top.
# The layering table of docs/INTERNALS.md gives each room (a `node/R` row)
# the rooms it may include; test-layering checks the includes, this checks
# the calls: no object of room R may reference a symbol that an object of
# the node's library (airlock_node, LIBRARY) outside R and the node/ rooms
# of R's row defines. A room's objects are named by its sources under
# SRC/src/node/R (base names are unique in the tree). ctest runs this with
# `nm` and the library as built (CMakeLists.txt).
nm_bin=$1
lib=$2
src=$3
doc="$src/docs/INTERNALS.md"
if [ -z "$nm_bin" ] || [ ! -f "$lib" ] || [ ! -f "$doc" ] || [ ! -d "$src/src/node/model" ]; then
	echo "usage: $0 NM LIBRARY SRC" >&2
	exit 2
fi
# "R: node/X node/Y ..." for every node/R row of the layering table
rules=$(sed -n '/<!-- layering:begin -->/,/<!-- layering:end -->/p' "$doc" |
	awk -F'|' 'NF >= 5 { gsub(/ /, "", $2) } $2 ~ /^node\// {
		out = substr($2, 6) ":"
		n = split($4, w, " ")
		for (i = 1; i <= n; i++) if (w[i] ~ /^node\//) out = out " " substr(w[i], 6)
		print out }')
for d in "$src"/src/node/*/; do
	room=$(basename "$d")
	printf '%s\n' "$rules" | grep -q "^$room:" && continue
	echo "FAIL: src/node/$room has no node/$room row in the layering table of $doc" >&2
	exit 1
done
# -A: each line names its object, as LIBRARY:OBJECT: ...
if ! all=$("$nm_bin" -A "$lib"); then
	echo "FAIL: $nm_bin could not list the symbols of $lib" >&2
	exit 1
fi
# OBJECT TYPE SYMBOL for every line
rows=$(printf '%s\n' "$all" | awk '{ n = split($1, p, ":"); print p[2], $(NF - 1), $NF }')
objs() { for f in "$src"/src/node/"$1"/*.c; do [ -f "$f" ] && basename "$f"; done | sed 's/$/.o/'; }
fail=0
checked=""
for room in $(printf '%s\n' "$rules" | cut -d: -f1); do
	mine=$(objs "$room")
	ok="$mine"
	for r in $(printf '%s\n' "$rules" | grep "^$room:" | cut -d: -f2); do
		ok="$ok
$(objs "$r")"
	done
	# symbols defined outside this room and the rooms its row lists
	above=$(printf '%s\n' "$rows" | awk -v keep="$ok" '
		BEGIN { n = split(keep, k, "\n"); for (i = 1; i <= n; i++) if (k[i] != "") in_[k[i]] = 1 }
		$2 ~ /^[A-TV-Z]$/ && !($1 in in_) { print $3 }' | sort -u)
	refs=$(printf '%s\n' "$rows" | awk -v keep="$mine" '
		BEGIN { n = split(keep, k, "\n"); for (i = 1; i <= n; i++) if (k[i] != "") in_[k[i]] = 1 }
		$2 == "U" && ($1 in in_) { print $1, $3 }')
	if [ -z "$refs" ] || [ -z "$above" ]; then
		echo "FAIL: no objects of src/node/$room in $lib, or none outside it: not the library we meant?" >&2
		exit 1
	fi
	bad=$(printf '%s\n' "$refs" | awk -v syms="$above" '
		BEGIN { n = split(syms, s, "\n"); for (i = 1; i <= n; i++) up[s[i]] = 1 }
		$2 in up { print "  " $1 " references " $2 }')
	if [ -n "$bad" ]; then
		echo "FAIL: src/node/$room references what its row in $doc does not list:" >&2
		printf '%s\n' "$bad" >&2
		fail=1
	fi
	checked="$checked $room"
done
[ "$fail" = 0 ] || exit 1
echo "ok: no object of the node's rooms ($checked ) references a symbol above it"
