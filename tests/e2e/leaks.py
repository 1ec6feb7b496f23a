"""Leak audit of a running `airlockd up` instance (harness.Server): what the
host holds for it - mounts, loop devices, btrfs subvolumes, cgroups, jail
processes, sandbox links, nftables rules, QEMUs, files under run/, and the
daemons' open fds - compared with a baseline taken when it held nothing of
the sandboxes in question.

    base = leaks.snapshot(server)
    ... create, crash, delete ...
    left = leaks.audit(server, base, live=ids_still_wanted)   # [] when clean

Anything new since the baseline that does not name a live sandbox is a
leak; so is a daemon fd that names a sandbox that is not live, or a daemon
holding more fds than at the baseline (plus a small slack: a restarted
daemon opens some lazily). The audit polls for a while first: a jail's
cgroup, a lazily detached mount or a QEMU may take a moment to go.

Used by tests/e2e/test_chaos.py, bench/chaos and bench/load."""
import glob
import os
import re
import subprocess
import time

import harness

ROLES = ("api", "node", "nodemgr", "gateway")
FD_SLACK = 8
SANDBOX_ID = re.compile(r"\b(?:sb|warm)-[0-9a-z]{8}\b")


def _btrfs_subvolumes(pool):
    r = subprocess.run(["btrfs", "subvolume", "list", pool], capture_output=True, text=True)
    return {l.split(" path ", 1)[1] for l in r.stdout.splitlines() if " path " in l}


def _cgroups(data_dir):
    out = set()
    for parent in harness.cgroup_dirs(data_dir):
        ctl = os.path.basename(os.path.dirname(parent))
        for d in os.listdir(parent):
            if os.path.isdir(os.path.join(parent, d)):
                out.add(f"cgroup {ctl}/{d}")
    return out


def _cgroup_procs(data_dir):
    out = set()
    for parent in harness.cgroup_dirs(data_dir):
        for d in os.listdir(parent):
            try:
                with open(os.path.join(parent, d, "cgroup.procs")) as f:
                    out |= {f"process {p} in cgroup {d}" for p in f.read().split()}
            except OSError:
                pass
    return out


def _nft_rules(data_dir):
    h = harness.instance_hash(data_dir)
    r = subprocess.run(["nft", "list", "table", "inet", f"airlock-{h:08x}"],
                       capture_output=True, text=True)
    # rule text without handles and counters: the same rule reads the same
    return {"nft " + re.sub(r"counter packets \d+ bytes \d+ ?|# handle \d+", "", l).strip()
            for l in r.stdout.splitlines() if l.strip()}


def _qemus(data_dir):
    out = set()
    for pid in harness.procs_for(data_dir):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "qemu-system" in cmd:
            ids = SANDBOX_ID.findall(cmd)
            out.add(f"qemu {pid} {ids[0] if ids else cmd[:80]}")
    return out


def _run_files(data_dir):
    out = set()
    for sub in ("run/nodemgr", "run/nodemgr/mnt", "run/vm", "staging", "objects/sandboxes"):
        d = os.path.join(data_dir, sub)
        if os.path.isdir(d):
            out |= {f"file {sub}/{e}" for e in os.listdir(d) if SANDBOX_ID.search(e)}
    return out


def _fds(server):
    """{role: (count, {fd targets that name a sandbox})}"""
    out = {}
    for role in ROLES:
        try:
            pid = server.pid_of(role)
            names = os.listdir(f"/proc/{pid}/fd")
        except (OSError, ValueError):
            continue
        named = set()
        for fd in names:
            try:
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if SANDBOX_ID.search(t):
                named.add(f"{role} fd {fd} -> {t}")
        out[role] = (len(names), named)
    return out


def _slot_owners(data_dir):
    """{net slot: jail id} from nodemgr's state files (id=, slot=)."""
    owners = {}
    run = os.path.join(data_dir, "run", "nodemgr")
    for name in os.listdir(run) if os.path.isdir(run) else []:
        if not name.endswith(".state"):
            continue
        try:
            with open(os.path.join(run, name)) as f:
                kv = dict(l.strip().split("=", 1) for l in f if "=" in l)
            owners[int(kv["slot"])] = kv["id"]
        except (OSError, KeyError, ValueError):
            pass
    return owners


def _links(data_dir):
    """The instance's sandbox links, each named with the jail that owns its
    slot when nodemgr says (so a parked warm jail's link reads as one)."""
    owners = _slot_owners(data_dir)
    out = set()
    for l in harness.net_leftovers(data_dir):
        if l.startswith("table "):
            continue
        slot = l.split("@", 1)[0].rsplit("-", 1)[-1]
        owner = owners.get(int(slot)) if slot.isdigit() else None
        out.add(f"link {l}" + (f" ({owner})" if owner else ""))
    return out


def snapshot(server):
    """What the host holds for the instance now."""
    d = server.dir
    items = set()
    items |= {f"mount {m}" for m in harness.mounts_under(d)}
    items |= {f"loop {l}" for l in harness.loops_for(os.path.join(d, "pool.img"))}
    items |= {f"subvolume {s}" for s in _btrfs_subvolumes(os.path.join(d, "pool"))}
    items |= _cgroups(d)
    items |= _cgroup_procs(d)
    items |= _links(d)
    items |= _nft_rules(d)
    items |= _qemus(d)
    items |= _run_files(d)
    return {"items": items, "fds": _fds(server)}


def _live(item, live):
    # The warm pool's jails (warm-*) come and go on their own (refills):
    # theirs are not the sandboxes' leaks; the pool is bounded by config.
    return any(i in item for i in live) or "warm-" in item


def diff(base, now, live=()):
    """Leaks in now against base: a list of strings, [] when none."""
    left = sorted(i for i in now["items"] - base["items"] if not _live(i, live))
    for role, (count, named) in now["fds"].items():
        left += sorted(n for n in named if not _live(n, live))
        before = base["fds"].get(role, (count, set()))[0]
        if count > before + FD_SLACK:
            left.append(f"{role} holds {count} fds, {before} at the baseline")
    return left


def audit(server, base, live=(), wait_s=30):
    """diff() once it is empty, or after wait_s: what is still left."""
    deadline = time.time() + wait_s
    while True:
        left = diff(base, snapshot(server), live)
        if not left or time.time() > deadline:
            return left
        time.sleep(0.5)

