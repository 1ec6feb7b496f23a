#!/usr/bin/env python3
"""test-layering.py SOURCE_DIR - fails when a source file includes a header
that docs/INTERNALS.md's layering table does not let its folder or room use.

The table between the layering markers has a row per folder under src/ and a
row per room: a subfolder that the table names (`node/model`,
`nodemgr/jail`). A file belongs to the deepest row that contains it: a file
in src/nodemgr/jail/ to `nodemgr/jail`, one in src/nodemgr/ (or in a
subfolder with no row, such as src/backend/vm/) to `nodemgr`. Every quoted
include is resolved to the header it names, relative to the file, and so to
the row that header belongs to. A file may include its own row's headers and
those of the rows its row lists under "may include"; anything else fails.

So the rooms inside a folder point one way, like the folders: a room that
includes the top of its folder, or a higher room, fails unless the table
says so, and the table is what a newcomer reads. A row for a folder or room
that does not exist fails too, so the table cannot describe a tree that is
gone.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def rows_of(doc):
    text = open(doc, encoding="utf-8").read()
    m = re.search(r"<!-- layering:begin -->(.*?)<!-- layering:end -->", text, re.S)
    if not m:
        sys.exit(f"FAIL: no layering table in {doc}")
    rows = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 5 or cells[1] in ("folder", "") or cells[1].startswith("---"):
            continue
        rows[cells[1]] = set(cells[3].split())
    return rows


def owner(rel, rows):
    """The row a path under src/ (relative, with /) belongs to, or None."""
    parts = rel.split("/")[:-1]   # the folders
    for n in range(len(parts), 0, -1):
        name = "/".join(parts[:n])
        if name in rows:
            return name
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test-layering.py SOURCE_DIR (with src/ and docs/INTERNALS.md)")
    top = sys.argv[1]
    src = os.path.join(top, "src")
    rows = rows_of(os.path.join(top, "docs", "INTERNALS.md"))
    fails = []

    for name in sorted(rows):
        if not os.path.isdir(os.path.join(src, name)):
            fails.append(f"the layering table names {name}, but there is no src/{name}/")
        for used in sorted(rows[name]):
            if used not in rows:
                fails.append(f"row {name} may include {used}, which has no row of its own")
    for d in sorted(os.listdir(src)):
        if os.path.isdir(os.path.join(src, d)) and d not in rows:
            fails.append(f"src/{d} is not in the layering table of docs/INTERNALS.md")

    for dirpath, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            me = owner(rel, rows)
            if me is None:
                continue   # reported above: its folder has no row
            for inc in INCLUDE.findall(open(path, encoding="utf-8", errors="replace").read()):
                target = os.path.normpath(os.path.join(dirpath, inc))
                trel = os.path.relpath(target, src).replace(os.sep, "/")
                if trel.startswith("../") or not os.path.exists(target):
                    continue   # outside src/ (generated, tests) or not a file of ours
                them = owner(trel, rows)
                if them is None or them == me or them in rows[me]:
                    continue
                fails.append(f"src/{rel} includes src/{trel} ({them}), "
                             f"which {me} may not (docs/INTERNALS.md)")
    for f in fails:
        print("FAIL: " + f, file=sys.stderr)
    if fails:
        return 1
    print("ok: every include under src/ follows the layering table of docs/INTERNALS.md "
          f"({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
