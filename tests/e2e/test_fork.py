"""Fork through the real API, on the ns backend and (AIRLOCK_E2E_BACKEND=vm) on
the vm backend: POST /v1/sandboxes/{id}/fork {count, from_snapshot?} makes N
independent sandboxes whose disk is a copy-on-write clone of the parent's
(now, or at a named snapshot), each with `parent` set (GET shows it); the
children and the parent then diverge; bad counts and snapshot refs are 400,
another tenant gets 404, a deleted parent 409, and deleting the parent
leaves the children running."""
import json
import os
import subprocess

from harness import CLI, AirlockTestCase, ApiError, main


class ForkTest(AirlockTestCase):
    def setUp(self):
        self.sid = self.api.create(template="busybox")["id"]
        self.made = [self.sid]

    def tearDown(self):
        for sid in self.made:
            try:
                self.api.delete(sid)
            except ApiError:
                pass

    def sh(self, sid, script):
        code, out, err, _ = self.api.exec(sid, ["sh", "-c", script])
        self.assertEqual(code, 0, f"{script}: {err!r}")
        return out.decode()

    def fork(self, body, sid=None, expect=(201,)):
        got = self.api.call("POST", f"/v1/sandboxes/{sid or self.sid}/fork", body,
                            expect=expect)
        if isinstance(got, dict) and "sandboxes" in got:
            self.made += [k["id"] for k in got["sandboxes"]]
        return got

    def status(self, method, path, body=None):
        status, data, _ = self.api.raw(method, path, body)
        return status, (json.loads(data) if data else None)

    def test_fork_now_and_diverge(self):
        self.sh(self.sid, "mkdir -p /work && echo parent-data > /work/f")
        got = self.fork({"count": 2})
        kids = got["sandboxes"]
        self.assertEqual(len(kids), 2)
        ids = {k["id"] for k in kids}
        self.assertEqual(len(ids), 2)
        self.assertNotIn(self.sid, ids)
        parent = self.api.call("GET", f"/v1/sandboxes/{self.sid}")
        self.assertIsNone(parent["parent"])
        for k in kids:
            self.assertEqual(k["parent"], self.sid)
            self.assertEqual(k["state"], "running")
            self.assertEqual(k["backend"], parent["backend"])
            self.assertEqual(k["template"], parent["template"])
            self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{k['id']}")["parent"],
                             self.sid)
            self.assertEqual(self.sh(k["id"], "cat /work/f"), "parent-data\n")
        # Independent: each writes its own, nobody sees the others'.
        a, b = sorted(ids)
        self.sh(a, "echo A > /work/f")
        self.sh(b, "echo B > /work/f")
        self.sh(self.sid, "echo P > /work/f")
        self.assertEqual(self.sh(a, "cat /work/f"), "A\n")
        self.assertEqual(self.sh(b, "cat /work/f"), "B\n")
        self.assertEqual(self.sh(self.sid, "cat /work/f"), "P\n")
        # The throw-away snapshot of the fork is gone; listed snapshots are none.
        self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{self.sid}/snapshots")["snapshots"],
                         [])
        pool = os.path.join(self.server.dir, "pool")
        r = subprocess.run(["btrfs", "subvolume", "list", pool], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse([l for l in r.stdout.splitlines() if f"snapshots/{self.sid}/" in l],
                         r.stdout)
        # Deleting the parent leaves the children alone.
        self.api.delete(self.sid)
        self.assertEqual(self.sh(a, "cat /work/f"), "A\n")
        self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{a}")["parent"], self.sid)
        listed = {x["id"]: x for x in self.api.call("GET", "/v1/sandboxes")["sandboxes"]}
        self.assertEqual(listed[b]["parent"], self.sid)

    def test_fork_from_snapshot(self):
        self.sh(self.sid, "mkdir -p /work && echo v1 > /work/v && sync")
        snap = self.api.call("POST", f"/v1/sandboxes/{self.sid}/snapshots", {"name": "s1"},
                             expect=(201,))
        self.sh(self.sid, "echo v2 > /work/v")
        kid = self.fork({"count": 1, "from_snapshot": "s1"})["sandboxes"][0]
        self.assertEqual(kid["parent"], self.sid)
        self.assertEqual(self.sh(kid["id"], "cat /work/v"), "v1\n")
        self.assertEqual(self.sh(self.sid, "cat /work/v"), "v2\n")
        # By id too, from a paused parent; the parent stays paused.
        self.api.call("POST", f"/v1/sandboxes/{self.sid}/pause", {})
        kid2 = self.fork({"from_snapshot": snap["id"]})["sandboxes"][0]
        self.assertEqual(self.sh(kid2["id"], "cat /work/v"), "v1\n")
        self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{self.sid}")["state"], "paused")
        # The fork is in the parent's event log.
        ev = self.db_rows("SELECT reason FROM events WHERE sandbox_id=? ORDER BY id", self.sid)
        kev = self.db_rows("SELECT to_state, reason FROM events WHERE sandbox_id=? ORDER BY id",
                           kid["id"])
        self.assertTrue(any(r[0].startswith("forked into 1 sandbox from snapshot ")
                            for r in ev), ev)
        self.assertEqual(kev[0], ("starting", f"fork of {self.sid}"), kev)

    def test_cli(self):
        cfg = os.path.join(self.server.dir, "cli.json")

        def cli(*args, ok=True):
            r = subprocess.run([CLI, "--config", cfg] + list(args), capture_output=True,
                               text=True, timeout=300)
            if ok:
                self.assertEqual(r.returncode, 0, f"{args}: {r.stderr}")
            return r

        self.sh(self.sid, "mkdir -p /work && echo c1 > /work/c && sync")
        cli("snapshot", "create", self.sid, "--name", "c1")
        self.sh(self.sid, "echo c2 > /work/c")
        ids = cli("fork", self.sid, "--count", "2", "--from", "c1").stdout.split()
        self.made += ids
        self.assertEqual(len(ids), 2, ids)
        for k in ids:
            self.assertTrue(k.startswith("sb-"), k)
            self.assertEqual(self.sh(k, "cat /work/c"), "c1\n")
        r = cli("fork", self.sid, "--count", "0", ok=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("count", r.stderr)

    def test_bad_input_tenancy_and_states(self):
        path = f"/v1/sandboxes/{self.sid}/fork"
        for bad in [{"count": 0}, {"count": 17}, {"count": "2"}, {"count": 1.5},
                    {"count": -1}, {"from_snapshot": 5}, {"from_snapshot": ""},
                    {"nope": 1}]:
            st, body = self.status("POST", path, bad)
            self.assertEqual(st, 400, f"{bad}: {body}")
            self.assertIn("error", body)
        st, body = self.status("POST", path, {"from_snapshot": "missing"})
        self.assertEqual((st, body["error"]["code"]), (404, "not_found"), body)
        st, _ = self.status("GET", path)
        self.assertEqual(st, 405)
        _, other = self.new_tenant("fork-other")
        st, _, _ = other.raw("POST", path, {"count": 1})
        self.assertEqual(st, 404)
        # Nothing was made by any of the above.
        mine = [x for x in self.api.call("GET", "/v1/sandboxes")["sandboxes"]
                if x.get("parent") == self.sid]
        self.assertEqual(mine, [])
        self.api.delete(self.sid)
        st, body = self.status("POST", path, {"count": 1})
        self.assertEqual((st, body["state"]), (409, "deleted"), body)


if __name__ == "__main__":
    main()
