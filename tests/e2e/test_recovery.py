"""Crash recovery through the real daemons: kill -9 of a sandbox's QEMU (vm,
AIRLOCK_E2E_BACKEND=vm) or of its jail's init (ns) brings it back from its
latest full snapshot (vm: the counting process carries on), else from its
latest disk snapshot with a fresh boot; the sandbox keeps its id, GET shows
recovered_from {snapshot, kind, at} and the event log says what happened.
With no snapshot at all it is failed, as before, and so is a sandbox that
crashes again right after a recovery (no crash loop)."""
import os
import signal
import time
import unittest

from harness import BACKEND, AirlockTestCase, ApiError, main

VM_ONLY = unittest.skipUnless(BACKEND == "vm", "full snapshots are a vm capability")

COUNTER = ("i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new && "
           "mv /tmp/count.new /tmp/count; sleep 0.2; done")


class RecoveryTest(AirlockTestCase):
    def setUp(self):
        self.sid = self.api.create(template="busybox")["id"]

    def tearDown(self):
        try:
            self.api.delete(self.sid)
        except ApiError:
            pass

    def sh(self, script):
        code, out, err, _ = self.api.exec(self.sid, ["sh", "-c", script])
        self.assertEqual(code, 0, f"{script}: {err!r}")
        return out.decode()

    def db(self, sql, *args):
        return self.db_rows(sql, *args)

    def kill_jail(self):
        """SIGKILL the sandbox's QEMU (vm) or jail init (ns): a process this
        test's daemons started, by the pid they recorded."""
        pid = self.db("SELECT jail_pid FROM sandboxes WHERE id=?", self.sid)[0][0]
        self.assertTrue(pid and pid > 1, pid)
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_for(self, pred, what, deadline_s=300):
        end = time.monotonic() + deadline_s
        while True:
            sb = self.api.call("GET", f"/v1/sandboxes/{self.sid}")
            if pred(sb):
                return sb
            self.assertLess(time.monotonic(), end, f"{what}: {sb}")
            time.sleep(0.1)

    def snap(self, kind, name):
        return self.api.call("POST", f"/v1/sandboxes/{self.sid}/snapshots",
                             {"kind": kind, "name": name}, expect=(201,))

    def count(self):
        return int(self.sh("cat /tmp/count 2>/dev/null || echo 0").strip() or 0)

    def wait_count(self, at_least, deadline_s=300):
        end = time.monotonic() + deadline_s
        while True:
            c = self.count()
            if c >= at_least:
                return c
            self.assertLess(time.monotonic(), end, f"counter stuck at {c}")
            time.sleep(0.2)

    def test_no_snapshot_fails(self):
        self.assertIsNone(self.api.call("GET", f"/v1/sandboxes/{self.sid}")["recovered_from"])
        self.kill_jail()
        sb = self.wait_for(lambda s: s["state"] == "failed", "sandbox should fail")
        self.assertIn("guest channel closed", sb["error"])
        self.assertIsNone(sb["recovered_from"])

    def test_recover_from_disk_snapshot(self):
        self.sh("mkdir -p /work && echo kept > /work/a && sync")
        s = self.snap("disk", "d1")
        self.sh("echo lost > /work/b && sync")
        old = self.kill_jail()
        sb = self.wait_for(lambda s: s["state"] == "running" and s["recovered_from"],
                           "sandbox should recover")
        self.assertEqual(sb["id"], self.sid)
        rf = sb["recovered_from"]
        self.assertEqual((rf["snapshot"], rf["kind"]), (s["id"], "disk"))
        self.assertTrue(rf["at"].endswith("Z"), rf)
        self.assertEqual(self.sh("cat /work/a"), "kept\n")
        self.assertEqual(self.sh("ls /work/b 2>/dev/null || echo gone"), "gone\n")
        new = self.db("SELECT jail_pid FROM sandboxes WHERE id=?", self.sid)[0][0]
        self.assertNotEqual(new, old)
        ev = self.db("SELECT from_state, to_state, reason FROM events WHERE sandbox_id=?"
                     " ORDER BY id", self.sid)
        steps = [(f, t) for f, t, r in ev if "recover" in r]
        self.assertEqual(steps, [("running", "rolling_back"), ("rolling_back", "running")], ev)
        self.assertTrue(any(r.startswith(f"recovered from disk snapshot {s['id']}")
                            for _, _, r in ev), ev)
        # The listing and a second GET (from the row) agree.
        listed = {x["id"]: x for x in self.api.call("GET", "/v1/sandboxes")["sandboxes"]}
        self.assertEqual(listed[self.sid]["recovered_from"], rf)

    def test_crash_right_after_recovery_fails(self):
        self.snap("disk", "d1")
        self.kill_jail()
        sb = self.wait_for(lambda s: s["state"] == "running" and s["recovered_from"],
                           "sandbox should recover")
        # At once again: the node does not go round in circles.
        self.kill_jail()
        sb = self.wait_for(lambda s: s["state"] == "failed", "sandbox should fail")
        self.assertIn("guest channel closed", sb["error"])

    @VM_ONLY
    def test_recover_from_full_snapshot(self):
        ev = self.api.stream("POST", f"/v1/sandboxes/{self.sid}/exec",
                             {"cmd": ["sh", "-c", COUNTER]})
        next(ev)
        ev.close()
        s0 = self.wait_count(5)
        full = self.snap("full", "f1")
        b = self.wait_count(self.count() + 10)
        # A later disk snapshot: a full one still wins.
        self.snap("disk", "d-later")
        self.kill_jail()
        sb = self.wait_for(lambda s: s["state"] == "running" and s["recovered_from"],
                           "sandbox should recover")
        self.assertEqual((sb["recovered_from"]["snapshot"], sb["recovered_from"]["kind"]),
                         (full["id"], "full"))
        c1 = self.count()
        self.assertGreaterEqual(c1, s0)
        self.assertLess(c1, b + 1)
        # The process from the snapshot carries on counting.
        self.assertGreater(self.wait_count(c1 + 5), c1)


if __name__ == "__main__":
    main()
