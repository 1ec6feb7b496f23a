#!/usr/bin/env python3
"""Two `airlockd up` instances (own data dirs, ports, pools; node names a and b)
on one PostgreSQL 15 that this test starts (tests/pg/pg-start.sh: initdb as
nobody in a temp dir, 127.0.0.1 on a free port; stopped and removed at the
end, or by its watcher if this process dies): the schema's migrations, each
node's row in `nodes`, create/exec/snapshot/list/delete, tenants, keys and
credentials seen through either api, and the same Idempotency-Key sent to
both at once making exactly one sandbox, which both answer with."""
import os
import shutil
import sys
import threading
import time
import unittest

import harness
from harness import ApiError, Server


class PostgresTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pg = harness.Postgres()
        cls.url = cls.pg.url
        cls.servers = []
        try:
            for name in ("a", "b"):
                s = Server("busybox", ["--db", cls.url, "--node-name", name])
                cls.servers.append(s)
                s.start()
        except Exception:
            for s in cls.servers:
                print(s.log(), file=sys.stderr)
            cls.tearDownClass()
            raise
        cls.a, cls.b = cls.servers
        cls.api_a, cls.api_b = cls.a.client(), cls.b.client()

    @classmethod
    def tearDownClass(cls):
        leftovers = []
        for s in cls.servers:
            s.stop()
            time.sleep(0.2)
            leftovers += harness.procs_for(s.dir)
            s.cleanup()
        cls.pg.stop()
        assert not os.path.exists(cls.pg.dir), "the PostgreSQL dir was not removed"
        assert not leftovers, f"processes left after shutdown: {leftovers}"

    def sql(self, query):
        return self.pg.sql(query)

    def test_migrations_and_nodes(self):
        versions = [int(v[0]) for v in self.sql("SELECT version FROM schema_migrations ORDER BY 1")]
        self.assertEqual(versions, list(range(1, len(versions) + 1)))
        self.assertGreaterEqual(len(versions), 3)
        # each node's row, kept fresh by its heartbeat (every 5 s)
        first = dict((n, int(t)) for n, t in self.sql("SELECT name, heartbeat_at FROM nodes"))
        self.assertEqual(sorted(first), ["a", "b"])
        for name, state, cap in self.sql("SELECT name, state, capacity FROM nodes"):
            self.assertEqual(state, "up")
            self.assertIn('"cpus":', cap)
            self.assertIn('"mem_free_mb":', cap)
        deadline = time.time() + 15
        while time.time() < deadline:
            now = dict((n, int(t)) for n, t in self.sql("SELECT name, heartbeat_at FROM nodes"))
            if all(now[n] > first[n] for n in now):
                break
            time.sleep(0.5)
        else:
            self.fail(f"no heartbeat after {first}")
        # each node built busybox in its own pool, and says so in its own rows
        self.assertEqual(sorted(r[0] for r in self.sql(
            "SELECT node FROM templates WHERE name = 'busybox' AND status = 'ready'")), ["a", "b"])

    def test_lifecycle(self):
        sb = self.api_a.create(node="a")   # creates are placed; this one on a
        sid = sb["id"]
        try:
            self.assertEqual(sb["state"], "running")
            self.assertEqual(self.sql(f"SELECT node, observed FROM sandboxes WHERE id = '{sid}'"),
                             [["a", "running"]])
            code, out, _, _ = self.api_a.exec(sid, ["sh", "-c", "echo hi > /root/f; cat /root/f"])
            self.assertEqual((code, out), (0, b"hi\n"))
            snap = self.api_a.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "one"})
            self.assertEqual(snap["name"], "one")
            self.api_a.exec(sid, ["rm", "/root/f"])
            self.api_a.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "two"})
            snaps = self.api_a.call("GET", f"/v1/sandboxes/{sid}/snapshots")["snapshots"]
            self.assertEqual([s["name"] for s in snaps], ["one", "two"])
            self.api_a.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": "one"})
            code, out, _, _ = self.api_a.exec(sid, ["cat", "/root/f"])
            self.assertEqual((code, out), (0, b"hi\n"))
            ids = [s["id"] for s in self.api_a.call("GET", "/v1/sandboxes")["sandboxes"]]
            self.assertIn(sid, ids)
            events = self.api_a.call("GET", f"/v1/sandboxes/{sid}/events")["events"]
            self.assertIn("running", [e["to"] for e in events])
        finally:
            self.api_a.delete(sid)
        self.assertEqual(self.sql(f"SELECT observed FROM sandboxes WHERE id = '{sid}'"),
                         [["deleted"]])
        with self.assertRaises(ApiError) as cm:
            self.api_a.call("GET", f"/v1/sandboxes/{sid}")
        self.assertEqual(cm.exception.status, 404)

    def test_reconnect_after_database_restart(self):
        """The server restarts under both instances: every daemon finds its
        connection closed before its next statement, makes a new one, and
        no request fails."""
        sb = self.api_a.create()
        epochs = self.sql("SELECT name, generation FROM nodes ORDER BY name")
        self.pg.restart()
        made = self.api_b.create()
        for api, sid in ((self.api_a, sb["id"]), (self.api_b, made["id"])):
            self.assertEqual(api.exec(sid, ["echo", "after"])[:2], (0, b"after\n"))
            api.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "after"})
            api.delete(sid)
        self.assertEqual(self.sql("SELECT count(*) FROM sandboxes WHERE id IN"
                                  f" ('{sb['id']}', '{made['id']}') AND observed = 'deleted'"),
                         [["2"]])
        time.sleep(6)   # a heartbeat of each node after the restart
        self.assertEqual(self.sql("SELECT count(*) FROM nodes WHERE state = 'up'"
                                  " AND heartbeat_at > extract(epoch FROM now()) * 1000 - 6000"),
                         [["2"]])
        # each node took its name's lock again on its new session and kept
        # its epoch: no node was fenced by the server's restart
        self.assertEqual(self.sql("SELECT name, generation FROM nodes ORDER BY name"), epochs)

    def test_tenants_keys_credentials_shared(self):
        t = self.api_a.call("POST", "/v1/tenants", {"name": "shared"})
        with self.assertRaises(ApiError) as cm:   # the name is taken in the one database
            self.api_b.call("POST", "/v1/tenants", {"name": "shared"})
        self.assertEqual(cm.exception.status, 409)
        key = self.api_a.call("POST", "/v1/keys", {"tenant": t["id"]})["key"]
        on_b = harness.Client(self.b.addr, key)   # a key made through a works on b
        c = on_b.call("POST", "/v1/credentials",
                      {"name": "tok", "value": "s3cret-value", "env": "TOK",
                       "inject": {"type": "header"}, "hosts": ["example.com"]})
        on_a = harness.Client(self.a.addr, key)
        self.assertEqual([x["id"] for x in on_a.call("GET", "/v1/credentials")["credentials"]],
                         [c["id"]])
        with self.assertRaises(ApiError) as cm:
            on_a.call("POST", "/v1/credentials",
                      {"name": "tok", "value": "x", "inject": {"type": "header"},
                       "hosts": ["example.com"]})
        self.assertEqual(cm.exception.status, 409)
        boxes = self.sql(f"SELECT box FROM vault_secrets WHERE ref LIKE '{c['id']}:%'")
        self.assertEqual(len(boxes), 1)
        self.assertNotIn("s3cret-value", boxes[0][0])

    def test_idempotency_key_across_nodes(self):
        t = self.api_a.call("POST", "/v1/tenants", {"name": "idem"})
        key = self.api_a.call("POST", "/v1/keys", {"tenant": t["id"]})["key"]
        clients = [harness.Client(self.a.addr, key), harness.Client(self.b.addr, key)]
        for round_ in range(3):
            ikey = f"same-{round_}-{os.urandom(4).hex()}"
            got, errors = [None, None], []
            go = threading.Barrier(2)

            def create(i):
                try:
                    go.wait()
                    got[i] = clients[i].create(idempotency_key=ikey)
                except Exception as e:   # noqa: BLE001 - reported below
                    errors.append(e)

            threads = [threading.Thread(target=create, args=(i,)) for i in range(2)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            self.assertEqual(errors, [])
            self.assertEqual(got[0]["id"], got[1]["id"], f"round {round_}: {got}")
            self.assertEqual([g["state"] for g in got], ["running", "running"])
            rows = self.sql(f"SELECT id, node FROM sandboxes WHERE idem_key = '{ikey}'")
            self.assertEqual(len(rows), 1, rows)
            sid, node = rows[0]
            # a replay on either node answers the same sandbox
            for c in clients:
                self.assertEqual(c.create(idempotency_key=ikey)["id"], sid)
            owner = clients[0] if node == "a" else clients[1]
            self.assertEqual(owner.exec(sid, ["echo", "ok"])[:2], (0, b"ok\n"))
            owner.delete(sid)
        # no sandbox of this tenant is left on either node
        self.assertEqual(self.sql(f"SELECT count(*) FROM sandboxes WHERE tenant_id = '{t['id']}'"
                                  " AND observed != 'deleted'"), [["0"]])


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("skip: end-to-end tests need root")
        sys.exit(77)
    if not os.path.exists(harness.AIRLOCKD):
        print(f"skip: {harness.AIRLOCKD} not built")
        sys.exit(77)
    if not os.path.exists("/usr/lib/postgresql/15/bin/initdb") or not shutil.which("runuser"):
        print("skip: PostgreSQL 15 (postgresql-15) is not installed")
        sys.exit(77)
    unittest.main(verbosity=2)
