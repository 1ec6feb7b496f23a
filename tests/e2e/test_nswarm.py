"""The ns warm pool (ns_warm_pool): a create is served by a jail nodemgr
spawned and warmed before the request, with the request's limits, its own
hostname and network address, and a pool of 0 keeps the cold path.

Evidence that a sandbox came from the pool, without timing: the jail's init
(GET -> the nodemgr state file's pid) started before the create request was
sent (its start time in /proc is earlier than a process the test starts right
before the request), and the guest's first exec is not pid 2 (a warm guest
ran one exec already; a cold guest's first exec is pid 2)."""
import glob
import os
import re
import subprocess
import time

from harness import AirlockTestCase, main


def cgroup_value(sid, names):
    for n in names:
        for p in glob.glob(f"/sys/fs/cgroup/*/airlock*/{sid}/{n}") + \
                glob.glob(f"/sys/fs/cgroup/airlock*/{sid}/{n}"):
            with open(p) as f:
                return f.read().strip()
    return None


def pool_creates(api):
    """airlock_warm_pool_creates_total{backend="ns",result=...} from GET /metrics:
    {"hit": warm takes, "miss": cold creates}."""
    status, body, _ = api.raw("GET", "/metrics")
    assert status == 200, body
    got = {}
    for line in body.decode().splitlines():
        m = re.fullmatch(r'airlock_warm_pool_creates_total\{backend="ns",result="(hit|miss)"\} (\d+)',
                         line)
        if m:
            got[m.group(1)] = int(m.group(2))
    assert set(got) == {"hit", "miss"}, body
    return got


def in_cgroup(pid, sid):
    """Do the v1 freezer, memory and pids lines of /proc/pid/cgroup (or on
    v2 its 0:: line) all end in /<sid>?"""
    with open(f"/proc/{pid}/cgroup") as f:
        lines = [l.rstrip("\n").split(":", 2) for l in f if l.strip()]
    paths = [l[2] for l in lines
             if l[0] != "0" and set(l[1].split(",")) & {"freezer", "memory", "pids"}]
    paths = paths or [l[2] for l in lines if l[0] == "0"]
    return bool(paths) and all(p.endswith(f"/{sid}") for p in paths)


def start_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


class WarmPoolTest(AirlockTestCase):
    def state_pid(self, sid):
        with open(os.path.join(self.server.dir, "run", "nodemgr", f"{sid}.state")) as f:
            kv = dict(l.split("=", 1) for l in f.read().split())
        return int(kv["pid"])

    def warm_ready(self):
        d = os.path.join(self.server.dir, "run", "nodemgr")
        return len(glob.glob(os.path.join(d, "warm-*.state")))

    def wait_pool(self, n):
        # A state file is written when a warm jail is published (takeable).
        for _ in range(600):
            if self.warm_ready() >= n:
                return
            time.sleep(0.1)
        self.fail(f"warm pool did not reach {n}: {self.warm_ready()}\n{self.server.log()}")

    def sh(self, sid, cmd):
        code, out, err, _ = self.api.exec(sid, ["sh", "-c", cmd])
        self.assertEqual(code, 0, err)
        return out.decode().strip()

    def test_create_from_pool_with_limits_and_network(self):
        # The first create of the template is cold and fills the pool.
        m0 = pool_creates(self.api)
        first = self.api.create(template="busybox")
        try:
            self.assertEqual(self.sh(first["id"], "echo $$"), "2")
            self.wait_pool(2)
            # A process started before the requests: both jails are older.
            marker = subprocess.Popen(["sleep", "60"])
            try:
                before = start_ticks(marker.pid)
                a = self.api.create(template="busybox",
                                    limits={"memory_mb": 96, "cpus": 0.5, "pids": 40,
                                            "disk_mb": 20})
                b = self.api.create(template="busybox",
                                    limits={"memory_mb": 2048, "cpus": 1.5, "pids": 300})
            finally:
                marker.kill()
                marker.wait()
            try:
                self.assertNotEqual(a["id"], b["id"])
                for s in (a, b):
                    self.assertLessEqual(start_ticks(self.state_pid(s["id"])), before)
                    # the warm-up exec ran before; this is the second one
                    self.assertNotEqual(self.sh(s["id"], "echo $$"), "2")
                    self.assertEqual(self.sh(s["id"], "hostname"), s["id"])
                with open(self.server.log_path, errors="replace") as f:
                    log = f.read()  # every daemon's log (up.log), whole
                for s in (a, b):
                    self.assertRegex(log, f"sandbox {s['id']}: warm: jail pid \\d+ from the warm pool")
                    # its processes moved into the sandbox's cgroup (cgroup
                    # v2 cannot rename the warm one): none left behind
                    self.assertTrue(in_cgroup(self.state_pid(s["id"]), s["id"]))
                self.assertRegex(log, f"sandbox {first['id']}: cold: jail pid")
                # GET /metrics counts the two takes warm, the first create cold
                m1 = pool_creates(self.api)
                self.assertEqual((m1["hit"] - m0["hit"], m1["miss"] - m0["miss"]), (2, 1), m1)

                # the request's limits, raised and lowered from the pool's defaults
                self.assertEqual(int(cgroup_value(a["id"], ["memory.limit_in_bytes", "memory.max"])),
                                 96 << 20)
                self.assertEqual(int(cgroup_value(b["id"], ["memory.limit_in_bytes", "memory.max"])),
                                 2048 << 20)
                sw = cgroup_value(b["id"], ["memory.memsw.limit_in_bytes"])
                if sw is not None:
                    self.assertEqual(int(sw), 2048 << 20)
                self.assertEqual(int(cgroup_value(a["id"], ["pids.max"])), 40)
                self.assertEqual(int(cgroup_value(b["id"], ["pids.max"])), 300)
                for s, frac in ((a, 0.5), (b, 1.5)):
                    quota = cgroup_value(s["id"], ["cpu.cfs_quota_us"])
                    if quota is not None:
                        period = int(cgroup_value(s["id"], ["cpu.cfs_period_us"]))
                    else:
                        quota, period = cgroup_value(s["id"], ["cpu.max"]).split()
                    self.assertEqual(int(quota), int(int(period) * frac))
                # the disk quota of the request holds
                out = self.sh(a["id"], "dd if=/dev/zero of=/work/big bs=1M count=64 2>&1; "
                                       "sync; rm -f /work/big; echo done")
                self.assertRegex(out, r"(?i)quota|no space")

                # each its own network address on eth0, as a cold one has
                addrs = []
                for s in (first, a, b):
                    out = self.sh(s["id"], "ip -4 -o addr show dev eth0")
                    self.assertIn("inet ", out)
                    addrs.append(out.split("inet ", 1)[1].split("/")[0])
                self.assertEqual(len(set(addrs)), 3, addrs)
                # files written in one are not in the other (own subvolumes)
                self.sh(a["id"], "echo a > /work/only-a")
                self.assertEqual(self.sh(b["id"], "test -e /work/only-a || echo absent"),
                                 "absent")
            finally:
                self.api.delete(a["id"])
                self.api.delete(b["id"])
        finally:
            self.api.delete(first["id"])
        # no warm subvolume or jail is listed as a sandbox
        listed = [s["id"] for s in self.api.call("GET", "/v1/sandboxes")["sandboxes"]]
        self.assertFalse([i for i in listed if i.startswith("warm-")], listed)
        self.assertEqual(self.subvolumes(), [])


class NoWarmPoolTest(AirlockTestCase):
    extra_args = ("--set", "ns_warm_pool=0")

    def test_pool_off_creates_cold(self):
        m0 = pool_creates(self.api)
        for _ in range(3):
            s = self.api.create(template="busybox")
            try:
                code, out, err, _ = self.api.exec(s["id"], ["sh", "-c", "echo $$"])
                self.assertEqual((code, out), (0, b"2\n"), err)
            finally:
                self.api.delete(s["id"])
        self.assertEqual(glob.glob(os.path.join(self.server.dir, "run", "nodemgr", "warm-*")), [])
        self.assertEqual(glob.glob(os.path.join(self.server.dir, "pool", "warm", "warm-*")), [])
        m1 = pool_creates(self.api)
        self.assertEqual((m1["hit"] - m0["hit"], m1["miss"] - m0["miss"]), (0, 3), m1)


if __name__ == "__main__":
    main()
