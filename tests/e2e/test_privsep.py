#!/usr/bin/env python3
"""Each daemon has a user of its own (issue 20, item 6).

The gateway holds the vault's private key and the interception CA's key. It
runs as a user of its own, is not dumpable, and keeps its keys in locked
memory left out of core dumps. From the uid of the api and of the node,
which face clients and sandboxes, neither its memory nor the key files can
be read, and it cannot be traced. The api has a user of its own too: it
cannot read the node's files (the tenants' BYOK keys, artifacts in transit)
nor trace the node. Credential injection still works (test_credentials
covers it end to end)."""
import ctypes
import os
import pwd

from harness import AirlockTestCase, main

libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_DETACH = 16, 17


def status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def as_uid(uid, gid, fn):
    """Run fn() in a child with exactly uid/gid (no supplementary groups);
    returns what it returned (a short string)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            out = fn()
        except BaseException as e:  # noqa: BLE001 - the child reports anything
            out = f"error {e!r}"
        os.write(w, out.encode()[:4096])
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return data.decode()


def try_read(path, n=16):
    try:
        with open(path, "rb") as f:
            f.read(n)
        return "read"
    except OSError as e:
        return f"refused {e.errno}"


def try_list(path):
    try:
        os.listdir(path)
        return "listed"
    except OSError as e:
        return f"refused {e.errno}"


def try_mem(pid):
    """Read a byte of the process's memory at its first readable mapping."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            start = int(f.readline().split("-")[0], 16)
        with open(f"/proc/{pid}/mem", "rb") as f:
            f.seek(start)
            f.read(1)
        return "read"
    except OSError as e:
        return f"refused {e.errno}"


def try_ptrace(pid):
    if libc.ptrace(PTRACE_ATTACH, pid, None, None) == 0:
        libc.ptrace(PTRACE_DETACH, pid, None, None)
        return "attached"
    return f"refused {ctypes.get_errno()}"


class PrivsepTest(AirlockTestCase):
    def test_gateway_apart_from_api_and_node(self):
        gw, api, node = (self.server.pid_of(r) for r in ("gateway", "api", "node"))
        uid = {r: int(status(p)["Uid"].split()[0]) for r, p in
               (("gateway", gw), ("api", api), ("node", node))}
        self.assertEqual(len(set(uid.values())), 3, uid)  # three users, none root
        self.assertNotIn(0, uid.values())
        node_user = pwd.getpwuid(uid["node"]).pw_name
        self.assertEqual(pwd.getpwuid(uid["gateway"]).pw_name, node_user + "-gw")
        self.assertEqual(pwd.getpwuid(uid["api"]).pw_name, node_user + "-api")

        # Not dumpable: its /proc files belong to root, not to its uid.
        self.assertEqual(os.stat(f"/proc/{gw}/mem").st_uid, 0)
        # Keys in locked memory, and mappings kept out of core dumps.
        self.assertGreater(int(status(gw)["VmLck"].split()[0]), 0)
        with open(f"/proc/{gw}/smaps") as f:
            self.assertTrue(any(l.startswith("VmFlags:") and " dd" in l for l in f))

        keys = [os.path.join(self.server.dir, "keys", k) for k in ("vault.key", "ca.key")]
        for role in ("api", "node"):
            st = status(self.server.pid_of(role))
            u, g = int(st["Uid"].split()[0]), int(st["Gid"].split()[0])
            self.assertTrue(as_uid(u, g, lambda: try_mem(gw)).startswith("refused"), role)
            self.assertTrue(as_uid(u, g, lambda: try_ptrace(gw)).startswith("refused"), role)
            for k in keys:
                self.assertTrue(as_uid(u, g, lambda: try_read(k)).startswith("refused"), (role, k))
        # The api cannot read what is the node's: the tenants' local BYOK
        # keys (made on first use: a create makes one), staging and objects.
        self.api.delete(self.api.create()["id"])
        st = status(api)
        u, g = int(st["Uid"].split()[0]), int(st["Gid"].split()[0])
        keydir = os.path.join(self.server.dir, "tenant-keys")
        self.assertTrue(os.listdir(keydir), "no tenant key was made")
        for d in ("tenant-keys", "staging", "objects"):
            self.assertTrue(as_uid(u, g, lambda: try_list(os.path.join(self.server.dir, d)))
                            .startswith("refused"), d)
        self.assertTrue(as_uid(u, g, lambda: try_mem(node)).startswith("refused"))
        # The control: the same probes work against a process of that uid
        # that is dumpable (the node itself), so the refusals above are
        # about the gateway, not the probe.
        st = status(node)
        u, g = int(st["Uid"].split()[0]), int(st["Gid"].split()[0])
        self.assertEqual(as_uid(u, g, lambda: try_mem(node)), "read")


if __name__ == "__main__":
    main()
