"""Limits from the create request reach the kernel (cgroup values, disk
quota), the daemons that face clients run unprivileged, and templates can be
built from a host directory and a tar file through the CLI. CapsTest: the
node's maxima per sandbox (a pid bomb at the maximum leaves the host able to
fork), tenant quotas (8 concurrent creates against a quota of 3, forks,
memory, CPUs, disk, snapshots) and max_snapshots per sandbox."""
import glob
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time

from harness import AirlockTestCase, ApiError, CLI, cgroup_dirs, main


def cgroup_value(sid, names):
    for n in names:
        for p in glob.glob(f"/sys/fs/cgroup/*/airlock*/{sid}/{n}") + \
                glob.glob(f"/sys/fs/cgroup/airlock*/{sid}/{n}"):
            with open(p) as f:
                return f.read().strip()
    return None


class LimitsTest(AirlockTestCase):
    def test_cgroup_limits_from_request(self):
        s = self.api.create(template="busybox",
                            limits={"memory_mb": 96, "cpus": 0.5, "pids": 40})
        try:
            sid = s["id"]
            self.assertEqual(s["limits"]["memory_mb"], 96)
            mem = cgroup_value(sid, ["memory.limit_in_bytes", "memory.max"])
            self.assertEqual(int(mem), 96 << 20)
            pids = cgroup_value(sid, ["pids.max"])
            self.assertEqual(int(pids), 40)
            quota = cgroup_value(sid, ["cpu.cfs_quota_us"])
            if quota is not None:
                period = int(cgroup_value(sid, ["cpu.cfs_period_us"]))
                self.assertEqual(int(quota) * 2, period)
            else:
                q, period = cgroup_value(sid, ["cpu.max"]).split()
                self.assertEqual(int(q) * 2, int(period))
        finally:
            self.api.delete(s["id"])

    def test_disk_quota(self):
        s = self.api.create(template="busybox", limits={"disk_mb": 20})
        try:
            code, out, err, _ = self.api.exec(
                s["id"], ["sh", "-c", "dd if=/dev/zero of=/work/big bs=1M count=64 2>&1; sync; echo rc=$?"])
            self.assertRegex(out, rb"(?i)quota|no space")
            # the sandbox still works once the write failed
            code, out, _, _ = self.api.exec(s["id"], ["sh", "-c", "rm /work/big; echo ok"])
            self.assertEqual(out, b"ok\n")
        finally:
            self.api.delete(s["id"])

    def test_daemons_run_unprivileged(self):
        for role in ("node", "api"):
            with open(f"/proc/{self.server.pid_of(role)}/status") as f:
                uids = [l for l in f if l.startswith("Uid:")][0].split()[1:]
            self.assertTrue(all(u != "0" for u in uids), (role, uids))
        with open(f"/proc/{self.server.pid_of('nodemgr')}/status") as f:
            uids = [l for l in f if l.startswith("Uid:")][0].split()[1:]
        self.assertEqual(uids[0], "0")

    def cli(self, *args):
        r = subprocess.run([CLI, "--config", os.path.join(self.server.dir, "cli.json")] + list(args),
                           capture_output=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def make_rootfs(self, d):
        os.makedirs(os.path.join(d, "bin"))
        shutil.copy("/bin/busybox", os.path.join(d, "bin", "busybox"))
        for tool in ("sh", "cat", "echo", "ls"):
            os.symlink("busybox", os.path.join(d, "bin", tool))
        os.makedirs(os.path.join(d, "etc"))
        with open(os.path.join(d, "etc", "marker"), "w") as f:
            f.write("from-host\n")

    def test_template_from_dir_and_tar(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = os.path.join(tmp, "root")
            self.make_rootfs(root)
            os.chmod(tmp, 0o755)
            r = self.cli("template", "build", "fromdir", "--from-dir", root)
            tar = os.path.join(tmp, "root.tar")
            with tarfile.open(tar, "w") as t:
                t.add(root, arcname=".")
            os.chmod(tar, 0o644)
            self.cli("template", "build", "fromtar", "--from-tar", tar)
        names = [t["name"] for t in self.api.call("GET", "/v1/templates")["templates"]]
        self.assertIn("fromdir", names)
        self.assertIn("fromtar", names)
        for name in ("fromdir", "fromtar"):
            s = self.api.create(template=name)
            try:
                code, out, _, _ = self.api.exec(s["id"], ["cat", "/etc/marker"])
                self.assertEqual(out, b"from-host\n")
            finally:
                self.api.delete(s["id"])
        # a bad source fails cleanly and leaves no template behind
        r = subprocess.run([CLI, "--config", os.path.join(self.server.dir, "cli.json"),
                            "template", "build", "broken", "--from-dir", "/nonexistent"],
                           capture_output=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        ready = [t for t in self.api.call("GET", "/v1/templates")["templates"]
                 if t["name"] == "broken" and t["status"] == "ready"]
        self.assertEqual(ready, [])

    def warm_markers(self):
        """The /etc/marker of every parked ns jail's subvolume."""
        out = []
        for pat in ("warm-*/etc/marker", "warm-*/rootfs/etc/marker"):
            for p in glob.glob(os.path.join(self.server.dir, "pool", "warm", pat)):
                try:
                    with open(p) as f:
                        out.append(f.read().strip())
                except OSError:
                    pass   # removed meanwhile
        return out

    def build_marked(self, name, marker):
        with tempfile.TemporaryDirectory() as tmp:
            root = os.path.join(tmp, "root")
            self.make_rootfs(root)
            with open(os.path.join(root, "etc", "marker"), "w") as f:
                f.write(marker + "\n")
            os.chmod(tmp, 0o755)
            self.cli("template", "build", name, "--from-dir", root)

    def test_template_delete_and_replaced_version_retired(self):
        self.build_marked("deltest", "v1")
        s = self.api.create(template="deltest")
        # in use: 409, and the template still works
        st, body, _ = self.api.raw("DELETE", "/v1/templates/deltest")
        self.assertEqual(st, 409, body)
        self.assertIn(b"used by 1 sandbox", body)
        # a tenant may not delete templates
        _, t = self.new_tenant("tmpl-del")
        st, _, _ = t.raw("DELETE", "/v1/templates/deltest")
        self.assertEqual(st, 403)
        self.api.delete(s["id"])
        # the create refilled the warm pool with version 1 of the template
        for _ in range(300):
            if "v1" in self.warm_markers():
                break
            time.sleep(0.1)
        self.assertIn("v1", self.warm_markers())
        # a new version retires the parked jails of the old one
        self.build_marked("deltest", "v2")
        # (a jail still being warmed when the build ended goes when it is parked)
        for _ in range(100):
            if "v1" not in self.warm_markers():
                break
            time.sleep(0.1)
        self.assertNotIn("v1", self.warm_markers(), self.server.log())
        s = self.api.create(template="deltest")
        try:
            _, out, _, _ = self.api.exec(s["id"], ["cat", "/etc/marker"])
            self.assertEqual(out, b"v2\n")
        finally:
            self.api.delete(s["id"])
        for _ in range(300):
            if "v2" in self.warm_markers():
                break
            time.sleep(0.1)
        # deleted: gone from the list, the pool and its warm jails; creates fail
        self.cli("template", "rm", "deltest")
        names = [x["name"] for x in self.api.call("GET", "/v1/templates")["templates"]]
        self.assertNotIn("deltest", names)
        self.assertEqual(glob.glob(os.path.join(self.server.dir, "pool", "templates", "deltest")), [])
        for _ in range(100):
            if not [m for m in self.warm_markers() if m.startswith("v")]:
                break
            time.sleep(0.1)
        self.assertEqual([m for m in self.warm_markers() if m.startswith("v")], [])
        st, _, _ = self.api.raw("POST", "/v1/sandboxes", {"template": "deltest"})
        self.assertEqual(st, 404)
        st, _, _ = self.api.raw("DELETE", "/v1/templates/deltest")
        self.assertEqual(st, 404)
        st, _, _ = self.api.raw("DELETE", "/v1/templates/Bad..Name")
        self.assertEqual(st, 400)

    def test_cli_tty(self):
        s = self.api.create(template="busybox")
        try:
            cmd = f"{CLI} --config {self.server.dir}/cli.json exec -t {s['id']} -- sh -c 'tty; stty size'"
            r = subprocess.run(["script", "-qec", "stty rows 21 cols 77; " + cmd, "/dev/null"],
                               capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn(b"/dev/pts/", r.stdout)
            self.assertIn(b"21 77", r.stdout)
        finally:
            self.api.delete(s["id"])


class CapsTest(AirlockTestCase):
    """Maxima per sandbox, tenant quotas, max_snapshots (3 here)."""
    extra_args = ("--set", "max_snapshots=3", "--set", "snapshot_disk_interval_s=0",
                  "--set", "max_pids_all_sandboxes=5000", "--set", "max_sandbox_memory_mb=1024",
                  "--set", "max_sandbox_cpus=1", "--set", "max_sandbox_disk_mb=8192")

    def expect_422(self, client, code, words, method, path, body):
        status, data, _ = client.raw(method, path, body)
        self.assertEqual(status, 422, data)
        err = json.loads(data)["error"]
        self.assertEqual(err["code"], code, err)
        for w in words:
            self.assertIn(w, err["message"])
        return err["message"]

    def create_body(self, **kw):
        kw.setdefault("template", "busybox")
        return kw

    def test_sandbox_maxima(self):
        # Over the node's maximum per sandbox (pids: the default; the rest
        # set below this host's size): 422 invalid_argument naming the limit
        # and the config key; nothing is made. Past the node's size it stays
        # over_capacity.
        before = len(self.subvolumes())
        for limits, words in (({"pids": 4097}, ["limits.pids", "max_sandbox_pids = 4096"]),
                              ({"pids": 4194304}, ["limits.pids", "max_sandbox_pids"]),
                              ({"memory_mb": 1025}, ["limits.memory_mb",
                                                     "max_sandbox_memory_mb = 1024"]),
                              ({"cpus": 1.5}, ["limits.cpus", "max_sandbox_cpus = 1"]),
                              ({"disk_mb": 8193}, ["limits.disk_mb", "max_sandbox_disk_mb = 8192"])):
            self.expect_422(self.api, "invalid_argument", words, "POST", "/v1/sandboxes",
                            self.create_body(limits=limits))
        self.expect_422(self.api, "over_capacity", ["limits exceed the node"], "POST",
                        "/v1/sandboxes", self.create_body(limits={"memory_mb": 10 ** 6}))
        self.assertEqual(len(self.subvolumes()), before)

    def test_pid_bomb_at_the_maximum(self):
        s = self.api.create(template="busybox", limits={"pids": 4096})
        sid = s["id"]
        try:
            self.assertEqual(int(cgroup_value(sid, ["pids.max"])), 4096)
            self.bomb(sid)
            # Meanwhile the host forks and execs, again and again.
            self.host_forks(6)
            # The bomb did run into its cap.
            events = cgroup_value(sid, ["pids.events"]) or ""
            hits = int(events.split()[1]) if events.startswith("max") else 0
            self.assertGreater(hits, 0, events)
        finally:
            t0 = time.monotonic()
            self.api.delete(sid)
        self.assertLess(time.monotonic() - t0, 120)
        self.assertFalse([d for d in self.cgroups() if d.endswith("/" + sid)])
        self.assertFalse([l for l in self.subvolumes() if sid in l])

    def bomb(self, sid):
        ev = self.api.stream("POST", f"/v1/sandboxes/{sid}/exec",
                             {"cmd": ["sh", "-c", "f(){ f | f & }; f; sleep 1000"]})
        next(ev)
        ev.close()

    def host_forks(self, seconds, each=None):
        end, runs = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            r = subprocess.run(["true"], timeout=30)
            self.assertEqual(r.returncode, 0)
            runs += 1
            if each:
                each()
            time.sleep(0.02)
        self.assertGreater(runs, 20)

    def test_pid_bombs_in_two_sandboxes(self):
        # Each at the maximum per sandbox, together over the cap of all
        # sandboxes (the cgroup parent's pids.max): that cap holds.
        top = [d for d in cgroup_dirs(self.server.dir)
               if os.path.exists(os.path.join(d, "pids.max"))][0]
        with open(os.path.join(top, "pids.max")) as f:
            self.assertEqual(f.read().strip(), "5000")
        sids = [self.api.create(template="busybox", limits={"pids": 4096})["id"]
                for _ in range(2)]
        peak = [0]

        def sample():
            with open(os.path.join(top, "pids.current")) as f:
                peak[0] = max(peak[0], int(f.read()))

        try:
            for sid in sids:
                self.bomb(sid)
            self.host_forks(8, sample)
            # both bombs ran (more than one sandbox's cap), the sum held
            self.assertGreater(peak[0], 4096)
            self.assertLessEqual(peak[0], 5000)
        finally:
            for sid in sids:
                self.api.delete(sid)

    def test_tenant_quota_routes(self):
        t, tc = self.new_tenant("quota-routes")
        path = f"/v1/tenants/{t['id']}/quota"
        q = self.api.call("GET", path)
        self.assertEqual(q["tenant"], t["id"])
        self.assertIsNone(q["quota"]["sandboxes"])
        self.assertEqual(q["usage"]["sandboxes"], 0)
        # by name too; replace as a whole
        q = self.api.call("PUT", f"/v1/tenants/quota-routes/quota",
                          {"sandboxes": 2, "cpus": 1.5, "snapshot_mb": 10})
        self.assertEqual((q["quota"]["sandboxes"], q["quota"]["cpus"],
                          q["quota"]["snapshot_mb"], q["quota"]["memory_mb"]), (2, 1.5, 10, None))
        for bad in ({"sandboxes": -1}, {"sandboxes": "3"}, {"memory_mb": 1.5},
                    {"cpus": -1}, {"nope": 1}):
            status, data, _ = self.api.raw("PUT", path, bad)
            self.assertEqual(status, 400, (bad, data))
        self.assertEqual(tc.raw("GET", path)[0], 403)
        self.assertEqual(tc.raw("PUT", path, {"sandboxes": 100})[0], 403)
        self.assertEqual(self.api.raw("GET", "/v1/tenants/nobody/quota")[0], 404)
        self.assertEqual(self.api.raw("GET", f"/v1/tenants/{t['id']}/other")[0], 404)
        self.assertEqual(self.api.raw("DELETE", path)[0], 405)
        # the CLI changes the fields it is given and keeps the rest
        r = subprocess.run([CLI, "--config", os.path.join(self.server.dir, "cli.json"), "--json",
                            "tenant", "quota", "quota-routes", "--memory-mb", "512",
                            "--sandboxes", "0"], capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        q = json.loads(r.stdout)["quota"]
        self.assertEqual((q["sandboxes"], q["memory_mb"], q["cpus"]), (None, 512, 1.5))

    def test_tenant_sandbox_quota_concurrent(self):
        t, tc = self.new_tenant("quota-count")
        self.api.call("PUT", f"/v1/tenants/{t['id']}/quota", {"sandboxes": 3})
        results = [None] * 8

        def one(i):
            results[i] = tc.raw("POST", "/v1/sandboxes",
                                {"template": "busybox", "limits": {"memory_mb": 64}})

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        made = [json.loads(d)["id"] for st, d, _ in results if st == 201]
        refused = [json.loads(d)["error"] for st, d, _ in results if st == 422]
        try:
            self.assertEqual(len(made), 3, [(st, d[:200]) for st, d, _ in results])
            self.assertEqual(len(refused), 5)
            for e in refused:
                self.assertEqual(e["code"], "quota_exceeded")
                self.assertIn("`sandboxes`", e["message"])
            q = self.api.call("GET", f"/v1/tenants/{t['id']}/quota")
            self.assertEqual(q["usage"]["sandboxes"], 3)
            self.assertEqual(q["usage"]["memory_mb"], 3 * 64)
            # a fork child counts too
            self.expect_422(tc, "quota_exceeded", ["`sandboxes`"], "POST",
                            f"/v1/sandboxes/{made[0]}/fork", {"count": 1})
            self.assertEqual(len(tc.call("GET", "/v1/sandboxes")["sandboxes"]), 3)
            # a deleted sandbox frees its place
            tc.delete(made.pop())
            s = tc.create(template="busybox")
            made.append(s["id"])
            self.expect_422(tc, "quota_exceeded", ["`sandboxes`"], "POST", "/v1/sandboxes",
                            self.create_body())
        finally:
            for sid in made:
                tc.delete(sid)

    def test_tenant_resource_quotas(self):
        t, tc = self.new_tenant("quota-res")
        path = f"/v1/tenants/{t['id']}/quota"
        made = []
        try:
            self.api.call("PUT", path, {"memory_mb": 200, "cpus": 1.5, "disk_mb": 300,
                                        "snapshots": 2})
            s = tc.create(template="busybox",
                          limits={"memory_mb": 128, "cpus": 1, "disk_mb": 200})
            made.append(s["id"])
            for limits, word in (({"memory_mb": 128, "cpus": 0.1, "disk_mb": 50}, "`memory_mb`"),
                                 ({"memory_mb": 64, "cpus": 1, "disk_mb": 50}, "`cpus`"),
                                 ({"memory_mb": 64, "cpus": 0.5, "disk_mb": 101}, "`disk_mb`")):
                self.expect_422(tc, "quota_exceeded", [word, "in use"], "POST",
                                "/v1/sandboxes", self.create_body(limits=limits))
            s2 = tc.create(template="busybox",
                           limits={"memory_mb": 64, "cpus": 0.5, "disk_mb": 100})
            made.append(s2["id"])
            # snapshots: the tenant's 2, across its sandboxes
            tc.call("POST", f"/v1/sandboxes/{s['id']}/snapshots", {})
            tc.call("POST", f"/v1/sandboxes/{s2['id']}/snapshots", {})
            self.expect_422(tc, "quota_exceeded", ["`snapshots`"], "POST",
                            f"/v1/sandboxes/{s['id']}/snapshots", {})
        finally:
            for sid in made:
                tc.delete(sid)

    def test_suspended_bytes_count_toward_snapshot_mb(self):
        # A suspended sandbox's objects in the store are the tenant's state
        # like a snapshot's: over snapshot_mb, a suspend is refused 422
        # quota_exceeded before anything goes up (the sandbox keeps
        # running, no object of it in the store); within it, the suspended
        # bytes show in the usage and hold the quota for what comes next.
        node = self.api.call("GET", "/v1/node")
        if not any(b["caps"].get("suspend") for b in node["backends"]):
            self.skipTest("no backend here can suspend")
        t, tc = self.new_tenant("quota-susp")
        path = f"/v1/tenants/{t['id']}/quota"
        made = []
        objects = os.path.join(self.server.dir, "objects", "sandboxes")
        try:
            self.api.call("PUT", path, {"snapshot_mb": 2})
            s = tc.create(template="busybox")
            made.append(s["id"])
            code, out, _, _ = tc.exec(s["id"], ["sh", "-c", "dd if=/dev/urandom of=/work/x "
                                                "bs=1M count=4 2>/dev/null && sync && echo ok"])
            self.assertEqual((code, out), (0, b"ok\n"))
            self.expect_422(tc, "quota_exceeded", ["`snapshot_mb`"], "POST",
                            f"/v1/sandboxes/{s['id']}/suspend", {})
            self.assertEqual(tc.call("GET", f"/v1/sandboxes/{s['id']}")["state"], "running")
            self.assertFalse(os.listdir(os.path.join(objects, s["id"]))
                             if os.path.isdir(os.path.join(objects, s["id"])) else [])
            # room for it: suspended, and its bytes are the tenant's usage
            self.api.call("PUT", path, {"snapshot_mb": 7})
            sb = tc.call("POST", f"/v1/sandboxes/{s['id']}/suspend", {})
            self.assertEqual(sb["state"], "suspended")
            used = self.api.call("GET", path)["usage"]["snapshot_bytes"]
            self.assertGreaterEqual(used, 4 << 20)
            self.assertEqual(used, sb["suspended_bytes"])
            # a second sandbox's 4 MiB do not fit beside them
            s2 = tc.create(template="busybox")
            made.append(s2["id"])
            self.assertEqual(tc.exec(s2["id"], ["sh", "-c", "dd if=/dev/urandom of=/work/x "
                                                "bs=1M count=4 2>/dev/null && sync"])[0], 0)
            self.expect_422(tc, "quota_exceeded", ["`snapshot_mb`"], "POST",
                            f"/v1/sandboxes/{s2['id']}/suspend", {})
            self.assertEqual(tc.call("GET", f"/v1/sandboxes/{s2['id']}")["state"], "running")
        finally:
            for sid in made:
                tc.delete(sid)

    def test_max_snapshots(self):
        s = self.api.create(template="busybox")
        sid = s["id"]
        try:
            n = 0
            while True:
                self.assertLess(n, 10, "max_snapshots never stopped the loop")
                status, data, _ = self.api.raw("POST", f"/v1/sandboxes/{sid}/snapshots", {})
                if status != 201:
                    break
                n += 1
            self.assertEqual(n, 3)
            self.assertEqual(status, 422, data)
            err = json.loads(data)["error"]
            self.assertEqual(err["code"], "quota_exceeded")
            self.assertIn("max_snapshots", err["message"])
            snaps = self.api.call("GET", f"/v1/sandboxes/{sid}/snapshots")["snapshots"]
            self.assertEqual(len(snaps), 3)
            # nothing left behind by the refused one
            on_disk = os.listdir(os.path.join(self.server.dir, "pool", "snapshots", sid))
            self.assertEqual(sorted(on_disk), sorted(x["id"] for x in snaps))
            # one deleted: room for one more
            self.api.call("DELETE", f"/v1/sandboxes/{sid}/snapshots/{snaps[0]['id']}")
            self.api.call("POST", f"/v1/sandboxes/{sid}/snapshots", {})
        finally:
            self.api.delete(sid)


if __name__ == "__main__":
    main()
