#!/usr/bin/env python3
"""test-doc-links: every relative link in README.md and docs/ resolves.

A link [text](path) must name a file or directory of the tree (relative to the
page that has it), and a #fragment must be a heading of the page it points to,
spelt as GitHub spells heading anchors. Links to other sites are not followed.
Usage: test-doc-links.py SOURCE_DIR
"""
import os
import re
import sys

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def strip_code(text):
    """The page without fenced blocks and inline code, lines kept."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```|~~~)", line)
        if m:
            fence = None if fence == m.group(1) else (fence or m.group(1))
            out.append("")
            continue
        out.append("" if fence else re.sub(r"`[^`]*`", "", line))
    return out


def slug(heading):
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation
    other than - and _ removed, spaces to -."""
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # [text](url) -> text
    s = s.replace("`", "").replace("*", "")
    s = s.lower()
    s = "".join(ch for ch in s if ch.isalnum() or ch in " -_")
    return s.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        fence = None
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"^\s*(```|~~~)", line)
                if m:
                    fence = None if fence == m.group(1) else (fence or m.group(1))
                    continue
                h = None if fence else HEADING.match(line.rstrip("\n"))
                if not h:
                    continue
                base = slug(h.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else "%s-%d" % (base, n))
        cache[path] = found
    return cache[path]


README_MAX_LINES = 260


def pages(src):
    yield os.path.join(src, "README.md")
    for root, _, files in os.walk(os.path.join(src, "docs")):
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(root, name)


def main():
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    bad = checked = 0
    for page in pages(src):
        with open(page, encoding="utf-8") as f:
            lines = strip_code(f.read())
        for lineno, line in enumerate(lines, 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                    continue   # http:, https:, mailto: ...
                checked += 1
                path, _, frag = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                where = "%s:%d: %s" % (os.path.relpath(page, src), lineno, target)
                if not os.path.exists(dest):
                    print("%s: no such file" % where)
                    bad += 1
                elif frag and dest.endswith(".md") and frag not in anchors(dest):
                    print("%s: no heading with anchor #%s in %s" %
                          (where, frag, os.path.relpath(dest, src)))
                    bad += 1
    # The README is the front page: the two commands, what Airlock is, a quick
    # start, concepts, the CLI and links; reference lives in docs/.
    with open(os.path.join(src, "README.md"), encoding="utf-8") as f:
        n = sum(1 for _ in f)
    if n > README_MAX_LINES:
        print("README.md: %d lines, more than %d: move reference to docs/" % (n, README_MAX_LINES))
        bad += 1
    if bad:
        print("test-doc-links: %d of %d links broken" % (bad, checked))
        return 1
    print("test-doc-links: ok (%d links)" % checked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
