#!/bin/sh
# test-layering.sh SRC_DIR - fails when a source file includes a header of a
# folder that docs/INTERNALS.md does not let its folder include.
#
# The table between the layering markers in docs/INTERNALS.md gives, for
# each folder under src/, the folders it may include; this reads it and
# every `#include "../X/..."` (or "../../X/...") under src/. So the picture
# a newcomer reads and the arrows in the code cannot drift apart: an arrow
# added without the table, or a folder the table does not know, fails here.
top=$1
doc="$top/docs/INTERNALS.md"
if [ ! -d "$top/src" ] || [ ! -f "$doc" ]; then
	echo "usage: $0 SOURCE_DIR (with src/ and docs/INTERNALS.md)" >&2
	exit 2
fi
rules=$(sed -n '/<!-- layering:begin -->/,/<!-- layering:end -->/p' "$doc" |
	awk -F'|' 'NF >= 5 && $2 !~ /folder|---/ { gsub(/ /, "", $2); print $2 ":" $4 }')
if [ -z "$rules" ]; then
	echo "FAIL: no layering table in $doc" >&2
	exit 1
fi
fail=0
for dir in "$top"/src/*/; do
	folder=$(basename "$dir")
	allowed=$(printf '%s\n' "$rules" | awk -F: -v f="$folder" '$1 == f { print $2; found = 1 }
		END { if (!found) print "MISSING" }')
	if [ "$allowed" = "MISSING" ]; then
		echo "FAIL: src/$folder is not in the layering table of docs/INTERNALS.md" >&2
		fail=1
		continue
	fi
	# every folder a file of this one includes, as "file folder"
	uses=$(grep -rHo '^#include "\(\.\./\)\+[a-z_-]*/' "$dir" --include='*.c' --include='*.h' |
		sed 's#^\([^:]*\):\#include "\(\.\./\)*\([a-z_-]*\)/$#\1 \3#')
	printf '%s\n' "$uses" | while read -r file used; do
		[ -n "$used" ] || continue
		[ "$used" = "$folder" ] && continue
		# backend/ns and backend/vm include ../backend.h as "../backend.h":
		# that is the folder itself, seen from a subfolder.
		case " $allowed " in
		*" $used "*) ;;
		*) echo "FAIL: ${file#"$top"/} includes $used/, which src/$folder may not (docs/INTERNALS.md)" >&2
		   echo x ;;
		esac
	done | grep -q x && fail=1
done
if [ "$fail" != 0 ]; then
	exit 1
fi
echo "ok: every include under src/ follows the layering table of docs/INTERNALS.md"
