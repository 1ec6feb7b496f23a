#!/usr/bin/env python3
"""Each daemon has a user of its own (issue 20, item 6).

The gateway holds the vault's private key and the interception CA's key. It
runs as a user of its own, is not dumpable, and keeps its keys in locked
memory left out of core dumps. From the uid of the api and of the node,
which face clients and sandboxes, neither its memory nor the key files can
be read, and it cannot be traced. The api has a user of its own too: it
cannot read the node's files (the tenants' BYOK keys, artifacts in transit)
nor trace the node. Credential injection still works (test_credentials
covers it end to end).

The sockets between them are the shared group's, so each checks the peer's
uid per route (issue 34, item 7): the gateway cannot act for a tenant on
the node, nor the api tell the gateway which address is which sandbox."""
import ctypes
import json
import os
import pwd
import socket

from harness import AirlockTestCase, main

libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_DETACH = 16, 17


def status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def as_uid(uid, gid, fn, groups=()):
    """Run fn() in a child with exactly uid/gid (and only the supplementary
    groups given); returns what it returned (a short string)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups(list(groups))
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


def unix_call(path, method, target, headers=(), body=b""):
    """One HTTP/1.0 request on a unix socket: "STATUS BODY" (the body's first
    200 bytes), or "refused ERRNO" when the socket cannot be reached."""
    def call():
        head = f"{method} {target} HTTP/1.0\r\nHost: x\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers)
        head += f"Content-Length: {len(body)}\r\n\r\n"
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(30)
                s.connect(path)
                s.sendall(head.encode() + body)
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
        except OSError as e:
            return f"refused {e.errno}"
        status_line, _, rest = data.partition(b"\r\n")
        return status_line.split()[1].decode() + " " + \
            rest.partition(b"\r\n\r\n")[2][:200].decode(errors="replace")
    return call


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


    def test_sockets_check_the_peer(self):
        """node.sock and gateway.sock are 0660 for the shared group, which
        the api and the gateway both have; each route says which roles may
        call it, checked by the peer's uid (SO_PEERCRED). A compromised
        gateway must not act for a tenant on the node (run commands in
        every sandbox), nor a compromised api tell the gateway which
        address is which sandbox (whose credentials are injected)."""
        ids = {}
        for role in ("gateway", "api", "node"):
            st = status(self.server.pid_of(role))
            ids[role] = (int(st["Uid"].split()[0]), int(st["Gid"].split()[0]))
        shared = ids["node"][1]   # the node's group: the sockets' group
        node_sock = os.path.join(self.server.dir, "run", "node.sock")
        gw_sock = os.path.join(self.server.dir, "run", "gateway.sock")
        tenant = (("X-Airlock-Tenant", "admin"), ("X-Airlock-Admin", "1"))

        def call(role, path, method, target, headers=(), body=b""):
            u, g = ids[role]
            return as_uid(u, g, unix_call(path, method, target, headers, body), groups=[shared])

        def refused(out, what):
            self.assertTrue(out.startswith("403 "), (what, out))
            err = json.loads(out[4:])["error"]
            self.assertEqual(err["code"], "forbidden", (what, out))
            self.assertIn("not for this peer", err["message"], what)

        # the gateway on the node: only GET /internal/network
        refused(call("gateway", node_sock, "GET", "/v1/sandboxes", tenant), "list")
        refused(call("gateway", node_sock, "POST", "/v1/sandboxes", tenant + (
            ("Content-Type", "application/json"),), b'{"template":"busybox"}'), "create")
        refused(call("gateway", node_sock, "GET", "/internal/ready"), "ready")
        refused(call("gateway", node_sock, "GET", "/v1/sandboxes/x/ports/80/", tenant), "port")
        self.assertTrue(call("gateway", node_sock, "GET", "/internal/network",
                             (("X-Airlock-Tenant", "gateway"),)).startswith("200 "))
        # the api on the node: its routes, not the gateway's
        self.assertTrue(call("api", node_sock, "GET", "/v1/sandboxes", tenant)
                        .startswith("200 "))
        self.assertTrue(call("api", node_sock, "GET", "/internal/ready").startswith("200 "))
        refused(call("api", node_sock, "GET", "/internal/network",
                     (("X-Airlock-Tenant", "gateway"),)), "network")

        # the api on the gateway: nothing; the node: all it uses
        put = b'{"addr":"10.255.255.254","network":{}}'
        for method, target, body in (("PUT", "/sandboxes/x", put),
                                     ("DELETE", "/sandboxes/x", b""),
                                     ("GET", "/sandboxes/x/log", b""),
                                     ("GET", "/stats", b"")):
            refused(call("api", gw_sock, method, target, (), body), (method, target))
        self.assertTrue(call("node", gw_sock, "GET", "/stats").startswith("200 "))
        self.assertTrue(call("node", gw_sock, "PUT", "/sandboxes/x", (), put)
                        .startswith("204 "))
        self.assertTrue(call("node", gw_sock, "DELETE", "/sandboxes/x").startswith("20"))
        # root (`up` itself, the tests, an operator) reads the stats
        self.assertTrue(unix_call(gw_sock, "GET", "/stats")().startswith("200 "))
        # each refusal is a log line naming the uid
        log = self.server.log()
        self.assertIn(f"uid {ids['gateway'][0]}", log)
        self.assertIn(f"uid {ids['api'][0]}", log)


class OneUserTest(AirlockTestCase):
    """Roles that run as one user share its uid, which then holds each of
    their roles: everything between them works, and another user of the
    shared group is still refused."""
    extra_args = ("--set", "api_user=airlock", "--set", "gateway_user=airlock")

    def test_one_uid_holds_every_role(self):
        st = status(self.server.pid_of("node"))
        u, g = int(st["Uid"].split()[0]), int(st["Gid"].split()[0])
        for role in ("api", "gateway"):
            self.assertEqual(int(status(self.server.pid_of(role))["Uid"].split()[0]), u)
        # api → node, node → gateway (the sandbox's address), and back
        sid = self.api.create()["id"]
        code, out, _, _ = self.api.exec(sid, ["echo", "hi"])
        self.assertEqual((code, out), (0, b"hi\n"))
        self.assertIn("addr", self.api.call("GET", f"/v1/sandboxes/{sid}/network"))
        self.api.delete(sid)

        node_sock = os.path.join(self.server.dir, "run", "node.sock")
        gw_sock = os.path.join(self.server.dir, "run", "gateway.sock")
        tenant = (("X-Airlock-Tenant", "admin"), ("X-Airlock-Admin", "1"))
        put = b'{"addr":"10.255.255.254","network":{}}'
        self.assertTrue(as_uid(u, g, unix_call(node_sock, "GET", "/v1/sandboxes", tenant))
                        .startswith("200 "))
        self.assertTrue(as_uid(u, g, unix_call(gw_sock, "PUT", "/sandboxes/x", (), put))
                        .startswith("204 "))
        self.assertTrue(as_uid(u, g, unix_call(gw_sock, "DELETE", "/sandboxes/x"))
                        .startswith("20"))
        # another user given the group: the file lets it in, its uid does not
        nobody = pwd.getpwnam("nobody")
        for path, method, target, headers, body in (
                (node_sock, "GET", "/v1/sandboxes", tenant, b""),
                (gw_sock, "PUT", "/sandboxes/x", (), put)):
            out = as_uid(nobody.pw_uid, nobody.pw_gid,
                         unix_call(path, method, target, headers, body), groups=[g])
            self.assertTrue(out.startswith("403 "), (target, out))


if __name__ == "__main__":
    main()
