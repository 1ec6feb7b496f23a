"""Limits from the create request reach the kernel (cgroup values, disk
quota), the daemons that face clients run unprivileged, and templates can be
built from a host directory and a tar file through the CLI."""
import glob
import os
import shutil
import subprocess
import tarfile
import tempfile
import time

from harness import AirlockTestCase, CLI, main


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


if __name__ == "__main__":
    main()
