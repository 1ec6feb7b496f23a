"""Disk snapshots and rollback through the real API and CLI, on the ns backend
and (AIRLOCK_E2E_BACKEND=vm) on the vm backend, where the guest syncs before
the snapshot and a rollback boots a fresh guest on the rolled-back disk.

rm -rf a directory, roll back, and the files are there with the same sandbox
id; a process started before the rollback is gone after it; a snapshot costs
the same on a sandbox with 200 MiB written as on an empty one, and its size
figure follows what was written; list, delete (the btrfs subvolume goes),
deleting the sandbox removes its snapshots; another tenant gets 404; bad names
400; unknown snapshots 404; 409 on a deleted sandbox."""
import json
import os
import subprocess
import time
import unittest

from harness import BACKEND, CLI, AirlockTestCase, ApiError, main


class SnapshotTest(AirlockTestCase):
    # Only the snapshots these tests take (the scheduler has its own test).
    extra_args = ("--set", "snapshot_disk_interval_s=0")

    def setUp(self):
        self.sid = self.api.create(template="busybox")["id"]

    def tearDown(self):
        try:
            self.api.delete(self.sid)
        except ApiError:
            pass

    # ---- helpers ------------------------------------------------------------

    def sh(self, script, sid=None):
        code, out, err, _ = self.api.exec(sid or self.sid, ["sh", "-c", script])
        self.assertEqual(code, 0, f"{script}: {err!r}")
        return out.decode()

    def snap(self, name=None, sid=None, expect=(201,)):
        body = {"name": name} if name else {}
        return self.api.call("POST", f"/v1/sandboxes/{sid or self.sid}/snapshots", body,
                             expect=expect)

    def snaps(self, sid=None):
        return self.api.call("GET", f"/v1/sandboxes/{sid or self.sid}/snapshots")["snapshots"]

    def rollback(self, ref, sid=None, expect=(200,)):
        return self.api.call("POST", f"/v1/sandboxes/{sid or self.sid}/rollback",
                             {"snapshot": ref}, expect=expect)

    def snap_subvols(self, sid=None):
        """btrfs subvolumes under pool/snapshots/<sid>/."""
        pool = os.path.join(self.server.dir, "pool")
        r = subprocess.run(["btrfs", "subvolume", "list", pool], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [l.split()[-1] for l in r.stdout.splitlines()
                if f"snapshots/{sid or self.sid}/" in l]

    def status(self, method, path, body=None):
        status, data, _ = self.api.raw(method, path, body)
        return status, (json.loads(data) if data else None)

    # ---- the time machine -----------------------------------------------------

    def test_rm_rf_then_rollback(self):
        before = self.api.call("GET", f"/v1/sandboxes/{self.sid}")
        self.sh("mkdir -p /work/proj/sub && echo one > /work/proj/a && "
                "echo two > /work/proj/sub/b && sync")
        s = self.snap("before-rm")
        self.assertEqual(s["name"], "before-rm")
        self.assertEqual(s["kind"], "disk")
        self.assertTrue(s["id"].startswith("sn-"))
        self.sh("rm -rf /work/proj")
        self.assertEqual(self.sh("ls /work/proj 2>/dev/null || echo gone"), "gone\n")
        got = self.rollback("before-rm")
        self.assertEqual(got["id"], self.sid)
        self.assertEqual(got["state"], "running")
        self.assertEqual(got["created_at"], before["created_at"])
        self.assertEqual(got["tenant"], before["tenant"])
        self.assertEqual(self.sh("cat /work/proj/a /work/proj/sub/b"), "one\ntwo\n")
        # Writes after the rollback go to the new disk; rolling back by id
        # works too, and again.
        self.sh("echo three > /work/proj/a")
        self.rollback(s["id"])
        self.assertEqual(self.sh("cat /work/proj/a"), "one\n")
        listed = self.api.call("GET", "/v1/sandboxes")["sandboxes"]
        self.assertIn(self.sid, [x["id"] for x in listed])
        # Every step went through the state table and is in the event log.
        ev = self.db_rows("SELECT from_state, to_state, reason FROM events WHERE sandbox_id=?"
                          " ORDER BY id", self.sid)
        steps = [(f, t) for f, t, r in ev if "roll" in r or "snapshot" in r]
        self.assertEqual(steps, [("running", "running"),
                                 ("running", "rolling_back"), ("rolling_back", "running"),
                                 ("running", "rolling_back"), ("rolling_back", "running")], ev)
        self.assertTrue(any(r.startswith("rolled back to disk snapshot " + s["id"]) for _, _, r in ev))

    def test_processes_gone_after_rollback(self):
        s = self.snap()
        ev = self.api.stream("POST", f"/v1/sandboxes/{self.sid}/exec",
                             {"cmd": ["sh", "-c", "echo started; exec sleep 1000"]})
        pid = next(ev)["pid"]
        ev.close()
        self.assertIn("sleep 1000", self.sh("ps"))
        self.rollback(s["id"])
        self.assertNotIn("sleep 1000", self.sh("ps"))
        procs = self.api.call("GET", f"/v1/sandboxes/{self.sid}/processes")["processes"]
        old = [p for p in procs if p["pid"] == pid and p["cmd"][0] == "sh"]
        self.assertTrue(old and not old[0]["running"], procs)

    def test_rollback_of_paused_sandbox(self):
        self.sh("echo kept > /work/f")
        s = self.snap("p1")
        self.sh("rm /work/f")
        self.api.call("POST", f"/v1/sandboxes/{self.sid}/pause", {})
        # A paused sandbox can be snapshotted (the freezer holds it still).
        self.snap("paused-too")
        got = self.rollback(s["name"])
        self.assertEqual(got["state"], "running")
        code, out, err, events = self.api.exec(self.sid, ["cat", "/work/f"])
        if (code, out) != (0, b"kept\n"):
            # Seen once in CI (exit 0, no output) and not since: say whether
            # the file or the output stream was short.
            again = self.api.exec(self.sid, ["sh", "-c", "ls -l /work/f; cat /work/f"])
            procs = self.api.call("GET", f"/v1/sandboxes/{self.sid}/processes")
            self.fail(f"cat /work/f: {code} {out!r} {err!r}, events {events}; again: {again}; "
                      f"processes {procs}")

    def test_snapshot_cost_does_not_follow_disk_size(self):
        t0 = time.monotonic()
        empty = self.snap("empty")
        t_empty = time.monotonic() - t0
        # 200 MiB (vm: 64 MiB, its disk image is small), on disk (sync), so
        # the snapshot does not pay for flushing it.
        mb = 64 if BACKEND == "vm" else 200
        self.sh(f"dd if=/dev/zero of=/work/big bs=1M count={mb} 2>/dev/null && sync")
        # vm: the guest's writes may still sit dirty in the host's page
        # cache of its image; write them out first, so what is measured is
        # the snapshot alone
        os.sync()
        pool = os.statvfs(os.path.join(self.server.dir, "pool"))
        t0 = time.monotonic()
        full = self.snap("full")
        t_full = time.monotonic() - t0
        after = os.statvfs(os.path.join(self.server.dir, "pool"))
        # Times are printed, not asserted (a shared machine is noisy; the
        # figures are bench/lifecycle's). What is asserted: the snapshot
        # copied nothing, so the pool's free space hardly moved although the
        # sandbox holds mb MiB more than at the first snapshot.
        used = (pool.f_bfree - after.f_bfree) * pool.f_frsize
        print(f"\nsnapshot: empty {t_empty * 1000:.1f} ms, after {mb} MiB {t_full * 1000:.1f} ms;"
              f" size_bytes {empty['size_bytes']} / {full['size_bytes']}; pool space used"
              f" by the snapshot {used >> 10} KiB")
        self.assertLess(used, 16 << 20)
        # The delta follows what was written, not the disk: ~mb MiB here,
        # next to nothing for the first one and for one right after (vm:
        # ext4's journal and metadata inside the image add a few MiB).
        slack = 16 if BACKEND == "vm" else 1
        self.assertIsNotNone(full["size_bytes"])
        self.assertLess(empty["size_bytes"], slack << 20)
        self.assertGreaterEqual(full["size_bytes"], mb << 20)
        self.assertLess(full["size_bytes"], (mb + 10 + slack) << 20)
        again = self.snap("again")
        self.assertLess(again["size_bytes"], slack << 20)

    def test_list_and_delete(self):
        a = self.snap("a")
        self.sh("echo x > /work/x && sync")
        b = self.snap()
        self.assertEqual(b["name"], b["id"])  # the name defaults to the id
        lst = self.snaps()
        self.assertEqual([x["id"] for x in lst], [a["id"], b["id"]])
        for x in lst:
            self.assertEqual(set(x), {"id", "name", "sandbox_id", "kind", "created_at",
                                      "size_bytes", "scheduled"})
            self.assertFalse(x["scheduled"])
            self.assertEqual(x["kind"], "disk")
            self.assertTrue(x["created_at"].endswith("Z"))
            self.assertIsInstance(x["size_bytes"], int)
        self.assertEqual(sorted(self.snap_subvols()),
                         sorted(f"snapshots/{self.sid}/{x['id']}" for x in lst))
        self.api.call("DELETE", f"/v1/sandboxes/{self.sid}/snapshots/a", expect=(204,))
        self.assertEqual([x["id"] for x in self.snaps()], [b["id"]])
        self.assertEqual(self.snap_subvols(), [f"snapshots/{self.sid}/{b['id']}"])
        st, body = self.status("DELETE", f"/v1/sandboxes/{self.sid}/snapshots/a")
        self.assertEqual((st, body["error"]["code"]), (404, "not_found"))
        st, body = self.status("POST", f"/v1/sandboxes/{self.sid}/rollback", {"snapshot": "a"})
        self.assertEqual((st, body["error"]["code"]), (404, "not_found"))
        # Deleting the sandbox removes its snapshots.
        self.snap("c")
        self.assertEqual(len(self.snap_subvols()), 2)
        self.api.delete(self.sid)
        self.assertEqual(self.snap_subvols(), [])
        self.assertFalse(os.path.exists(
            os.path.join(self.server.dir, "pool", "snapshots", self.sid)))
        st, body = self.status("POST", f"/v1/sandboxes/{self.sid}/snapshots", {})
        self.assertEqual((st, body["state"]), (409, "deleted"))
        st, body = self.status("POST", f"/v1/sandboxes/{self.sid}/rollback", {"snapshot": "c"})
        self.assertEqual((st, body["state"]), (409, "deleted"))

    def test_bad_input_and_other_tenant(self):
        for bad in ["", "UPPER", "a/b", "../x", ".hidden", "x" * 65, 7, ["a"]]:
            st, body = self.status("POST", f"/v1/sandboxes/{self.sid}/snapshots", {"name": bad})
            self.assertEqual(st, 400, f"{bad!r}: {body}")
        st, _ = self.status("POST", f"/v1/sandboxes/{self.sid}/snapshots", {"nope": 1})
        self.assertEqual(st, 400)
        st, _ = self.status("POST", f"/v1/sandboxes/{self.sid}/rollback", {})
        self.assertEqual(st, 400)
        st, _ = self.status("POST", f"/v1/sandboxes/{self.sid}/rollback", {"snapshot": 5})
        self.assertEqual(st, 400)
        st, body = self.status("POST", f"/v1/sandboxes/{self.sid}/rollback",
                               {"snapshot": "missing"})
        self.assertEqual((st, body["error"]["code"]), (404, "not_found"))
        self.snap("dup")
        st, body = self.status("POST", f"/v1/sandboxes/{self.sid}/snapshots", {"name": "dup"})
        self.assertEqual((st, body["error"]["code"]), (409, "conflict"))
        st, _ = self.status("PUT", f"/v1/sandboxes/{self.sid}/snapshots", {})
        self.assertEqual(st, 405)
        _, other = self.new_tenant("snap-other")
        for method, path, body in [
                ("GET", f"/v1/sandboxes/{self.sid}/snapshots", None),
                ("POST", f"/v1/sandboxes/{self.sid}/snapshots", {}),
                ("DELETE", f"/v1/sandboxes/{self.sid}/snapshots/dup", None),
                ("POST", f"/v1/sandboxes/{self.sid}/rollback", {"snapshot": "dup"})]:
            st, _, _ = other.raw(method, path, body)
            self.assertEqual(st, 404, f"{method} {path}")
        self.assertEqual([x["name"] for x in self.snaps()], ["dup"])

    def test_cli(self):
        cfg = os.path.join(self.server.dir, "cli.json")

        def cli(*args):
            r = subprocess.run([CLI, "--config", cfg] + list(args), capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 0, f"{args}: {r.stderr}")
            return r.stdout

        self.sh("echo v1 > /work/v")
        snap_id = cli("snapshot", "create", self.sid, "--name", "cli1").strip()
        self.assertTrue(snap_id.startswith("sn-"), snap_id)
        out = cli("snapshot", "ls", self.sid)
        self.assertIn("cli1", out)
        self.assertIn(snap_id, out)
        self.sh("echo v2 > /work/v")
        out = cli("rollback", self.sid, "cli1")
        self.assertIn("running", out)
        self.assertEqual(self.sh("cat /work/v"), "v1\n")
        cli("snapshot", "rm", self.sid, snap_id)
        self.assertEqual(self.snaps(), [])

    def test_caps(self):
        node = self.api.call("GET", "/v1/node")
        caps = {b["name"]: b["caps"] for b in node["backends"]}
        self.assertTrue(caps["ns"]["disk_snapshot"])
        self.assertTrue(caps["vm"]["disk_snapshot"])


if __name__ == "__main__":
    main()
