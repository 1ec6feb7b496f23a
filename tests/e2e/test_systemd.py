#!/usr/bin/env python3
"""airlockd.service under a real systemd (issue 19, item 3).

This host has no systemd as PID 1, so the test boots one: a fresh mmdebstrap
root (systemd, dbus, busybox-static and the package's Depends) started with
`systemd-nspawn -b` (Debian's systemd-container). In it:

- `dpkg -i` of the package (`make deb`): its postinst enables and starts the
  unit; the unit is `activating` until airlockd says READY=1 (Type=notify),
  and when systemd runs the unit's ExecStartPost (after READY=1) the API
  already lists the busybox template as ready;
- `airlock health` answers and a busybox sandbox runs a command;
- `systemctl kill -s KILL airlockd`: Restart=on-failure brings it back
  (NRestarts 1, a new main pid) and it answers again;
- `systemctl stop`: inactive with Result=success, and nothing of it is left
  (mounts, loop devices, nftables table, cgroups);
- `apt-get remove` while it runs stops it (prerm) and removes its files,
  keeping the conffile; `apt-get purge` removes that too.

The container needs what airlockd needs on a host: all capabilities,
/dev/loop-control and /dev/btrfs-control bound in, loop device nodes
(/dev/loopN is not in the container's own /dev: made with mknod), a private
network namespace (its nftables table and veths stay out of the host's),
and the cgroup v1 hierarchies writable (nspawn mounts them read-only on
this hybrid host; they are remounted read-write inside). The unit gets a
drop-in with a data dir of its own and only the busybox template.

Exits 77 only when systemd-nspawn, mmdebstrap or cpack is missing, or when
nspawn cannot boot systemd here (the reason printed).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from debpkg import deb_depends, make_deb, run
from harness import cgroup_parent, main

DATA = "/var/lib/airlock-nspawn"
CLI_ENV = f"AIRLOCK_CONFIG={DATA}/cli.json"
DROPIN = f"""# the nspawn test: its own data dir, busybox only (no mmdebstrap inside)
[Service]
ExecStart=
ExecStart=/usr/bin/airlockd up --data-dir {DATA} --templates busybox --pool-size-mb 2048
# runs once systemd has READY=1 (Type=notify), before it logs "Started":
# what the API lists then is what a unit ordered After= it would find
ExecStartPost=-/bin/sh -c '/usr/bin/airlock --config {DATA}/cli.json template ls > /run/airlock-at-start 2>&1'
"""
PREP = """set -e
mount -o remount,rw /sys/fs/cgroup
for c in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$c"; done
for i in $(seq 0 127); do [ -e /dev/loop$i ] || mknod -m 660 /dev/loop$i b 7 $i; done
"""


class SystemdUnit(unittest.TestCase):
    def setUp(self):
        for tool in ("systemd-nspawn", "mmdebstrap", "cpack", "nsenter"):
            if not shutil.which(tool):
                self.skipTest(f"needs {tool} (systemd-container: scripts/setup-deps.sh)")
        self.tmp = tempfile.mkdtemp(prefix="airlock-systemd-")
        os.chmod(self.tmp, 0o755)
        self.root = os.path.join(self.tmp, "root")
        self.nspawn = None
        self.leader = None
        self.machine = "airlock-t%d" % os.getpid()
        self.had_run_nspawn = os.path.exists("/run/systemd/nspawn")

    def tearDown(self):
        if self.nspawn and self.nspawn.poll() is None:
            self.nspawn.terminate()   # nspawn halts the container on SIGTERM
            try:
                self.nspawn.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.nspawn.kill()
                self.nspawn.wait()
        if self.nspawn:
            self.nspawn_log.close()
        # the container's pool: its loop device and any mount left behind
        for line in run("losetup", "-a", check=False).stdout.splitlines():
            if self.root in line:
                run("losetup", "-d", line.split(":")[0], check=False)
        with open("/proc/self/mountinfo") as f:
            mps = [l.split()[4] for l in f if l.split()[4].startswith(self.root + "/")]
        for mp in reversed(sorted(mps)):
            run("umount", "-l", mp, check=False)
        name = cgroup_parent(DATA)
        for ctrl in ("freezer", "memory", "cpu", "pids", "cpuacct", "unified"):
            d = f"/sys/fs/cgroup/{ctrl}/{name}"
            if os.path.isdir(d):
                for sub in os.listdir(d):
                    if os.path.isdir(os.path.join(d, sub)):
                        try:
                            os.rmdir(os.path.join(d, sub))
                        except OSError:
                            pass
                try:
                    os.rmdir(d)
                except OSError:
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)
        # nspawn, without a systemd PID 1 here, leaves its (empty) run dirs
        if not self.had_run_nspawn:
            for d in ("/run/systemd/nspawn/propagate", "/run/systemd/nspawn/unix-export",
                      "/run/systemd/nspawn/incoming", "/run/systemd/nspawn/locks",
                      "/run/systemd/nspawn"):
                try:
                    os.rmdir(d)
                except OSError:
                    pass

    # ---- in the container ---------------------------------------------------

    def sh(self, script, check=True, timeout=300):
        return run("nsenter", "-t", str(self.leader), "-a", "env", CLI_ENV, "sh", "-c", script,
                   check=check, timeout=timeout)

    def prop(self, name):
        return self.sh(f"systemctl show airlockd -p {name} --value").stdout.strip()

    def state(self):
        return f"{self.prop('ActiveState')}/{self.prop('SubState')}"

    def wait_state(self, want, timeout=300, also=lambda: True):
        seen = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.state()
            if not seen or seen[-1] != s:
                seen.append(s)
            if s == want and also():
                return seen
            time.sleep(0.2)
        self.fail(f"airlockd never reached {want}: {seen}\n{self.journal()}")

    def journal(self):
        return self.sh("journalctl -u airlockd --no-pager -o short-unix", check=False).stdout

    def nothing_left(self, what):
        mounts = self.sh("cat /proc/self/mountinfo").stdout
        self.assertNotIn(DATA, mounts, f"{what}: a mount of the data dir is left")
        self.assertNotRegex(self.sh("nft list tables", check=False).stdout, r"airlock",
                            f"{what}: an nftables table is left")
        name = cgroup_parent(DATA)
        for ctrl in ("freezer", "memory", "cpu", "pids"):
            self.assertFalse(os.path.exists(f"/sys/fs/cgroup/{ctrl}/{name}"),
                             f"{what}: cgroup {ctrl}/{name} is left")
        self.assertNotIn(self.root, run("losetup", "-a").stdout, f"{what}: a loop device is left")
        procs = self.sh("for p in /proc/[0-9]*; do cat $p/comm 2>/dev/null; done").stdout.split()
        self.assertNotIn("airlockd", procs, f"{what}: an airlockd process is left")

    # ---- the test -----------------------------------------------------------

    def boot(self):
        """Boot the root; the leader's pid once systemd says running. None
        (and the reason) when it does not boot here."""
        self.nspawn_log = open(os.path.join(self.tmp, "nspawn.log"), "w+")
        self.nspawn = subprocess.Popen(
            ["systemd-nspawn", "-b", "-D", self.root, "-M", self.machine,
             # no systemd PID 1 here: no machined to register with, no scope
             "--register=no", "--keep-unit", "--console=pipe", "--private-network",
             "--capability=all", "--bind=/dev/loop-control", "--bind=/dev/btrfs-control"],
            stdin=subprocess.DEVNULL, stdout=self.nspawn_log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        state = ""
        while time.time() < deadline and self.nspawn.poll() is None:
            if not self.leader:
                try:
                    with open(f"/proc/{self.nspawn.pid}/task/{self.nspawn.pid}/children") as f:
                        kids = f.read().split()
                    self.leader = int(kids[0]) if kids else None
                except OSError:
                    pass
            if self.leader:
                state = run("nsenter", "-t", str(self.leader), "-a", "systemctl",
                            "is-system-running", check=False).stdout.strip()
                if state in ("running", "degraded"):
                    return None
            time.sleep(0.5)
        self.nspawn_log.seek(0)
        return (f"systemd-nspawn -b did not boot systemd here within 120 s (state `{state}`,"
                f" nspawn rc {self.nspawn.poll()}): {self.nspawn_log.read()[-2000:]}")

    def test_unit_under_systemd(self):
        deb = make_deb(os.path.join(self.tmp, "deb"))
        names = deb_depends(deb)
        t0 = time.time()
        run("mmdebstrap", "--quiet", "--variant=minbase",
            "--include=" + ",".join(["systemd", "systemd-sysv", "dbus", "busybox-static"] + names),
            "bookworm", self.root, timeout=700)   # within ctest's 1200 s, so tearDown runs
        print(f"mmdebstrap root with systemd: {time.time() - t0:.0f} s")
        with open(os.path.join(self.root, "etc/hostname"), "w") as f:
            f.write("airlock-systemd-test\n")
        dropin = os.path.join(self.root, "etc/systemd/system/airlockd.service.d")
        os.makedirs(dropin)
        with open(os.path.join(dropin, "test.conf"), "w") as f:
            f.write(DROPIN)
        shutil.copy(deb, os.path.join(self.root, "root/airlock.deb"))   # /tmp is a tmpfs there

        t0 = time.time()
        why = self.boot()
        if why:
            print(why, file=sys.stderr)
            self.skipTest(why)
        print(f"systemd booted in the container in {time.time() - t0:.1f} s")
        self.sh(PREP)

        # install: the postinst enables and starts it (--no-block)
        self.sh("DEBIAN_FRONTEND=noninteractive dpkg -i /root/airlock.deb")
        self.assertEqual(self.sh("systemctl is-enabled airlockd").stdout.strip(), "enabled")
        self.assertEqual(self.prop("Type"), "notify")
        seen = self.wait_state("active/running")
        print(f"states after dpkg -i: {seen}")
        self.assertIn("activating/start", seen, "never seen waiting for READY")
        journal = self.journal()
        up = re.search(r"^(\d+\.\d+) .*airlock is up", journal, re.M)
        started = re.search(r"^(\d+\.\d+) .*Started airlockd\.service", journal, re.M)
        self.assertTrue(up and started, journal)
        # Not compared by the journal's times: journald stamps a stdout line
        # when it reads the stream, which can be after PID 1's "Started"
        # (seen: 136 us later) though airlockd wrote it before READY=1.
        at_start = self.sh("cat /run/airlock-at-start").stdout
        self.assertRegex(at_start, r"(?m)^busybox\s+\S+\s+ready\b",
                         "systemd ran ExecStartPost (after READY=1) before the template was ready")
        self.assertEqual(self.sh("airlock health").stdout.strip(), "ok")
        sid = self.sh("airlock create --template busybox --disk 256").stdout.strip()
        self.assertEqual(self.sh(f"airlock exec {sid} -- echo from-systemd").stdout,
                         "from-systemd\n")
        self.sh(f"airlock rm {sid}")

        # killed: Restart=on-failure
        pid = self.prop("MainPID")
        self.sh("systemctl kill -s KILL airlockd")
        seen = self.wait_state("active/running", also=lambda: self.prop("NRestarts") == "1")
        print(f"states after systemctl kill -s KILL: {seen}")
        self.assertNotEqual(self.prop("MainPID"), pid)
        self.assertEqual(self.sh("airlock health").stdout.strip(), "ok")

        # stopped: cleanly, and nothing left
        t0 = time.time()
        self.sh("systemctl stop airlockd")
        print(f"systemctl stop: {time.time() - t0:.2f} s")
        self.assertEqual(self.state(), "inactive/dead")
        self.assertEqual(self.prop("Result"), "success")
        self.nothing_left("after systemctl stop")

        # removed while running: prerm stops it; purge takes the conffile
        self.sh("systemctl start airlockd")   # Type=notify: returns once READY
        self.assertEqual(self.state(), "active/running")
        self.sh("DEBIAN_FRONTEND=noninteractive apt-get remove -y airlock")
        self.assertEqual(self.prop("LoadState"), "not-found")
        for f in ("usr/bin/airlockd", "usr/bin/airlock", "usr/lib/airlock",
                  "usr/lib/systemd/system/airlockd.service",
                  "etc/systemd/system/multi-user.target.wants/airlockd.service"):
            self.assertFalse(os.path.lexists(os.path.join(self.root, f)), f"{f} left after remove")
        self.assertTrue(os.path.exists(os.path.join(self.root, "etc/airlock/airlockd.conf")))
        self.nothing_left("after apt-get remove")
        self.sh("DEBIAN_FRONTEND=noninteractive apt-get purge -y airlock")
        self.assertFalse(os.path.exists(os.path.join(self.root, "etc/airlock")))


if __name__ == "__main__":
    main()
