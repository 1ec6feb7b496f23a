"""Full (memory) snapshots through the real API. On the vm backend
(AIRLOCK_E2E_BACKEND=vm): a process that counts in memory keeps its count
through a rollback to a full snapshot (the disk and the memory come back,
the process carries on from there), and through a fork with memory: each
child carries on counting, gets its own hostname, machine-id and RNG, and
the children then diverge; also when the child's QEMU was a fork standby
(spawned before the fork, the snapshot's disk and RAM cloned into it). On the ns backend, kind "full" is 501 with a
message saying why, and a bad kind is 400 everywhere. FullSnapshotQuotaTest
(vm): full snapshots' bytes (memory written, device state) count against the
sandbox's disk quota: a loop of "dirty RAM, full snapshot" stops with 422
quota_exceeded and leaves nothing of the refused one behind."""
import base64
import json
import os
import subprocess
import sys
import time
import unittest

from harness import BACKEND, AirlockTestCase, ApiError, main

VM_ONLY = unittest.skipUnless(BACKEND == "vm", "full snapshots are a vm capability")

COUNTER = ("i=0; while :; do i=$((i+1)); echo $i; echo $i > /tmp/count.new && "
           "mv /tmp/count.new /tmp/count; sleep 0.2; done")


class FullSnapshotTest(AirlockTestCase):
    def setUp(self):
        self.sid = self.api.create(template="busybox")["id"]
        self.made = [self.sid]

    def tearDown(self):
        for sid in self.made:
            try:
                self.api.delete(sid)
            except ApiError:
                pass

    def sh(self, script, sid=None):
        code, out, err, _ = self.api.exec(sid or self.sid, ["sh", "-c", script])
        self.assertEqual(code, 0, f"{script}: {err!r}")
        return out.decode()

    def count(self, sid=None):
        out = self.sh("cat /tmp/count 2>/dev/null || echo 0", sid).strip()
        return int(out or 0)

    def wait_count(self, at_least, sid=None, deadline_s=300):
        """Poll until the counter reaches at_least (a wait, not a timing
        assertion: the deadline only stops a hang)."""
        end = time.monotonic() + deadline_s
        while True:
            c = self.count(sid)
            if c >= at_least:
                return c
            self.assertLess(time.monotonic(), end, f"counter stuck at {c} in {sid or self.sid}")
            time.sleep(0.2)

    def start_counter(self):
        ev = self.api.stream("POST", f"/v1/sandboxes/{self.sid}/exec",
                             {"cmd": ["sh", "-c", COUNTER]})
        pid = next(ev)["pid"]
        ev.close()
        return pid

    def status(self, method, path, body=None):
        status, data, _ = self.api.raw(method, path, body)
        return status, (json.loads(data) if data else None)

    def snap_file(self, snap_id, suffix, sid=None):
        return os.path.join(self.server.dir, "pool", "snapshots", sid or self.sid,
                            snap_id + suffix)

    def test_bad_kind(self):
        for bad in ["memory", "", 1, ["full"]]:
            st, body = self.status("POST", f"/v1/sandboxes/{self.sid}/snapshots", {"kind": bad})
            self.assertEqual(st, 400, f"{bad!r}: {body}")

    @unittest.skipIf(BACKEND == "vm", "ns answers 501")
    def test_ns_says_no(self):
        node = self.api.call("GET", "/v1/node")
        caps = {b["name"]: b["caps"] for b in node["backends"]}
        self.assertFalse(caps["ns"]["full_snapshot"])
        self.assertFalse(caps["ns"]["memory_fork"])
        st, body = self.status("POST", f"/v1/sandboxes/{self.sid}/snapshots", {"kind": "full"})
        self.assertEqual((st, body["error"]["code"]), (501, "not_supported"), body)
        self.assertIn("memory", body["error"]["message"])
        self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{self.sid}/snapshots")["snapshots"],
                         [])

    @VM_ONLY
    def test_full_rollback_keeps_the_count(self):
        node = self.api.call("GET", "/v1/node")
        caps = {b["name"]: b["caps"] for b in node["backends"]}
        self.assertTrue(caps["vm"]["full_snapshot"])
        pid = self.start_counter()
        self.wait_count(5)
        self.sh("echo before > /work-marker")
        s0 = self.count()
        snap = self.api.call("POST", f"/v1/sandboxes/{self.sid}/snapshots",
                             {"kind": "full", "name": "mem1"}, expect=(201,))
        s1 = self.count()
        self.assertEqual(snap["kind"], "full")
        # A clone's RAM maps the template's file: the snapshot is that file
        # plus the pages the guest wrote (MiBs), not the whole memory in a
        # stream (~100 MB for this 256 MiB guest).
        self.assertTrue(os.path.exists(self.snap_file(snap["id"], ".mem")))
        self.assertLess(snap["size_bytes"], 48 << 20, snap)
        self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{self.sid}/snapshots")
                         ["snapshots"][0]["kind"], "full")
        # The sandbox runs on after the snapshot; a process started now does
        # not exist in the snapshot's memory.
        b = self.wait_count(s1 + 20)
        self.sh("rm /work-marker")
        ev = self.api.stream("POST", f"/v1/sandboxes/{self.sid}/exec", {"cmd": ["sleep", "3600"]})
        late = next(ev)["pid"]
        ev.close()
        got = self.api.call("POST", f"/v1/sandboxes/{self.sid}/rollback", {"snapshot": "mem1"})
        self.assertEqual((got["id"], got["state"]), (self.sid, "running"))
        # Disk and memory are back at the snapshot: the counter's file says
        # what it said then, the marker file is back.
        c1 = self.count()
        self.assertGreaterEqual(c1, s0)
        self.assertLess(c1, b)
        self.assertEqual(self.sh("cat /work-marker"), "before\n")
        # ...and the process carries on from its count in memory (a fresh
        # start would count from 1; a dead one would not count at all).
        c2 = self.wait_count(c1 + 5)
        self.assertGreater(c2, c1)
        self.assertEqual(self.sh("hostname").strip(), self.sid)
        # The process table follows it again: the counter is a running
        # process, and its output goes on from the snapshot's point.
        procs = {p["pid"]: p for p in
                 self.api.call("GET", f"/v1/sandboxes/{self.sid}/processes")["processes"]}
        self.assertIn(pid, procs)
        self.assertTrue(procs[pid]["running"], procs[pid])
        # ...and it matches the guest's: what the node shows running is
        # running in the guest, and the process started after the snapshot
        # is not shown running (the guest has no such process).
        self.assertFalse(procs.get(late, {}).get("running"), procs.get(late))
        running = sorted(p for p, r in procs.items() if r["running"])
        alive = self.sh(" ".join(f"[ -d /proc/{p} ] && echo {p};" for p in running) + " true")
        self.assertEqual(sorted(int(x) for x in alive.split()), running, procs)
        nums = []
        ev = self.api.stream("GET", f"/v1/sandboxes/{self.sid}/processes/{pid}/output"
                             "?offset=0&follow=1")
        for e in ev:
            if e["type"] == "stdout":
                nums += [int(x) for x in base64.b64decode(e["data"]).split()]
            if len(nums) >= 6:
                break
        ev.close()
        self.assertEqual(nums, sorted(nums), nums)
        self.assertGreaterEqual(nums[0], s0, nums)
        self.assertGreater(nums[-1], c2 - 1, nums)
        ev = [r[0] for r in self.db_rows("SELECT reason FROM events WHERE sandbox_id=?"
                                         " ORDER BY id", self.sid)]
        self.assertTrue(any(r.startswith("full snapshot " + snap["id"]) for r in ev), ev)
        self.assertTrue(any(r.startswith("rolled back to full snapshot " + snap["id"])
                            for r in ev), ev)
        # A child forked from the named full snapshot maps its memory file;
        # deleting the snapshot under it changes nothing for the child.
        kid = self.api.call("POST", f"/v1/sandboxes/{self.sid}/fork",
                            {"count": 1, "from_snapshot": "mem1"}, expect=(201,))["sandboxes"][0]
        self.made.append(kid["id"])
        k0 = self.count(kid["id"])
        self.assertGreaterEqual(k0, s0)
        self.api.call("DELETE", f"/v1/sandboxes/{self.sid}/snapshots/{snap['id']}", expect=(204,))
        self.assertFalse(os.path.exists(self.snap_file(snap["id"], ".mem")))
        self.assertGreater(self.wait_count(k0 + 5, kid["id"]), k0)
        self.assertEqual(self.sh("cat /work-marker", kid["id"]), "before\n")

    @VM_ONLY
    def test_cold_booted_guest_gets_a_stream(self):
        """A guest whose RAM is not a file (cold-booted here by a rollback to
        a disk snapshot) is saved as a whole migration stream, and comes back
        from it with its memory."""
        self.sh("echo one > /work-marker")
        disk = self.api.call("POST", f"/v1/sandboxes/{self.sid}/snapshots", {"kind": "disk"},
                             expect=(201,))
        self.api.call("POST", f"/v1/sandboxes/{self.sid}/rollback", {"snapshot": disk["id"]})
        self.start_counter()
        s0 = self.wait_count(3)
        snap = self.api.call("POST", f"/v1/sandboxes/{self.sid}/snapshots", {"kind": "full"},
                             expect=(201,))
        self.assertFalse(os.path.exists(self.snap_file(snap["id"], ".mem")))
        self.assertTrue(os.path.exists(self.snap_file(snap["id"], ".vmstate")))
        b = self.wait_count(self.count() + 10)
        self.api.call("POST", f"/v1/sandboxes/{self.sid}/rollback", {"snapshot": snap["id"]})
        c1 = self.count()
        self.assertGreaterEqual(c1, s0)
        self.assertLess(c1, b)
        self.assertGreater(self.wait_count(c1 + 3), c1)
        self.assertEqual(self.sh("cat /work-marker"), "one\n")

    def standbys(self):
        """How many fork standbys are parked now (GET /metrics)."""
        st, data, _ = self.api.raw("GET", "/metrics")
        return sum(int(float(l.rsplit(" ", 1)[1])) for l in data.decode().splitlines()
                   if l.startswith('airlock_warm_pool_ready{kind="vm_fork"'))

    @VM_ONLY
    def test_fork_on_a_standby(self):
        """A fork that finds a parked QEMU (a fork standby) clones the
        snapshot's disk into it and writes the parent's pages into its RAM
        (the fork form: only the pages written since the template's RAM
        file): the child carries on the parent's process, reads the
        parent's disk from its own file (not from its page cache), and
        writes go to the file in the child's own subvolume. The answer says
        where the fork's time went."""
        self.start_counter()
        mark = os.urandom(16).hex()
        self.sh(f"echo {mark} > /parent-mark && sync")
        # The first fork of this template and shape finds no standby and
        # asks for one.
        first = self.api.call("POST", f"/v1/sandboxes/{self.sid}/fork", {"count": 1},
                              expect=(201,))["sandboxes"][0]
        self.made.append(first["id"])
        end = time.monotonic() + 180
        while not self.standbys():
            self.assertLess(time.monotonic(), end, "no fork standby was parked")
            time.sleep(0.2)
        s0 = self.wait_count(self.count() + 3)
        st, data, resp = self.api.raw("POST", f"/v1/sandboxes/{self.sid}/fork", {"count": 1})
        self.assertEqual(st, 201, data)
        kid = json.loads(data)["sandboxes"][0]["id"]
        self.made.append(kid)
        self.assertIn(f"sandbox {kid}: forked from {self.sid}/", self.server.log())
        self.assertIn(f"sandbox {kid}: forked from", "\n".join(
            l for l in self.server.log().splitlines() if "on a standby qemu" in l))
        # The fork form: the parent's pages (some, never all of its RAM)
        # written into the standby's.
        line = [l for l in self.server.log().splitlines()
                if f"sandbox {kid}: " in l and "KiB of the parent's pages" in l]
        self.assertEqual(len(line), 1, line)
        kib = int(line[0].split(f"sandbox {kid}: ")[1].split()[0])
        self.assertTrue(0 < kib < 256 * 1024, line)
        timing = {k.split(";")[0].strip(): float(k.split("dur=")[1])
                  for k in resp.getheader("Server-Timing").split(",")}
        for step in ("hold", "capture", "row", "take", "net", "hello", "reset", "ready",
                     "total"):
            self.assertIn(step, timing)
        self.assertLessEqual(timing["capture"] + timing["take"], timing["total"])
        # The parent's process carries on in the child, which is itself.
        c1 = self.count(kid)
        self.assertGreaterEqual(c1, s0)
        self.assertGreater(self.wait_count(c1 + 5, kid), c1)
        self.assertEqual(self.sh("hostname", kid).strip(), kid)
        self.assertNotEqual(self.sh("cat /etc/machine-id", kid), self.sh("cat /etc/machine-id"))
        # The parent's disk, read from the disk: the guest's page cache
        # dropped first.
        self.sh("sync; echo 3 > /proc/sys/vm/drop_caches", kid)
        self.assertEqual(self.sh("cat /parent-mark", kid), mark + "\n")
        # What the child writes is in the disk file of its own subvolume.
        mine = os.urandom(24).hex()
        self.sh(f"echo {mine} > /child-mark && sync", kid)
        with open(os.path.join(self.server.dir, "pool", "sandboxes", kid, "rootfs.ext4"),
                  "rb") as f:
            found = False
            tail = b""
            while chunk := f.read(8 << 20):
                if mine.encode() in tail + chunk:
                    found = True
                    break
                tail = chunk[-64:]
        self.assertTrue(found, "the child's write is not in its subvolume's disk file")
        self.assertEqual(self.sh("cat /child-mark 2>/dev/null || echo none"), "none\n")

    @VM_ONLY
    def test_fork_with_memory(self):
        pid = self.start_counter()
        s0 = self.wait_count(5)
        kids = self.api.call("POST", f"/v1/sandboxes/{self.sid}/fork", {"count": 2},
                             expect=(201,))["sandboxes"]
        self.made += [k["id"] for k in kids]
        self.assertEqual(len(kids), 2)
        seen = {}
        for k in kids:
            self.assertEqual((k["parent"], k["state"]), (self.sid, "running"))
            c1 = self.count(k["id"])
            self.assertGreaterEqual(c1, s0)
            # The forked process carries on counting in the child, and is
            # in the child's process table.
            self.assertGreater(self.wait_count(c1 + 5, k["id"]), c1)
            procs = {p["pid"]: p for p in self.api.call(
                "GET", f"/v1/sandboxes/{k['id']}/processes")["processes"]}
            self.assertTrue(pid in procs and procs[pid]["running"], procs)
            seen[k["id"]] = (self.sh("hostname", k["id"]).strip(),
                             self.sh("cat /etc/machine-id", k["id"]).strip(),
                             self.sh("head -c 16 /dev/urandom | od -An -tx1", k["id"]))
            self.assertEqual(seen[k["id"]][0], k["id"])
        a, b = [seen[k["id"]] for k in kids]
        self.assertNotEqual(a[1], b[1])  # machine-id
        self.assertNotEqual(a[2], b[2])  # RNG
        # The children diverge: each one's counter and files are its own.
        ka, kb = kids[0]["id"], kids[1]["id"]
        self.sh("echo only-a > /tmp/mine", ka)
        self.assertEqual(self.sh("cat /tmp/mine 2>/dev/null || echo none", kb), "none\n")
        cb = self.count(kb)
        self.assertGreater(self.wait_count(cb + 3, kb), cb)
        # A child's own full snapshot: its RAM maps the fork's memory file
        # (deleted with the fork's throw-away snapshot by now), so it is a
        # memory file of its own again; a rollback to it keeps the count.
        snap = self.api.call("POST", f"/v1/sandboxes/{ka}/snapshots", {"kind": "full"},
                             expect=(201,))
        self.assertTrue(os.path.exists(self.snap_file(snap["id"], ".mem", ka)))
        self.assertLess(snap["size_bytes"], 48 << 20, snap)
        a0 = self.count(ka)
        a1 = self.wait_count(a0 + 10, ka)
        self.api.call("POST", f"/v1/sandboxes/{ka}/rollback", {"snapshot": snap["id"]})
        c = self.count(ka)
        self.assertGreaterEqual(c, a0 - 1)
        self.assertLess(c, a1)
        self.assertGreater(self.wait_count(c + 3, ka), c)
        self.assertEqual(self.sh("cat /tmp/mine", ka), "only-a\n")
        # The parent runs on too.
        self.assertGreater(self.wait_count(s0 + 5), s0)



@VM_ONLY
class FullSnapshotQuotaTest(AirlockTestCase):
    extra_args = ("--set", "snapshot_disk_interval_s=0", "--set", "snapshot_full_interval_s=0",
                  "--set", "vm_fork_pool=0")

    def test_full_snapshots_stop_at_the_disk_quota(self):
        disk_mb = 160
        s = self.api.create(template="busybox", limits={"memory_mb": 256, "disk_mb": disk_mb})
        sid = s["id"]
        snapdir = os.path.join(self.server.dir, "pool", "snapshots", sid)
        try:
            taken, status, data = [], None, b""
            for i in range(12):
                # 32 MiB of new bytes in RAM (a tmpfs file, rewritten)
                code, _, err, _ = self.api.exec(
                    sid, ["sh", "-c", f"head -c 33554432 /dev/urandom > /dev/shm/d{i % 2}"])
                self.assertEqual(code, 0, err)
                status, data, _ = self.api.raw("POST", f"/v1/sandboxes/{sid}/snapshots",
                                               {"kind": "full"})
                if status != 201:
                    break
                taken.append(json.loads(data))
            self.assertEqual(status, 422, data)
            e = json.loads(data)["error"]
            self.assertEqual(e["code"], "quota_exceeded")
            self.assertIn("limits.disk_mb", e["message"])
            self.assertGreaterEqual(len(taken), 1)
            listed = self.api.call("GET", f"/v1/sandboxes/{sid}/snapshots")["snapshots"]
            self.assertEqual([x["id"] for x in listed], [x["id"] for x in taken])
            total = sum(x["size_bytes"] for x in listed)
            self.assertLessEqual(total, disk_mb << 20)
            # the refused snapshot left no file behind, and what the kept
            # ones hold beside the subvolume is within the quota
            on_disk = sorted(os.listdir(snapdir))
            names = sorted(n for x in listed for n in os.listdir(snapdir)
                           if n.split(".")[0] == x["id"])
            self.assertEqual(on_disk, names)
            # (btrfs's own count: bytes no other file or snapshot shares,
            # e.g. not the template's memory a .mem file is a reflink of)
            beside = [os.path.join(snapdir, n) for n in on_disk if "." in n]
            os.sync()
            du = subprocess.run(["btrfs", "filesystem", "du", "--raw"] + beside,
                                capture_output=True, text=True, check=True).stdout
            excl = {l.split()[-1]: int(l.split()[1]) for l in du.splitlines()[1:] if l.strip()}
            held = sum(excl.values())
            # each one's size_bytes counts its memory file and device state
            for x in listed:
                own = sum(v for p, v in excl.items()
                          if os.path.basename(p).split(".")[0] == x["id"])
                self.assertGreaterEqual(x["size_bytes"], own, (x, du))
            print(f"full snapshots: {[x['size_bytes'] for x in listed]}, exclusive bytes "
                  f"of their files: {held}\n{du}", file=sys.stderr)
            self.assertLessEqual(held, disk_mb << 20, du)
            # the sandbox still works; one deleted makes room again
            code, out, _, _ = self.api.exec(sid, ["echo", "alive"])
            self.assertEqual(out, b"alive\n")
            for x in listed:
                self.api.call("DELETE", f"/v1/sandboxes/{sid}/snapshots/{x['id']}")
            self.api.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"},
                          expect=(201,))
        finally:
            self.api.delete(sid)

if __name__ == "__main__":
    main()
