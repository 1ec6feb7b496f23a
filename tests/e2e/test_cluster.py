"""Two `airlockd up` instances on one machine, separate data dirs and ports,
one database: a two-node cluster. Either api serves every sandbox; creates
are placed (or go where "node" says); the Idempotency-Key holds across the
two apis; a node that stops beating is marked lost, its sandboxes answer 503
through the other api, and it comes back as a new generation."""
import json
import os
import shutil
import tempfile
import subprocess
import sys
import signal
import threading
import time
import unittest

from harness import (CLI, Client, S3Server, Server, main, node_user, shared_db_args,
                     sigstop, stop_and_check, until)

HEARTBEAT_TIMEOUT = 4


def crc32c_raw(data, crc=0):
    """CRC-32C as btrfs send streams use it: seed 0, no inversion."""
    table = crc32c_raw.table
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


crc32c_raw.table = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    crc32c_raw.table.append(_c)


def tamper_btrfs_stream(data):
    """A valid send stream with one byte of file data changed: the last byte
    of the first WRITE command (its DATA comes last), its CRC made again. The
    stream's uuid and structure are the same; only its digest tells."""
    import struct
    assert data[:13] == b"btrfs-stream\0"
    off = 17
    while off + 10 <= len(data):
        ln, cmd, _ = struct.unpack_from("<IHI", data, off)
        if cmd == 15 and ln > 64:   # BTRFS_SEND_C_WRITE
            buf = bytearray(data[off:off + 10 + ln])
            buf[-1] ^= 0xFF
            struct.pack_into("<I", buf, 6, 0)
            struct.pack_into("<I", buf, 6, crc32c_raw(bytes(buf)))
            return data[:off] + bytes(buf) + data[off + 10 + ln:]
        off += 10 + ln
    raise AssertionError("no WRITE command in the stream")


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.db = shared_db_args()
        # one object store for both: the S3-compatible server (a directory
        # of the daemons' user where its npm packages are missing)
        cls.s3 = S3Server.start()
        cls.store = tempfile.mkdtemp(prefix="airlock-store-")
        pw = node_user()
        os.chown(cls.store, pw.pw_uid, pw.pw_gid)
        if cls.s3:
            os.environ["AWS_ACCESS_KEY_ID"] = os.environ["AWS_SECRET_ACCESS_KEY"] = "S3RVER"
        else:
            print("note: no S3 server (tests/s3/setup.sh): a file:// store", file=sys.stderr)
        # the tenants' local BYOK keys: one directory for both nodes, or a
        # sandbox suspended on one could not be opened on the other
        cls.keys = tempfile.mkdtemp(prefix="airlock-tenant-keys-")
        extra = ("--set", f"heartbeat_timeout_s={HEARTBEAT_TIMEOUT}", "--object-store",
                 cls.s3.url if cls.s3 else "file://" + cls.store,
                 "--set", f"tenant_key_dir={cls.keys}")
        cls.extra = extra
        cls.a = Server(extra_args=("--node-name", "na") + extra + cls.db.args)
        cls.b = Server(extra_args=("--node-name", "nb") + extra + cls.db.args)
        try:
            cls.a.start()
            cls.b.start()
        except Exception:
            cls.tearDownClass()
            raise
        cls.ca, cls.cb = cls.a.client(), cls.b.client()

    @classmethod
    def tearDownClass(cls):
        try:
            for s in (cls.b, cls.a):
                if s.proc:
                    stop_and_check(s)
                else:
                    s.cleanup()
        finally:
            cls.db.close()
            if cls.s3:
                cls.s3.stop()
            shutil.rmtree(cls.store, ignore_errors=True)
            shutil.rmtree(cls.keys, ignore_errors=True)

    def wait_nodes(self, client, want, timeout=30):
        deadline = time.time() + timeout
        while True:
            got = {n["name"]: n["state"] for n in client.call("GET", "/v1/nodes")["nodes"]}
            if all(got.get(k) == v for k, v in want.items()) or time.time() > deadline:
                return got
            time.sleep(0.2)

    def test_nodes_listed_by_either_api(self):
        for c, me in ((self.ca, "na"), (self.cb, "nb")):
            nodes = {n["name"]: n for n in c.call("GET", "/v1/nodes")["nodes"]}
            self.assertEqual(set(nodes), {"na", "nb"})
            for name, n in nodes.items():
                self.assertEqual(n["state"], "up")
                self.assertEqual(n["self"], name == me)
                self.assertTrue(n["url"].startswith("http://127.0.0.1:"), n)
                self.assertRegex(n["last_heartbeat"], r"^\d{4}-\d\d-\d\dT")
                cap = n["capacity"]
                self.assertGreater(cap["cpus"], 0)
                self.assertGreater(cap["disk_free_mb"], 0)
                self.assertIn("ns", cap["backends"])
                self.assertTrue(any(t.startswith("busybox/") for t in cap["templates"]), cap)
        # admin only
        _, tc = self.new_tenant("cl-nodes")
        self.assertEqual(tc.raw("GET", "/v1/nodes")[0], 403)

    def new_tenant(self, name):
        t = self.ca.call("POST", "/v1/tenants", {"name": name})
        k = self.ca.call("POST", "/v1/keys", {"tenant": t["id"]})
        return t, Client(self.a.addr, k["key"])

    def test_either_api_serves_every_sandbox(self):
        on_b = self.ca.create(template="busybox", node="nb")
        on_a = self.cb.create(template="busybox", node="na")
        try:
            self.assertEqual(on_b["node"], "nb")
            self.assertEqual(on_a["node"], "na")
            for c in (self.ca, self.cb):
                self.assertEqual(c.call("GET", f"/v1/sandboxes/{on_b['id']}")["node"], "nb")
                listed = {s["id"]: s["node"] for s in c.call("GET", "/v1/sandboxes")["sandboxes"]}
                self.assertEqual(listed.get(on_a["id"]), "na")
                self.assertEqual(listed.get(on_b["id"]), "nb")
            # exec and files through the api of the other node
            code, out, _, _ = self.ca.exec(on_b["id"], ["sh", "-c", "echo $(hostname)"])
            self.assertEqual((code, out), (0, (on_b["id"] + "\n").encode()))
            self.cb.call("PUT", f"/v1/sandboxes/{on_a['id']}/files?path=/tmp/x", b"across",
                         {"Content-Type": "application/octet-stream"})
            st, body, _ = self.ca.raw("GET", f"/v1/sandboxes/{on_a['id']}/files?path=/tmp/x")
            self.assertEqual((st, body), (200, b"across"))
            # the sandbox runs on its node only: its jail is under that data dir
            self.assertTrue(os.path.isdir(os.path.join(self.b.dir, "pool", "sandboxes",
                                                       on_b["id"])))
            self.assertFalse(os.path.exists(os.path.join(self.a.dir, "pool", "sandboxes",
                                                         on_b["id"])))
            # another tenant sees neither, through either api
            _, tc = self.new_tenant("cl-other")
            self.assertEqual(tc.raw("GET", f"/v1/sandboxes/{on_b['id']}")[0], 404)
            self.assertEqual(tc.call("GET", "/v1/sandboxes")["sandboxes"], [])
        finally:
            self.cb.delete(on_b["id"])
            self.ca.delete(on_a["id"])
        for c in (self.ca, self.cb):
            ids = [s["id"] for s in c.call("GET", "/v1/sandboxes")["sandboxes"]]
            self.assertNotIn(on_b["id"], ids)

    def test_paged_list_across_nodes(self):
        """The merged list pages like one list: limit=2 over 3 + 3 sandboxes
        on two nodes, through either api, gives every id once in order."""
        _, tc = self.new_tenant("cl-pages")
        made = []
        try:
            for i in range(6):
                made.append(tc.create(template="busybox", node="na" if i % 2 else "nb")["id"])
            for c in (self.ca, self.cb):
                c = Client(c.host + ":" + str(c.port), tc.key)
                seen, token, n = [], None, 0
                while True:
                    q = "/v1/sandboxes?limit=2" + (f"&next_token={token}" if token else "")
                    got = c.call("GET", q)
                    self.assertLessEqual(len(got["sandboxes"]), 2)
                    seen += [(s["created_at"], s["id"]) for s in got["sandboxes"]]
                    token, n = got["next_token"], n + 1
                    if not token:
                        break
                    self.assertLess(n, 10)
                self.assertEqual(sorted(i for _, i in seen), sorted(made))
                self.assertEqual(seen, sorted(seen))
                self.assertEqual(c.raw("GET", "/v1/sandboxes?next_token=zz!")[0], 400)
        finally:
            for sid in made:
                tc.call("DELETE", f"/v1/sandboxes/{sid}", expect=(204, 404))

    def test_placement(self):
        # asked-for node: unknown is 404, bad type is 400
        st, body, _ = self.ca.raw("POST", "/v1/sandboxes", {"template": "busybox", "node": "nz"})
        self.assertEqual(st, 404, body)
        st, _, _ = self.ca.raw("POST", "/v1/sandboxes", {"template": "busybox", "node": 7})
        self.assertEqual(st, 400)
        # unplaced creates land on up nodes that have the template
        made = []
        try:
            for _ in range(6):
                made.append(self.ca.create(template="busybox"))
            self.assertTrue({s["node"] for s in made} <= {"na", "nb"})
        finally:
            for s in made:
                self.ca.delete(s["id"])

    def cli(self, server, *args):
        r = subprocess.run([CLI, "--config", os.path.join(server.dir, "cli.json")] + list(args),
                           capture_output=True, timeout=120, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_cli(self):
        out = self.cli(self.a, "node", "ls")
        lines = out.splitlines()
        self.assertEqual(lines[0].split()[:4], ["NAME", "STATE", "HEARTBEAT", "SANDBOXES"])
        rows = {l.split()[0]: l.split() for l in lines[1:]}
        self.assertEqual(set(rows), {"na", "nb"})
        self.assertEqual(rows["nb"][1], "up")
        sid = self.cli(self.a, "create", "--template", "busybox", "--node", "nb").strip()
        try:
            got = self.cli(self.b, "get", sid)
            self.assertRegex(got, r"(?m)^node:\s+nb$")
            self.assertRegex(self.cli(self.a, "suspend", sid), r"(?m)^state:\s+suspended$")
            got = self.cli(self.b, "restore", sid, "--node", "na")
            self.assertRegex(got, r"(?m)^node:\s+na$")
            self.assertRegex(got, r"(?m)^state:\s+running$")
        finally:
            self.cli(self.a, "rm", sid)

    def test_idempotency_key_across_apis(self):
        # Both apis at once, several rounds: whichever nodes they place on,
        # one sandbox per key, and both answers name it and its node.
        for i in range(5):
            key = f"cl-idem-{i}"
            out = {}

            def create(name, c):
                out[name] = c.raw("POST", "/v1/sandboxes", {"template": "busybox"},
                                  {"Idempotency-Key": key})

            ts = [threading.Thread(target=create, args=(n, c))
                  for n, c in (("a", self.ca), ("b", self.cb))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            got = set()
            for name, (st, body, _) in out.items():
                self.assertIn(st, (200, 201), (name, body))
                j = json.loads(body)
                got.add((j["id"], j["node"]))
            self.assertEqual(len(got), 1, out)
            sid, node = got.pop()
            # again, later, through either api: the same sandbox
            for c in (self.ca, self.cb):
                again = c.call("POST", "/v1/sandboxes", {"template": "busybox"},
                               {"Idempotency-Key": key})
                self.assertEqual((again["id"], again["node"]), (sid, node))
            listed = [s["id"] for s in self.ca.call("GET", "/v1/sandboxes")["sandboxes"]]
            self.assertEqual(listed.count(sid), 1)
            self.ca.delete(sid)

    def sh(self, c, sid, cmd):
        code, out, err, _ = c.exec(sid, ["sh", "-c", cmd])
        self.assertEqual(code, 0, err)
        return out

    def suspend(self, c, sid):
        got = c.call("POST", f"/v1/sandboxes/{sid}/suspend", {})
        self.assertEqual(got["state"], "suspended", got)
        return got

    def fetches(self, server, name):
        return server.log().count(f"template {name} (")

    def restore_all_at_once_on_nb(self, ids):
        """Every sandbox of ids restored on nb by its api, all at once."""
        out = {}

        def restore(sid):
            out[sid] = self.cb.raw("POST", f"/v1/sandboxes/{sid}/restore", {"node": "nb"})

        ts = [threading.Thread(target=restore, args=(sid,)) for sid in ids]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for sid in ids:
            self.assertEqual(out[sid][0], 200, out[sid][1])

    def test_move_a_suspended_sandbox(self):
        s = self.ca.create(template="busybox", node="na")
        sid = s["id"]
        try:
            self.sh(self.ca, sid, "echo moved > /root/f")
            self.suspend(self.cb, sid)   # through the other api
            # freed right after the answer (which comes once restorable)
            gone = lambda: not os.path.exists(os.path.join(self.a.dir, "pool", "sandboxes", sid))
            self.assertTrue(until(gone))
            # a bad body is refused and changes nothing
            st, body, _ = self.cb.raw("POST", f"/v1/sandboxes/{sid}/restore", {"node": 5})
            self.assertEqual(st, 400, body)
            got = self.cb.call("POST", f"/v1/sandboxes/{sid}/restore", {"node": "nb"})
            self.assertEqual((got["state"], got["node"]), ("running", "nb"), got)
            self.assertEqual(self.sh(self.ca, sid, "cat /root/f"), b"moved\n")
            self.assertTrue(os.path.isdir(os.path.join(self.b.dir, "pool", "sandboxes", sid)))
            events = [e["reason"] for e in
                      self.ca.call("GET", f"/v1/sandboxes/{sid}/events")["events"]]
            self.assertIn("moved from node na to node nb", events)
            # na forgets it (its next heartbeat): listed once, on nb
            deadline = time.time() + 10
            while time.time() < deadline:
                listed = [x for x in self.ca.call("GET", "/v1/sandboxes")["sandboxes"]
                          if x["id"] == sid]
                if len(listed) == 1:
                    break
                time.sleep(0.3)
            self.assertEqual([x["node"] for x in listed], ["nb"])
            # and it moves back the same way, with what it wrote on nb
            self.sh(self.ca, sid, "echo back >> /root/f")
            self.suspend(self.ca, sid)
            got = self.ca.call("POST", f"/v1/sandboxes/{sid}/restore", {"node": "na"})
            self.assertEqual(got["node"], "na")
            self.assertEqual(self.sh(self.cb, sid, "cat /root/f"), b"moved\nback\n")
        finally:
            self.ca.raw("DELETE", f"/v1/sandboxes/{sid}")

    def vm_or_skip(self):
        for c in (self.ca, self.cb):
            vm = c.call("GET", "/v1/node").get("vm") or {}
            if not vm.get("accel"):
                self.skipTest(f"no vm backend: {vm.get('reason')}")

    def base_fetches(self, server):
        return server.log().count("fetched from the object store: ")

    def test_move_a_suspended_vm_sandbox(self):
        """A vm sandbox suspended on na comes back on nb, which never booted
        its template's memory snapshot: the memory's base travels through
        the store by content, fetched once; the file reads back, the
        counting process carries on with its pid, the egress policy
        applies."""
        self.vm_or_skip()
        sid = self.ca.create(template="busybox", node="na", backend="vm",
                             network={"allow": {"domains": ["allowed.test"]}})["id"]
        try:
            self.sh(self.ca, sid, "echo moved > /root/f; "
                                  "echo '192.0.2.7 denied.test' >> /etc/hosts")
            # bytes only the guest's memory holds (a tmpfs), checked after each move
            md5 = self.sh(self.ca, sid, "mkdir -p /run/m && mount -t tmpfs tmpfs /run/m && "
                                        "head -c 8388608 /dev/urandom > /run/m/r && "
                                        "md5sum /run/m/r")
            pid = self.sh(self.ca, sid, "sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c; "
                                        "sleep 0.2; done' >/dev/null 2>&1 & echo $!").decode().strip()
            time.sleep(1.5)
            before = int(self.sh(self.ca, sid, "cat /tmp/c"))
            self.assertGreater(before, 2)
            policy = self.ca.call("GET", f"/v1/sandboxes/{sid}/network")["network"]
            # nb forgets a base an earlier test's vm sandbox made it fetch
            cache = os.path.join(self.b.dir, "pool", "membase")
            for f in os.listdir(cache) if os.path.isdir(cache) else []:
                os.remove(os.path.join(cache, f))
            fetched = self.base_fetches(self.b)
            self.suspend(self.cb, sid)
            gone = lambda: not os.path.exists(os.path.join(self.a.dir, "pool", "sandboxes", sid))
            self.assertTrue(until(gone))
            got = self.cb.call("POST", f"/v1/sandboxes/{sid}/restore", {"node": "nb"})
            self.assertEqual((got["state"], got["node"]), ("running", "nb"), got)
            self.assertTrue(os.path.isdir(os.path.join(self.b.dir, "pool", "sandboxes", sid)))
            # nb had no base with that digest: downloaded once, into its cache
            self.assertEqual(self.base_fetches(self.b) - fetched, 1, self.b.log()[-3000:])
            self.assertTrue(os.listdir(os.path.join(self.b.dir, "pool", "membase")))
            self.assertEqual(self.sh(self.ca, sid, "md5sum /run/m/r"), md5)
            out = self.sh(self.ca, sid, f"cat /root/f; cat /tmp/c; kill -0 {pid} && echo alive")
            lines = out.decode().split()
            self.assertEqual(lines[0], "moved", out)
            self.assertEqual(lines[-1], "alive", out)
            self.assertGreaterEqual(int(lines[1]), before, out)
            time.sleep(1)
            self.assertGreater(int(self.sh(self.cb, sid, "cat /tmp/c")), int(lines[1]))
            # the egress policy still applies, on the new node's gateway
            self.assertEqual(self.ca.call("GET", f"/v1/sandboxes/{sid}/network")["network"],
                             policy)
            code, out, _, _ = self.ca.exec(sid, ["sh", "-c",
                                                 "timeout 10 wget -q -O - http://denied.test/"])
            self.assertNotEqual(code, 0, out)
            log = self.ca.call("GET", f"/v1/sandboxes/{sid}/network/log")["entries"]
            self.assertTrue([e for e in log if e.get("host") == "denied.test"
                             and e["decision"] == "deny"], log)
            events = [e["reason"] for e in
                      self.ca.call("GET", f"/v1/sandboxes/{sid}/events")["events"]]
            self.assertIn("moved from node na to node nb", events)
            # and back to na through auto_restore (an exec naming no node
            # restores it where its row says: nb), then explicitly to na
            self.suspend(self.ca, sid)
            self.assertEqual(self.sh(self.ca, sid, "cat /root/f"), b"moved\n")
            self.suspend(self.ca, sid)
            got = self.ca.call("POST", f"/v1/sandboxes/{sid}/restore", {"node": "na"})
            self.assertEqual((got["state"], got["node"]), ("running", "na"), got)
            out = self.sh(self.cb, sid, f"cat /root/f; kill -0 {pid} && echo alive")
            self.assertEqual(out.decode().split(), ["moved", "alive"], out)
            self.assertEqual(self.sh(self.cb, sid, "md5sum /run/m/r"), md5)
        finally:
            self.ca.raw("DELETE", f"/v1/sandboxes/{sid}")

    def test_move_vm_restores_share_one_base_download(self):
        # two vm sandboxes of na, suspended, restored on nb at once: one
        # download of their (common) memory base
        self.vm_or_skip()
        ids = [self.ca.create(template="busybox", node="na", backend="vm")["id"]
               for _ in range(2)]
        try:
            for i, sid in enumerate(ids):
                self.sh(self.ca, sid, f"echo {i} > /root/f")
                self.suspend(self.ca, sid)
            cache = os.path.join(self.b.dir, "pool", "membase")
            for f in os.listdir(cache) if os.path.isdir(cache) else []:
                os.remove(os.path.join(cache, f))
            before = self.base_fetches(self.b)
            self.restore_all_at_once_on_nb(ids)
            self.assertEqual(self.base_fetches(self.b) - before, 1, self.b.log()[-3000:])
            for i, sid in enumerate(ids):
                self.assertEqual(self.sh(self.cb, sid, "cat /root/f"), f"{i}\n".encode())
        finally:
            for sid in ids:
                self.ca.raw("DELETE", f"/v1/sandboxes/{sid}")

    def test_move_vm_replaced_memory_base_is_refused(self):
        """Someone who can write the store replaces a vm memory base: the
        restore on a node without it is refused naming the base, the
        sandbox stays suspended, and it still comes back on its own node
        (whose template file the base is)."""
        self.vm_or_skip()
        sid = self.ca.create(template="busybox", node="na", backend="vm")["id"]
        try:
            self.sh(self.ca, sid, "echo kept > /root/f")
            self.suspend(self.ca, sid)
            keys = [l.split()[0] for l in self.objtool("ls", "templates/busybox/").splitlines()
                    if "/mem-" in l]
            self.assertTrue(keys, self.objtool("ls", "templates/busybox/"))
            # nb forgets what it fetched before (another test's restore)
            cache = os.path.join(self.b.dir, "pool", "membase")
            for f in os.listdir(cache) if os.path.isdir(cache) else []:
                os.remove(os.path.join(cache, f))
            saved = {}
            with tempfile.TemporaryDirectory() as tmp:
                for i, key in enumerate(keys):
                    path = os.path.join(tmp, str(i))
                    self.objtool("get", key, path)
                    with open(path, "rb") as f:
                        saved[key] = f.read()
                    # a valid zstd stream of other bytes: only a digest tells
                    with open(path, "wb") as f:
                        f.write(saved[key][:-8] + bytes(8))
                    self.put_object(key, path)
                try:
                    st, body, _ = self.cb.raw("POST", f"/v1/sandboxes/{sid}/restore",
                                              {"node": "nb"})
                    self.assertEqual(st, 502, body)
                    self.assertEqual(json.loads(body)["error"]["code"], "bad_artifact")
                    self.assertIn(b"memory base", body)
                    self.assertIn(b"manifest names", body)
                    self.assertEqual(self.ca.call("GET", f"/v1/sandboxes/{sid}")["state"],
                                     "suspended")
                    # on na the base is its own template's file: no download
                    got = self.ca.call("POST", f"/v1/sandboxes/{sid}/restore", {"node": "na"})
                    self.assertEqual(got["state"], "running")
                    self.assertEqual(self.sh(self.ca, sid, "cat /root/f"), b"kept\n")
                finally:
                    for i, key in enumerate(keys):
                        path = os.path.join(tmp, str(i))
                        with open(path, "wb") as f:
                            f.write(saved[key])
                        self.put_object(key, path)
        finally:
            self.ca.raw("DELETE", f"/v1/sandboxes/{sid}")

    def test_e2b_api_through_either_api(self):
        """The E2B-compatible API (docs/E2B.md): a sandbox made through nb's
        /e2b is served by na's too (control API and envd, streams
        included), with the same key and envd token."""
        import base64
        import http.client
        import struct

        def raw(addr, method, path, headers, body=None):
            host, port = addr.rsplit(":", 1)
            c = http.client.HTTPConnection(host, int(port), timeout=120)
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
            c.close()
            return r.status, data

        _, tc = self.new_tenant("cl-e2b")
        key = {"X-API-KEY": tc.key, "Content-Type": "application/json"}
        st, data = raw(self.b.addr, "POST", "/e2b/v2/sandboxes", key,
                       json.dumps({"templateID": "busybox"}))
        self.assertEqual(st, 201, data)
        sb = json.loads(data)
        sid = sb["sandboxID"]
        try:
            self.assertEqual(Client(self.b.addr, tc.key).call("GET", f"/v1/sandboxes/{sid}")["node"],
                             "nb")
            st, data = raw(self.a.addr, "GET", f"/e2b/sandboxes/{sid}", key)
            self.assertEqual((st, json.loads(data)["sandboxID"]), (200, sid))
            # listed once through either api, beside one on na
            st, data = raw(self.a.addr, "POST", "/e2b/v2/sandboxes", key,
                           json.dumps({"templateID": "busybox"}))
            self.assertEqual(st, 201, data)
            on_a = json.loads(data)["sandboxID"]
            for addr in (self.a.addr, self.b.addr):
                st, data = raw(addr, "GET", "/e2b/v2/sandboxes", key)
                self.assertEqual(st, 200)
                self.assertEqual(sorted(x["sandboxID"] for x in json.loads(data)),
                                 sorted([sid, on_a]))
            self.assertEqual(raw(self.b.addr, "DELETE", f"/e2b/sandboxes/{on_a}", key)[0], 204)
            envd = {"E2b-Sandbox-Id": sid, "X-Access-Token": sb["envdAccessToken"]}
            body = (b"--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/x\"\r\n"
                    b"\r\nacross\r\n--XB--\r\n")
            st, data = raw(self.a.addr, "POST", "/e2b/envd/files",
                           dict(envd, **{"Content-Type": "multipart/form-data; boundary=XB"}), body)
            self.assertEqual(st, 200, data)
            self.assertEqual(raw(self.a.addr, "GET", "/e2b/envd/files?path=/tmp/x", envd),
                             (200, b"across"))
            # a stream: process.Process/Start through na, run on nb
            msg = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", "hostname"]}}).encode()
            st, data = raw(self.a.addr, "POST", "/e2b/envd/process.Process/Start",
                           dict(envd, **{"Content-Type": "application/connect+json"}),
                           b"\0" + struct.pack(">I", len(msg)) + msg)
            self.assertEqual(st, 200)
            out, end = b"", None
            while data:
                flags, n = data[0], struct.unpack(">I", data[1:5])[0]
                m = json.loads(data[5:5 + n])
                data = data[5 + n:]
                if flags & 2:
                    end = m
                elif "data" in m["event"]:
                    out += base64.b64decode(m["event"]["data"]["stdout"])
            self.assertEqual((out, end), ((sid + "\n").encode(), {}))
            # connect through na: a new token, good through either api
            st, data = raw(self.a.addr, "POST", f"/e2b/v2/sandboxes/{sid}/connect", key, b"{}")
            self.assertEqual(st, 200, data)
            tok2 = json.loads(data)["envdAccessToken"]
            for addr in (self.a.addr, self.b.addr):
                self.assertEqual(raw(addr, "GET", "/e2b/envd/files?path=/tmp/x",
                                     dict(envd, **{"X-Access-Token": tok2}))[0], 200)
            # another tenant: 404 through either api
            _, other = self.new_tenant("cl-e2b-other")
            for addr in (self.a.addr, self.b.addr):
                self.assertEqual(raw(addr, "GET", f"/e2b/sandboxes/{sid}",
                                     {"X-API-KEY": other.key})[0], 404)
            st, _ = raw(self.a.addr, "DELETE", f"/e2b/sandboxes/{sid}", key)
            self.assertEqual(st, 204)
            self.assertEqual(raw(self.b.addr, "GET", f"/e2b/sandboxes/{sid}", key)[0], 404)
        finally:
            Client(self.b.addr, tc.key).raw("DELETE", f"/v1/sandboxes/{sid}")

    def test_port_forward_through_the_other_api(self):
        s = self.ca.create(template="busybox", node="nb")
        sid = s["id"]
        try:
            self.ca.call("PUT", f"/v1/sandboxes/{sid}/files?path=/www/index.html", "from nb\n")
            for ev in self.ca.stream("POST", f"/v1/sandboxes/{sid}/exec",
                                     {"cmd": ["busybox", "httpd", "-f", "-p", "8080", "-h",
                                              "/www"]}):
                self.assertEqual(ev["type"], "start", ev)
                break
            deadline = time.time() + 60
            while True:
                st, body, _ = self.ca.raw("GET", f"/v1/sandboxes/{sid}/ports/8080/index.html")
                if st == 200 or time.time() > deadline:
                    break
                time.sleep(0.2)
            self.assertEqual((st, body), (200, b"from nb\n"))
            # another tenant's key is refused by the node's api it reaches
            _, tc = self.new_tenant("cl-ports")
            st, _, _ = tc.raw("GET", f"/v1/sandboxes/{sid}/ports/8080/index.html")
            self.assertEqual(st, 404)
        finally:
            self.ca.raw("DELETE", f"/v1/sandboxes/{sid}")

    def test_api_killed_mid_create(self):
        # kill -9 na's api while a create it forwarded to nb is in flight; the
        # client retries through nb's api with the same key: one sandbox,
        # running, and nb holds no jail that no row names
        key = "cl-kill-api"
        res = {}

        def create():
            try:
                res["r"] = self.ca.raw("POST", "/v1/sandboxes",
                                       {"template": "busybox", "node": "nb"},
                                       {"Idempotency-Key": key})
            except Exception as e:   # the connection dies with the api
                res["r"] = e

        t = threading.Thread(target=create)
        api_pid = self.a.pid_of("api")
        t.start()
        time.sleep(0.02)
        os.kill(api_pid, signal.SIGKILL)
        t.join()
        got = self.cb.call("POST", "/v1/sandboxes", {"template": "busybox", "node": "nb"},
                           {"Idempotency-Key": key})
        self.assertEqual(got["state"], "running", got)
        same = self.cb.call("POST", "/v1/sandboxes", {"template": "busybox"},
                            {"Idempotency-Key": key})
        self.assertEqual(same["id"], got["id"])
        rows = self.db.query("SELECT id FROM sandboxes WHERE idem_key=? AND observed<>'deleted'",
                             (key,))
        self.assertEqual(len(rows), 1, rows)
        # nb's subvolumes are exactly its live rows'
        subs = set(os.listdir(os.path.join(self.b.dir, "pool", "sandboxes")))
        live = {r[0] for r in self.db.query(
            "SELECT id FROM sandboxes WHERE node='nb' AND observed NOT IN"
            " ('deleted','suspended')")}
        self.assertEqual(subs, live)
        self.cb.delete(got["id"])
        # na's api is back (up restarts it) and serves the cluster again
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if self.ca.raw("GET", "/v1/nodes")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        self.assertEqual(self.ca.raw("GET", "/v1/nodes")[0], 200)

    def test_moves_back_and_forth_at_once(self):
        # no wait for the old node's heartbeat between moves: a node that
        # still holds a sandbox that moved away must not restore its old
        # snapshot (that one's objects are gone)
        sid = self.ca.create(template="busybox", node="na")["id"]
        try:
            for i, dst in enumerate(("nb", "na", "nb", "na")):
                self.sh(self.ca, sid, f"echo {i} >> /root/log")
                self.suspend(self.cb, sid)
                got = self.ca.call("POST", f"/v1/sandboxes/{sid}/restore", {"node": dst})
                self.assertEqual((got["state"], got["node"]), ("running", dst))
            self.assertEqual(self.sh(self.cb, sid, "cat /root/log"), b"0\n1\n2\n3\n")
        finally:
            self.ca.raw("DELETE", f"/v1/sandboxes/{sid}")

    def objtool(self, *args):
        tool = os.path.join(os.path.dirname(CLI), "airlock-objstore-tool")
        url = self.s3.url if self.s3 else "file://" + self.store
        r = subprocess.run([tool, args[0], url] + list(args[1:]), capture_output=True,
                           timeout=60, env=dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER",
                                                AWS_SECRET_ACCESS_KEY="S3RVER"))
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.decode()

    def put_object(self, key, path):
        self.objtool("put", key, path)
        if not self.s3:   # a file:// store: the nodes' user reads it
            pw = node_user()
            os.chown(os.path.join(self.store, key), pw.pw_uid, pw.pw_gid)

    def build_on_a(self, name):
        """A busybox template built from a directory on node na only."""
        root = tempfile.mkdtemp(prefix="airlock-tmpl-")
        try:
            os.makedirs(os.path.join(root, "bin"))
            shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
            for tool in ("sh", "cat", "echo"):
                os.symlink("busybox", os.path.join(root, "bin", tool))
            os.chmod(root, 0o755)
            self.cli(self.a, "template", "build", name, "--from-dir", root)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def test_replaced_template_build_is_refused(self):
        # someone with write access to the store replaces a template build
        # (with a matching digest of its own): the manifest's digest refuses it
        self.build_on_a("tampered")
        sid = self.ca.create(template="tampered", node="na")["id"]
        try:
            self.sh(self.ca, sid, "echo kept > /f")
            self.suspend(self.ca, sid)
            # the build's stream (a vm's memory base beside it is not this test's)
            keys = [l.split()[0] for l in self.objtool("ls", "templates/tampered/").splitlines()
                    if l.strip() and "/mem-" not in l]
            self.assertEqual(len(keys), 1, keys)
            with tempfile.TemporaryDirectory() as tmp:
                stream = os.path.join(tmp, "s")
                self.objtool("get", keys[0], stream)
                with open(stream, "rb") as f:
                    data = f.read()
                with open(stream, "wb") as f:
                    f.write(tamper_btrfs_stream(data))
                self.put_object(keys[0], stream)
            st, body, _ = self.cb.raw("POST", f"/v1/sandboxes/{sid}/restore", {"node": "nb"})
            self.assertGreaterEqual(st, 400, body)
            self.assertIn(b"template tampered", body)
            self.assertIn(b"manifest names", body)
            self.assertEqual(self.ca.call("GET", f"/v1/sandboxes/{sid}")["state"], "suspended")
            # on its own node, whose build it is, it comes back
            got = self.ca.call("POST", f"/v1/sandboxes/{sid}/restore", {"node": "na"})
            self.assertEqual(got["state"], "running")
            self.assertEqual(self.sh(self.ca, sid, "cat /f"), b"kept\n")
        finally:
            self.ca.raw("DELETE", f"/v1/sandboxes/{sid}")

    def published(self, server, name):
        with open(server.log_path, errors="replace") as f:
            return f.read().count(f"template {name}/1 published as")

    def test_template_published_when_ready(self):
        # a build goes to the store when it becomes ready, off the request
        # path, before any suspend needs it; the suspend does not upload it
        # again
        self.build_on_a("early")
        deadline = time.time() + 60
        keys = []
        while time.time() < deadline and not keys:
            keys = [l.split()[0] for l in self.objtool("ls", "templates/early/").splitlines()
                    if l.strip().endswith(".btrfs") or ".btrfs " in l]
            time.sleep(0.3)
        self.assertEqual(len(keys), 1, self.a.log()[-2000:])
        self.assertEqual(self.published(self.a, "early"), 1)
        sid = self.ca.create(template="early", node="na")["id"]
        try:
            self.sh(self.ca, sid, "echo e > /f")
            self.suspend(self.ca, sid)
            self.assertEqual(self.published(self.a, "early"), 1)
            got = self.cb.call("POST", f"/v1/sandboxes/{sid}/restore", {"node": "nb"})
            self.assertEqual(got["node"], "nb")
            self.assertEqual(self.sh(self.cb, sid, "cat /f"), b"e\n")
        finally:
            self.ca.raw("DELETE", f"/v1/sandboxes/{sid}")

    def test_restores_share_one_template_download(self):
        # a template only na has; ten of its sandboxes come back on nb at once
        self.build_on_a("ten")
        ids = [self.ca.create(template="ten", node="na")["id"] for _ in range(10)]
        try:
            for i, sid in enumerate(ids):
                self.sh(self.ca, sid, f"echo {i} > /f")
                self.suspend(self.ca, sid)
            before = self.fetches(self.b, "ten")
            self.restore_all_at_once_on_nb(ids)
            self.assertEqual(self.fetches(self.b, "ten") - before, 1, self.b.log()[-3000:])
            for i, sid in enumerate(ids):
                self.assertEqual(self.sh(self.cb, sid, "cat /f"), f"{i}\n".encode())
        finally:
            for sid in ids:
                self.ca.raw("DELETE", f"/v1/sandboxes/{sid}")

    def test_node_name_taken_twice_is_refused(self):
        gen = self.db.generation("na")
        dup = Server(extra_args=("--node-name", "na") + self.extra + self.db.args)
        try:
            with self.assertRaises(RuntimeError) as cm:
                dup.start(timeout=120)
            self.assertIn("node name `na` is in use", str(cm.exception))
        finally:
            if dup.proc and dup.proc.poll() is None:
                stop_and_check(dup)
            else:
                dup.cleanup()
        # the first keeps its name, its epoch and its state (and its lock,
        # held all along on one session: never taken again)
        self.assertEqual(self.db.generation("na"), gen)
        self.assertNotIn("lock taken again", self.a.log())
        self.assertEqual(self.wait_nodes(self.ca, {"na": "up"})["na"], "up")

    def node_row(self, name):
        return self.db.query("SELECT state, generation FROM nodes WHERE name=?", (name,))[0]

    def test_zy_stopped_node_is_fenced(self):
        """nb's node process stopped past the timeout: marked lost, its
        suspended sandbox moves to na; let go, the old process writes
        nothing and does not come back as itself."""
        # running stays nb's, a disk snapshot due while nb is stopped: once
        # let go, the stale process writes no snapshot or event row about it
        running = self.ca.create(template="busybox", node="nb",
                                 snapshots={"disk_interval_s": 2})["id"]
        sid = self.ca.create(template="busybox", node="nb")["id"]
        self.sh(self.ca, sid, "echo here > /root/m")
        self.suspend(self.ca, sid)
        gen = self.db.generation("nb")
        pid = self.b.pid_of("node")
        self.sh(self.ca, running, "echo changed >> /root/f")
        sigstop(pid)
        stopped_at = int(time.time() * 1000)
        try:
            got = self.wait_nodes(self.ca, {"nb": "lost"}, timeout=HEARTBEAT_TIMEOUT + 20)
            self.assertEqual(got["nb"], "lost")
            self.assertEqual(self.sh(self.ca, sid, "cat /root/m"), b"here\n")
            row = lambda: self.db.query(
                "SELECT node, observed, updated_at, (SELECT count(*) FROM events"
                " WHERE sandbox_id=?) FROM sandboxes WHERE id=?", (sid, sid))
            before = row()
            self.assertEqual(before[0][:2], ("na", "running"))
        finally:
            os.kill(pid, signal.SIGCONT)
        # a few of its beats: it neither writes the moved row nor beats its
        # lost row back to up at the old epoch; it exits (up starts a new
        # process, which registers a new epoch)
        gone = lambda: not os.path.exists(f"/proc/{pid}")
        until(gone, 8)
        self.assertEqual(row(), before)
        self.assertNotEqual(self.node_row("nb"), ("up", gen))
        self.assertTrue(gone(), self.b.log()[-3000:])
        self.assertIn("is fenced: the cluster marked it lost", self.b.log())
        self.assertEqual(self.wait_nodes(self.ca, {"nb": "up"})["nb"], "up")
        self.assertGreater(self.db.generation("nb"), gen)
        # from the stop to the new process's start, only the stale one could write
        new_start = self.db.query("SELECT started_at FROM nodes WHERE name='nb'")[0][0]
        stale = self.db.query(
            "SELECT 'snapshot', created_at FROM snapshots WHERE sandbox_id=? AND created_at"
            " >= ? AND created_at < ? UNION ALL SELECT reason, at FROM events WHERE"
            " sandbox_id=? AND at >= ? AND at < ?", (running, stopped_at, new_start) * 2)
        self.assertEqual(stale, [], self.b.log()[-3000:])
        # the new process reconciled: it kept the running one, not the moved one
        deadline = time.monotonic() + 10
        while True:
            st, body, _ = self.ca.raw("POST", f"/v1/sandboxes/{running}/exec",
                                      {"cmd": ["true"]})
            if st == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        self.assertEqual(st, 200, body)
        self.assertFalse(os.path.exists(os.path.join(self.b.dir, "pool", "sandboxes", sid)))
        self.assertEqual(row()[0][0], "na")
        self.ca.raw("DELETE", f"/v1/sandboxes/{sid}")
        self.ca.raw("DELETE", f"/v1/sandboxes/{running}")

    def test_zz_node_lost_and_back(self):
        s = self.ca.create(template="busybox", node="nb")
        kept = self.ca.create(template="busybox", node="nb")
        self.sh(self.ca, kept["id"], "echo kept > /root/k")
        self.suspend(self.ca, kept["id"])
        dropped = self.ca.create(template="busybox", node="nb")
        self.suspend(self.ca, dropped["id"])
        # kill -9 node b's whole `up` (its daemons die with it)
        os.killpg(self.b.proc.pid, signal.SIGKILL)
        self.b.proc.wait()
        got = self.wait_nodes(self.ca, {"nb": "lost", "na": "up"}, timeout=HEARTBEAT_TIMEOUT + 20)
        self.assertEqual(got, {"na": "up", "nb": "lost"})
        # its sandboxes show as lost (the suspended one as suspended), a request
        # to the running one answers 503 with the reason; creates go to the live node
        got = self.ca.call("GET", f"/v1/sandboxes/{s['id']}")
        self.assertEqual((got["state"], got["node"]), ("lost", "nb"))
        listed = {x["id"]: x["state"] for x in self.ca.call("GET", "/v1/sandboxes")["sandboxes"]}
        self.assertEqual(listed.get(s["id"]), "lost")
        self.assertEqual(listed.get(kept["id"]), "suspended")
        _, tc = self.new_tenant("cl-lost")
        self.assertEqual(tc.raw("GET", f"/v1/sandboxes/{s['id']}")[0], 404)
        self.assertNotIn(s["id"], [x["id"] for x in tc.call("GET", "/v1/sandboxes")["sandboxes"]])
        st, body, _ = self.ca.raw("POST", f"/v1/sandboxes/{s['id']}/exec", {"cmd": ["true"]})
        self.assertEqual(st, 503, body)
        self.assertIn(b"lost", body)
        other = self.ca.create(template="busybox")
        self.assertEqual(other["node"], "na")
        self.ca.delete(other["id"])
        st, body, _ = self.ca.raw("POST", "/v1/sandboxes", {"template": "busybox", "node": "nb"})
        self.assertEqual(st, 503, body)
        # a suspended one of it is deleted through the live node
        self.assertEqual(self.ca.raw("DELETE", f"/v1/sandboxes/{dropped['id']}")[0], 204)
        self.assertEqual(self.ca.raw("GET", f"/v1/sandboxes/{dropped['id']}")[0], 404)
        # its suspended sandbox comes back on the live node, by an exec
        self.assertEqual(self.sh(self.ca, kept["id"], "cat /root/k"), b"kept\n")
        self.assertEqual(self.ca.call("GET", f"/v1/sandboxes/{kept['id']}")["node"], "na")
        # back: a new generation, up again, and its sandbox is reachable
        gen = self.db.generation("nb")
        self.b.start()
        got = self.wait_nodes(self.ca, {"nb": "up"})
        self.assertEqual(got["nb"], "up")
        self.assertGreater(self.db.generation("nb"), gen)
        # na's api routes by its copy of the nodes table, reloaded once a
        # second, so it may still see nb lost for a moment (503
        # node_unavailable): within a few seconds the sandbox answers
        deadline = time.monotonic() + 10
        while True:
            st, body, _ = self.ca.raw("GET", f"/v1/sandboxes/{s['id']}")
            if st == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(st, 200, body)
        # and it does not run the one that moved: no jail of it on nb
        self.assertFalse(os.path.exists(os.path.join(self.b.dir, "pool", "sandboxes",
                                                     kept["id"])))
        self.assertEqual(self.cb.call("GET", f"/v1/sandboxes/{kept['id']}")["node"], "na")
        self.ca.raw("DELETE", f"/v1/sandboxes/{s['id']}")
        self.ca.raw("DELETE", f"/v1/sandboxes/{kept['id']}")


if __name__ == "__main__":
    main()
