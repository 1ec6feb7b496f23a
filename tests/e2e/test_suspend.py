"""Suspend to the object store and restore, through the real API, on either
backend (AIRLOCK_E2E_BACKEND=vm): files written before a suspend read back
after it; (vm) a counting process carries on with the same pid; nothing of
the sandbox is left on the node while suspended (no subvolume, no process
in its cgroup); the egress policy applies after a restore; exec with
auto_restore=false answers 409 naming `suspended`, a plain exec restores;
a flipped byte in an artifact fails the restore naming it (state stays
suspended) and a restore works once the byte is back, and so does a disk
stream cut in half (it goes into `btrfs receive` as it downloads: nothing
of what receive made is left); an unwritable store
fails the suspend with 503 and the sandbox keeps running; a node killed in
the middle of an upload leaves no restorable row, the sandbox usable, and a
second suspend completes. The store is the default file:// one,
DATA/objects."""
import glob
import http.client
import json
import os
import socket
import subprocess
import tempfile
import time

from harness import BACKEND, CLI, AirlockTestCase, ApiError, cgroup_parent, main, until

VM = BACKEND == "vm"
# The node dies (once) at this fault point when the flag file exists.
FAULT_DIR = tempfile.mkdtemp(prefix="airlock-fault-")
os.chmod(FAULT_DIR, 0o777)
FAULT_FLAG = os.path.join(FAULT_DIR, "armed")
os.environ["AIRLOCK_FAULT"] = "suspend_upload:" + FAULT_FLAG


class SuspendTest(AirlockTestCase):
    # no second tier here: a paused sandbox stays paused
    extra_args = ("--set", "suspend_after_idle=0")

    def setUp(self):
        self.sids = []
        node = self.api.call("GET", "/v1/node")
        caps = {b["name"]: b["caps"] for b in node["backends"]}
        if not caps[BACKEND or "ns"].get("suspend"):
            self.skipTest(f"the {BACKEND or 'ns'} backend cannot suspend")

    def tearDown(self):
        for sid in self.sids:
            try:
                self.api.delete(sid)
            except ApiError:
                pass

    # ---- helpers -------------------------------------------------------------

    def make(self, **kw):
        sb = self.api.create(**kw)
        self.sids.append(sb["id"])
        return sb["id"]

    def post(self, sid, op, expect=(200,)):
        return self.api.call("POST", f"/v1/sandboxes/{sid}/{op}", {}, expect=expect)

    def get(self, sid):
        return self.api.call("GET", f"/v1/sandboxes/{sid}")

    def sh(self, sid, script):
        code, out, err, _ = self.api.exec(sid, ["sh", "-c", script])
        return code, out.decode(errors="replace"), err.decode(errors="replace")

    def objects(self, sid):
        base = os.path.join(self.server.dir, "objects", "sandboxes", sid)
        return sorted(p for p in glob.glob(os.path.join(base, "*", "*")) if os.path.isfile(p))

    def subvolume(self, sid):
        return os.path.join(self.server.dir, "pool", "sandboxes", sid)

    def jail_procs(self, sid):
        """Pids in the sandbox's cgroup (ns: its processes; vm: its QEMU)."""
        parent = cgroup_parent(self.server.dir)
        pids = []
        for d in [f"/sys/fs/cgroup/{parent}/{sid}"] + \
                glob.glob(f"/sys/fs/cgroup/*/{parent}/{sid}"):
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    pids += f.read().split()
            except OSError:
                pass
        return pids

    def qemu_for(self, sid):
        out = subprocess.run(["pgrep", "-f", f"qemu-system.*{sid}"], capture_output=True,
                             text=True).stdout
        return out.split()

    def suspend(self, sid):
        t0 = time.time()
        r = self.post(sid, "suspend")
        self.assertEqual(r["state"], "suspended", r)
        self.assertTrue(r["snapshot_id"].startswith("su-"), r)
        self.assertGreater(r["suspended_bytes"], 0, r)
        self.assertEqual(r["suspend"], "memory" if VM else "disk")
        return r, time.time() - t0

    # ---- tests ---------------------------------------------------------------

    def test_files_survive_and_node_is_freed(self):
        sid = self.make()
        code, out, _ = self.sh(sid, "mkdir -p /root/w && echo keep-me > /root/w/note && "
                                    "head -c 4194304 /dev/urandom > /root/w/blob && "
                                    "sha256sum /root/w/blob && sync")
        self.assertEqual(code, 0, out)
        blob_sha = out.split()[0]
        r, _ = self.suspend(sid)
        snap = r["snapshot_id"]
        # the store holds the artifacts and, last, the manifest
        names = [os.path.relpath(p, os.path.dirname(os.path.dirname(p))) for p in self.objects(sid)]
        self.assertIn(f"{snap}/manifest.json", names)
        self.assertIn(f"{snap}/disk", names)
        # sealed (BYOK, the local provider by default; the manifest's
        # fields are checked in plaintext by test_byok's control run)
        with open(os.path.join(self.server.dir, "objects", "sandboxes", sid, snap,
                               "manifest.json"), "rb") as f:
            self.assertEqual(f.read(6), b"ALSEAL")
        with open(os.path.join(self.server.dir, "objects", "sandboxes", sid, snap, "disk"),
                  "rb") as f:
            disk = f.read()
        self.assertEqual(disk[:6], b"ALSEAL")
        # a delta against the template: about what was written, not the rootfs
        self.assertLess(len(disk), 4 * 2**20 + 2**20, len(disk))
        # nothing of it on the node: no subvolume, no process, no QEMU (the
        # answer comes once it is restorable; the node lets go right after)
        until(lambda: not os.path.exists(self.subvolume(sid)) and not self.jail_procs(sid)
              and not self.qemu_for(sid))
        self.assertFalse(os.path.exists(self.subvolume(sid)))
        self.assertEqual(self.jail_procs(sid), [])
        self.assertEqual(self.qemu_for(sid), [])
        # GET shows it; the list too
        g = self.get(sid)
        self.assertEqual((g["state"], g["snapshot_id"]), ("suspended", snap))
        # back: files as they were
        r = self.post(sid, "resume")
        self.assertEqual(r["state"], "running")
        self.assertNotIn("snapshot_id", r)
        code, out, _ = self.sh(sid, "cat /root/w/note; sha256sum /root/w/blob")
        self.assertEqual(code, 0)
        self.assertEqual(out.split()[:2], ["keep-me", blob_sha])
        self.assertTrue(os.path.exists(self.subvolume(sid)))
        # the objects went with the restore (right after its answer)
        until(lambda: self.objects(sid) == [])
        self.assertEqual(self.objects(sid), [])
        # and the CLI does both
        subprocess.run([CLI, "suspend", sid], check=True, capture_output=True,
                       env=self.cli_env())
        self.assertEqual(self.get(sid)["state"], "suspended")
        subprocess.run([CLI, "restore", sid], check=True, capture_output=True,
                       env=self.cli_env())
        self.assertEqual(self.get(sid)["state"], "running")
        ev = [e["to"] for e in self.api.call("GET", f"/v1/sandboxes/{sid}/events")["events"]]
        for s in ("suspending", "suspended", "restoring"):
            self.assertIn(s, ev)

    def cli_env(self):
        env = dict(os.environ)
        env["AIRLOCK_URL"] = "http://" + self.server.addr
        env["AIRLOCK_API_KEY"] = self.server.admin_key
        return env

    def test_processes(self):
        """vm: a counting process carries on from where it was, same pid;
        ns: the suspend keeps the files only, processes end."""
        sid = self.make()
        code, out, _ = self.sh(sid, "sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c; "
                                    "sleep 0.2; done' >/dev/null 2>&1 & echo $!")
        self.assertEqual(code, 0)
        pid = out.strip()
        time.sleep(1.5)
        _, before, _ = self.sh(sid, "cat /tmp/c")
        before = int(before)
        self.assertGreater(before, 2)
        self.suspend(sid)
        time.sleep(2)   # suspended time is not counted by the guest
        self.assertEqual(self.post(sid, "resume")["state"], "running")
        time.sleep(1)
        code, out, _ = self.sh(sid, f"cat /tmp/c; kill -0 {pid} && echo alive")
        lines = out.split()
        if VM:
            self.assertEqual(lines[-1], "alive", out)
            n = int(lines[0])
            # carried on: neither restarted from 0 nor counted while suspended
            self.assertGreaterEqual(n, before, out)
            self.assertLess(n, before + 40, out)
        else:
            self.assertNotIn("alive", out)
            self.assertGreaterEqual(int(lines[0]), before)   # the file is kept

    def test_vm_memory_holds_no_file_cache(self):
        """vm: the files a sandbox wrote are in the disk artifact only. Before
        a suspend the guest drops its page cache and zeroes its free pages
        (RECLAIM), so the memory artifact is not a second copy of them."""
        if not VM:
            self.skipTest("the memory artifact is the vm backend's")
        sid = self.make()
        mib = 48
        code, out, _ = self.sh(sid, f"head -c {mib * 2**20} /dev/urandom > /root/big && "
                                    "sha256sum /root/big && sync")
        self.assertEqual(code, 0, out)
        want = out.split()[0]
        r, _ = self.suspend(sid)
        d = os.path.join(self.server.dir, "objects", "sandboxes", sid, r["snapshot_id"])
        disk, memory = (os.path.getsize(os.path.join(d, n)) for n in ("disk", "memory"))
        # random bytes do not compress: the disk artifact holds them once ...
        self.assertGreater(disk, mib * 2**20, (disk, memory))
        # ... and the memory artifact not again (it was the file size and
        # more before the guest dropped its cache; the guest's free pages
        # it keeps as a reserve are not zeroed: a few MiB may be old cache)
        self.assertLess(memory, mib * 2**20 // 2, (disk, memory))
        self.assertEqual(self.post(sid, "resume")["state"], "running")
        # read back from the disk (the page cache was dropped)
        code, out, _ = self.sh(sid, "sha256sum /root/big")
        self.assertEqual((code, out.split()[0]), (0, want), out)

    def test_auto_restore(self):
        sid = self.make()
        self.sh(sid, "echo 1 > /root/a")
        self.suspend(sid)
        status, data, _ = self.api.raw("POST", f"/v1/sandboxes/{sid}/exec?auto_restore=false",
                                       {"cmd": ["cat", "/root/a"]})
        self.assertEqual(status, 409, data)
        j = json.loads(data)
        self.assertEqual(j["error"]["code"], "conflict")
        self.assertIn("suspended", j["error"]["message"])
        self.assertEqual(j["state"], "suspended")
        self.assertEqual(self.get(sid)["state"], "suspended")
        # files and processes too
        status, _, _ = self.api.raw("GET", f"/v1/sandboxes/{sid}/files?path=/root/a"
                                           "&auto_restore=false")
        self.assertEqual(status, 409)
        # without it, the exec restores transparently
        code, out, _ = self.sh(sid, "cat /root/a")
        self.assertEqual((code, out), (0, "1\n"))
        self.assertEqual(self.get(sid)["state"], "running")
        # suspending again from paused works too, and resume gives running
        self.post(sid, "pause")
        self.suspend(sid)
        self.assertEqual(self.post(sid, "resume")["state"], "running")
        # restore and suspend in the wrong state: 409 naming it
        status, data, _ = self.api.raw("POST", f"/v1/sandboxes/{sid}/restore", {})
        self.assertEqual(status, 409, data)
        self.assertEqual(json.loads(data)["state"], "running")
        self.suspend(sid)
        status, data, _ = self.api.raw("POST", f"/v1/sandboxes/{sid}/suspend", {})
        self.assertEqual(status, 409, data)
        self.assertEqual(json.loads(data)["state"], "suspended")
        self.post(sid, "restore")
        # a delete of a suspended sandbox removes its objects
        self.suspend(sid)
        self.assertNotEqual(self.objects(sid), [])
        self.api.delete(sid)
        self.assertEqual(self.objects(sid), [])

    def test_egress_policy_after_restore(self):
        sid = self.make(network={"allow": {"domains": ["allowed.test"]}})
        # names for the test: 192.0.2.x is nobody's; the gateway decides on
        # the Host header before it would dial
        self.sh(sid, "echo '192.0.2.7 denied.test' >> /etc/hosts")
        before = self.api.call("GET", f"/v1/sandboxes/{sid}/network")
        self.suspend(sid)
        self.post(sid, "restore")
        after = self.api.call("GET", f"/v1/sandboxes/{sid}/network")
        self.assertEqual(after["network"], before["network"])
        self.assertTrue(after["addr"])
        code, out, _ = self.sh(sid, "timeout 10 wget -q -O - http://denied.test/")
        self.assertNotEqual(code, 0, out)
        log = self.api.call("GET", f"/v1/sandboxes/{sid}/network/log")["entries"]
        deny = [e for e in log if e.get("host") == "denied.test" and e["decision"] == "deny"]
        self.assertTrue(deny, log)

    def test_ports_after_restore(self):
        sid = self.make()
        self.sh(sid, "mkdir -p /root/www && echo hi-from-sandbox > /root/www/index.html")
        self.suspend(sid)
        self.post(sid, "restore")
        code, out, _ = self.sh(sid, "httpd -p 8080 -h /root/www")
        self.assertEqual(code, 0, out)
        url = f"/v1/sandboxes/{sid}/ports/8080/index.html"
        for _ in range(50):
            status, data, _ = self.api.raw("GET", url)
            if status == 200:
                break
            time.sleep(0.1)
        self.assertEqual((status, data), (200, b"hi-from-sandbox\n"))
        # a port request on a suspended sandbox: 409 with auto_restore=false,
        # else it restores it (vm: the server is still there)
        self.suspend(sid)
        status, data, _ = self.api.raw("GET", url + "?auto_restore=false")
        self.assertEqual(status, 409, data)
        status, data, _ = self.api.raw("GET", url)
        self.assertEqual(self.get(sid)["state"], "running")
        if VM:
            self.assertEqual((status, data), (200, b"hi-from-sandbox\n"))
        else:
            self.assertEqual(status, 502, data)   # ns: the server's process ended

    def test_bad_artifact_then_fixed(self):
        sid = self.make()
        self.sh(sid, "echo precious > /root/p; head -c 65536 /dev/urandom > /root/q; sync")
        r, _ = self.suspend(sid)
        path = os.path.join(self.server.dir, "objects", "sandboxes", sid, r["snapshot_id"],
                            "disk")
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0xff]))
        status, data, _ = self.api.raw("POST", f"/v1/sandboxes/{sid}/restore", {})
        self.assertGreaterEqual(status, 500, data)
        msg = json.loads(data)["error"]["message"]
        self.assertIn("disk", msg)
        self.assertEqual(self.get(sid)["state"], "suspended")
        self.assertFalse(os.path.exists(self.subvolume(sid)))
        self.assertTrue(os.path.exists(path))   # nothing deleted
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            f.write(b)
        self.assertEqual(self.post(sid, "restore")["state"], "running")
        code, out, _ = self.sh(sid, "cat /root/p")
        self.assertEqual((code, out), (0, "precious\n"))

    def test_cut_disk_stream_then_fixed(self):
        # The sealed disk stream goes into `btrfs receive` as it downloads:
        # one cut short (the store lost its tail) fails the restore naming
        # the artifact, and nothing receive made of the first half is left.
        sid = self.make()
        _, md5, _ = self.sh(sid, "head -c 3145728 /dev/urandom > /root/q; sync; md5sum /root/q")
        r, _ = self.suspend(sid)
        path = os.path.join(self.server.dir, "objects", "sandboxes", sid, r["snapshot_id"],
                            "disk")
        with open(path, "rb") as f:
            whole = f.read()
        self.assertGreater(len(whole), 3 << 20)
        with open(path, "r+b") as f:
            f.truncate(len(whole) // 2)
        status, data, _ = self.api.raw("POST", f"/v1/sandboxes/{sid}/restore", {})
        self.assertGreaterEqual(status, 500, data)
        self.assertIn("disk", json.loads(data)["error"]["message"])
        self.assertEqual(self.get(sid)["state"], "suspended")
        self.assertFalse(os.path.exists(self.subvolume(sid)))
        snaps = os.path.join(self.server.dir, "pool", "snapshots", sid)
        self.assertEqual(os.listdir(snaps) if os.path.isdir(snaps) else [], [])
        with open(path, "wb") as f:
            f.write(whole)
        self.assertEqual(self.post(sid, "restore")["state"], "running")
        self.assertEqual(self.sh(sid, "md5sum /root/q"), (0, md5, ""))

    def test_unwritable_store(self):
        sid = self.make()
        self.sh(sid, "echo 5 > /root/five")
        objects = os.path.join(self.server.dir, "objects")
        dirs = [objects] + [d for d, _, _ in os.walk(objects)][1:]
        modes = {d: os.stat(d).st_mode & 0o7777 for d in dirs}
        try:
            for d in dirs:
                os.chmod(d, 0o500)
            status, data, _ = self.api.raw("POST", f"/v1/sandboxes/{sid}/suspend", {})
            self.assertEqual(status, 503, data)
            self.assertEqual(json.loads(data)["error"]["code"], "store_unavailable")
        finally:
            for d, m in modes.items():
                os.chmod(d, m)
        g = self.get(sid)
        self.assertEqual(g["state"], "running")
        self.assertNotIn("snapshot_id", g)
        code, out, _ = self.sh(sid, "cat /root/five")
        self.assertEqual((code, out), (0, "5\n"))
        # paused stays paused
        self.post(sid, "pause")
        try:
            for d in dirs:
                os.chmod(d, 0o500)
            status, _, _ = self.api.raw("POST", f"/v1/sandboxes/{sid}/suspend", {})
            self.assertEqual(status, 503)
        finally:
            for d, m in modes.items():
                os.chmod(d, m)
        self.assertEqual(self.get(sid)["state"], "paused")

    def test_node_killed_during_upload(self):
        sid = self.make()
        self.sh(sid, "echo survivor > /root/s; head -c 8388608 /dev/urandom > /root/big")
        old = self.server.pid_of("node")
        with open(FAULT_FLAG, "w"):
            pass
        try:
            self.api.raw("POST", f"/v1/sandboxes/{sid}/suspend", {})
        except Exception:
            pass   # the connection may just drop
        self.assertFalse(os.path.exists(FAULT_FLAG), "the fault point was not reached")
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if self.server.pid_of("node") != old and \
                        self.api.raw("GET", "/v1/sandboxes")[0] == 200:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        g = self.get(sid)
        self.assertEqual(g["state"], "running", g)
        self.assertNotIn("snapshot_id", g)
        # no restorable row, and the partial upload is gone
        db = os.path.join(self.server.dir, "db", "airlock.db")
        rows = subprocess.run(["sqlite3", db, f"SELECT * FROM suspensions WHERE "
                               f"sandbox_id='{sid}'"], capture_output=True, text=True).stdout
        self.assertEqual(rows.strip(), "")
        self.assertEqual(self.objects(sid), [])
        code, out, _ = self.sh(sid, "cat /root/s")
        self.assertEqual((code, out), (0, "survivor\n"))
        # a second suspend completes, and restores
        self.suspend(sid)
        self.post(sid, "resume")
        code, out, _ = self.sh(sid, "cat /root/s")
        self.assertEqual((code, out), (0, "survivor\n"))


class UnixConn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=300)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(300)
        self.sock.connect(self.path)


def closed_port():
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]   # closed again once this returns


class UnreachableStoreTest(AirlockTestCase):
    """An S3 store on a closed port: suspend answers 503 and the sandbox
    keeps running, whole."""
    extra_args = ("--set", "suspend_after_idle=0", "--object-store",
                  f"s3://bucket?endpoint=http://127.0.0.1:{closed_port()}&region=us-east-1"
                  "&path_style=1", "--set", "s3_access_key=test", "--set", "s3_secret_key=test")

    def test_suspend_fails_cleanly(self):
        node = self.api.call("GET", "/v1/node")
        if not {b["name"]: b["caps"] for b in node["backends"]}[BACKEND or "ns"].get("suspend"):
            self.skipTest("this backend cannot suspend")
        sid = self.api.create()["id"]
        try:
            self.api.exec(sid, ["sh", "-c", "echo still > /root/s"])
            t0 = time.time()
            status, data, _ = self.api.raw("POST", f"/v1/sandboxes/{sid}/suspend", {})
            self.assertEqual(status, 503, data)
            self.assertEqual(json.loads(data)["error"]["code"], "store_unavailable")
            self.assertLess(time.time() - t0, 120)
            g = self.api.call("GET", f"/v1/sandboxes/{sid}")
            self.assertEqual(g["state"], "running", g)
            code, out, _, _ = self.api.exec(sid, ["cat", "/root/s"])
            self.assertEqual((code, out), (0, b"still\n"))
            snaps = glob.glob(os.path.join(self.server.dir, "pool", "snapshots", sid, "su-*"))
            self.assertEqual(snaps, [])   # its suspend snapshot went too
        finally:
            self.api.delete(sid)


class CapacityTest(AirlockTestCase):
    """A suspended sandbox does not count against max_sandboxes; its restore
    does, and waits for room (503, still suspended)."""
    extra_args = ("--set", "suspend_after_idle=0", "--set", "max_sandboxes=1",
                  "--set", "ns_warm_pool=0", "--set", "vm_warm_pool=0")

    def test_room_for_a_restore(self):
        node = self.api.call("GET", "/v1/node")
        if not {b["name"]: b["caps"] for b in node["backends"]}[BACKEND or "ns"].get("suspend"):
            self.skipTest("this backend cannot suspend")
        a = self.api.create()["id"]
        self.assertEqual(self.api.call("POST", f"/v1/sandboxes/{a}/suspend", {})["state"],
                         "suspended")
        b = self.api.create()["id"]    # room: a holds nothing
        status, data, _ = self.api.raw("POST", f"/v1/sandboxes/{a}/restore", {})
        self.assertEqual(status, 503, data)
        self.assertIn("maximum", json.loads(data)["error"]["message"])
        self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{a}")["state"], "suspended")
        self.api.delete(b)
        self.assertEqual(self.api.call("POST", f"/v1/sandboxes/{a}/restore", {})["state"],
                         "running")
        self.api.delete(a)


class IdleTierTest(AirlockTestCase):
    """The second idle tier: paused for suspend_after_idle seconds (the
    scheduler's clock, moved by the test) → suspended, reason `idle`."""
    extra_args = ("--set", "suspend_after_idle=600", "--set", "debug_clock=true",
                  "--set", "snapshot_disk_interval_s=0", "--set", "snapshot_full_interval_s=0")

    def advance(self, seconds):
        c = UnixConn(os.path.join(self.server.dir, "run", "node.sock"))
        c.request("POST", "/v1/debug/clock", body=json.dumps({"advance_s": seconds}),
                  headers={"X-Airlock-Tenant": "t-test", "X-Airlock-Admin": "1",
                           "Content-Type": "application/json"})
        r = c.getresponse()
        self.assertEqual(r.status, 200, r.read())
        r.read()
        c.close()

    def test_paused_then_suspended(self):
        node = self.api.call("GET", "/v1/node")
        if not {b["name"]: b["caps"] for b in node["backends"]}[BACKEND or "ns"].get("suspend"):
            self.skipTest("this backend cannot suspend")
        sb = self.api.create()
        sid = sb["id"]
        try:
            self.api.exec(sid, ["sh", "-c", "echo idle > /root/i"])
            running = self.api.create()
            self.api.call("POST", f"/v1/sandboxes/{sid}/pause", {})
            self.advance(300)
            self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{sid}")["state"], "paused")
            self.advance(301)
            g = self.api.call("GET", f"/v1/sandboxes/{sid}")
            self.assertEqual(g["state"], "suspended", g)
            ev = self.api.call("GET", f"/v1/sandboxes/{sid}/events")["events"]
            self.assertIn("idle", [e["reason"] for e in ev if e["to"] == "suspending"][-1])
            # a running sandbox is not touched by the second tier
            self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{running['id']}")["state"],
                             "running")
            self.api.delete(running["id"])
            code, out, _, _ = self.api.exec(sid, ["cat", "/root/i"])
            self.assertEqual((code, out), (0, b"idle\n"))
        finally:
            try:
                self.api.delete(sid)
            except ApiError:
                pass

    def test_vm_idle_pause_reclaims(self):
        """vm: the idle pause (first tier) has the guest drop its page cache
        and zero its free pages first, as a suspend of a running guest does:
        the second tier suspends it paused, when it cannot, and its memory
        artifact is then no second copy of the files it wrote."""
        if not VM:
            self.skipTest("the memory artifact is the vm backend's")
        mib = 48
        sid = self.api.create(idle_timeout_s=60)["id"]
        try:
            code, out, _, _ = self.api.exec(sid, ["sh", "-c", f"head -c {mib * 2**20} "
                                                  "/dev/urandom > /root/big && sync"])
            self.assertEqual(code, 0, out)
            for _ in range(6):
                self.advance(61)
                if self.api.call("GET", f"/v1/sandboxes/{sid}")["state"] == "paused":
                    break
            ev = self.api.call("GET", f"/v1/sandboxes/{sid}/events")["events"]
            self.assertIn("idle", [e["reason"] for e in ev if e["to"] == "paused"][-1], ev)
            self.advance(601)
            g = self.api.call("GET", f"/v1/sandboxes/{sid}")
            self.assertEqual(g["state"], "suspended", g)
            d = os.path.join(self.server.dir, "objects", "sandboxes", sid, g["snapshot_id"])
            disk, memory = (os.path.getsize(os.path.join(d, n)) for n in ("disk", "memory"))
            self.assertGreater(disk, mib * 2**20, (disk, memory))
            # without it: the file's pages, 48 MiB and more
            self.assertLess(memory, mib * 2**20 // 2, (disk, memory))
            code, out, _, _ = self.api.exec(sid, ["sh", "-c", "wc -c < /root/big"])
            self.assertEqual((code, out.strip()), (0, str(mib * 2**20).encode()))
        finally:
            try:
                self.api.delete(sid)
            except ApiError:
                pass


if __name__ == "__main__":
    try:
        main()
    finally:
        try:
            os.unlink(FAULT_FLAG)
        except OSError:
            pass
        os.rmdir(FAULT_DIR)
