#!/usr/bin/env python3
"""test-names.py SOURCE_DIR BUILD_DIR NM - one name, one home.

Fails when
  - two .c files under src/ share a base name (only the programs' main.c
    may): a reader who is told "suspend.c" must know which one;
  - a global symbol (function or data) is defined by two components that
    are linked into one program. Each component is a static library, and
    a linker picks the first archive member that defines a name, so two
    components defining `snapshot_create` link without a word, and which
    one runs depends on the order of the libraries.

A component is a library built from one folder (libairlock_<folder>.a) or a
program's own objects (airlockd's src/airlockd, the CLI's src/cli). The
programs and what they link are read from the build's link commands, so a
new component or program is checked without editing this file.
"""
import collections
import glob
import os
import re
import subprocess
import sys


def same_base_names(src):
    seen = collections.defaultdict(list)
    for dirpath, _, files in os.walk(src):
        for f in files:
            if f.endswith(".c"):
                seen[f].append(os.path.relpath(os.path.join(dirpath, f), src))
    return [f"{name} is the base name of {', '.join(sorted(paths))}"
            for name, paths in sorted(seen.items()) if len(paths) > 1 and name != "main.c"]


def defined(nm, path):
    """Global symbols a .a or .o defines (text, data, bss, read-only)."""
    out = subprocess.run([nm, "-g", "--defined-only", path], capture_output=True,
                         text=True, check=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRV":
            syms.add(parts[2])
    return syms


def programs(build):
    """{program: [component files]} from CMake's link.txt of each program."""
    progs = {}
    for link in glob.glob(os.path.join(build, "CMakeFiles", "*.dir", "link.txt")):
        prog = os.path.basename(os.path.dirname(link))[:-len(".dir")]
        if prog.startswith(("test-", "fuzz-")) or prog.startswith("airlock_"):
            continue   # tests link a component and its stand-ins; libraries have no link
        cmd = open(link).read().split()
        libs = [os.path.join(build, w) for w in cmd if re.fullmatch(r"libairlock_\w+\.a", w)]
        own = sorted(glob.glob(os.path.join(build, "CMakeFiles", prog + ".dir", "src", "**", "*.o"),
                               recursive=True))
        if libs or own:
            progs[prog] = libs + own
    return progs


def component(path, build):
    m = re.search(r"libairlock_(\w+)\.a$", path)
    if m:
        return m.group(1)
    rel = os.path.relpath(path, build).split(os.sep)
    return rel[3] if len(rel) > 3 else rel[-1]   # CMakeFiles/P.dir/src/<folder>/...


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: test-names.py SOURCE_DIR BUILD_DIR NM")
    top, build, nm = sys.argv[1:]
    fails = same_base_names(os.path.join(top, "src"))
    progs = programs(build)
    if "airlockd" not in progs or "airlock" not in progs:
        fails.append(f"found no link command of airlockd or airlock under {build}: not a build dir?")
    checked = 0
    for prog, files in sorted(progs.items()):
        owners = collections.defaultdict(set)
        for f in files:
            for s in defined(nm, f):
                owners[s].add(component(f, build))
        checked += len(owners)
        for s, comps in sorted(owners.items()):
            if len(comps) > 1:
                fails.append(f"{prog}: {s} is defined by {' and '.join(sorted(comps))}")
    for f in fails:
        print("FAIL: " + f, file=sys.stderr)
    if fails:
        return 1
    print(f"ok: no base name twice under src/; {checked} global names in "
          f"{len(progs)} programs, each defined by one component")
    return 0


if __name__ == "__main__":
    sys.exit(main())
