"""Two `airlockd up` instances on one machine, separate data dirs and ports,
one database: a two-node cluster. Either api serves every sandbox; creates
are placed (or go where "node" says); the Idempotency-Key holds across the
two apis; a node that stops beating is marked lost, its sandboxes answer 503
through the other api, and it comes back as a new generation."""
import json
import os
import subprocess
import signal
import threading
import time
import unittest

from harness import CLI, Client, Server, main, shared_db_args, stop_and_check

HEARTBEAT_TIMEOUT = 4


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        extra = ("--set", f"heartbeat_timeout_s={HEARTBEAT_TIMEOUT}")
        cls.db = shared_db_args()
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

    def test_zz_node_lost_and_back(self):
        s = self.ca.create(template="busybox", node="nb")
        # kill -9 node b's whole `up` (its daemons die with it)
        os.killpg(self.b.proc.pid, signal.SIGKILL)
        self.b.proc.wait()
        got = self.wait_nodes(self.ca, {"nb": "lost", "na": "up"}, timeout=HEARTBEAT_TIMEOUT + 20)
        self.assertEqual(got, {"na": "up", "nb": "lost"})
        # its sandbox answers 503 with the reason; creates go to the live node
        st, body, _ = self.ca.raw("GET", f"/v1/sandboxes/{s['id']}")
        self.assertEqual(st, 503, body)
        self.assertIn(b"lost", body)
        other = self.ca.create(template="busybox")
        self.assertEqual(other["node"], "na")
        self.ca.delete(other["id"])
        st, body, _ = self.ca.raw("POST", "/v1/sandboxes", {"template": "busybox", "node": "nb"})
        self.assertEqual(st, 503, body)
        # back: a new generation, up again, and its sandbox is reachable
        gen = self.db.generation("nb")
        self.b.start()
        got = self.wait_nodes(self.ca, {"nb": "up"})
        self.assertEqual(got["nb"], "up")
        self.assertEqual(self.db.generation("nb"), gen + 1)
        st, _, _ = self.ca.raw("GET", f"/v1/sandboxes/{s['id']}")
        self.assertEqual(st, 200)
        self.ca.raw("DELETE", f"/v1/sandboxes/{s['id']}")


if __name__ == "__main__":
    main()
