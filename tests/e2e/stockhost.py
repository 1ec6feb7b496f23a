"""The stock-host bed: a Debian 12 VM as users' hosts boot (systemd as PID 1,
the unified cgroup v2 hierarchy, Debian's standard kernel), driven from here.

- image(): an mmdebstrap root of bookworm (this machine's apt sources) with
  linux-image-amd64, systemd-sysv, udev, the package's Depends and what the
  bed needs, as an ext4 image plus the image's own vmlinuz and initrd. Cached
  under a directory named by a hash of everything that goes into it; a run
  never writes to it (QEMU's snapshot=on keeps the run's writes in a
  temporary overlay in the run's own directory).
- StockVM: QEMU with no network device at all, the image's kernel booted
  directly, the serial console to a file, and a virtio-9p share for driving.

Why 9p and not the serial console: the share carries the .deb and the
command channel both, files are binary-safe and need no framing, a command's
stdout, stderr and exit code come back as separate files, and nothing is
lost when the host is not listening (the virtio-serial and console pitfalls
of a byte stream). The channel: the host drops N.timeout then N.sh (renamed
into place, so the guest never sees half a script); bed-runner.service in
the image runs it under `timeout` and writes N.out, N.err and, last, N.rc.
"""
import contextlib
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from debpkg import BUILD, run

# What the image holds beyond the package's Depends: the stock boot (kernel,
# systemd as PID 1, udev, dbus), busybox-static for the busybox template
# (as on a host that builds it), and curl to read the node's /metrics.
PACKAGES = ["linux-image-amd64", "systemd-sysv", "udev", "dbus", "kmod",
            "busybox-static", "curl", "procps"]
IMAGE_MB = 6144   # sparse: the root, the package and airlockd's pool file
SHARE_TAG = "bed"
# A sandbox's defaults ask for more disk than the test's pool holds.
CREATE = "create --template busybox --disk 256"

RUNNER = r"""#!/bin/sh
# The stock-host bed's command runner: runs each N.sh the host drops on the
# 9p share, one at a time, under timeout; N.rc is written last.
set -u
D=/run/bed
mkdir -p $D
modprobe 9pnet_virtio 2>/dev/null
mountpoint -q $D || mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 bed $D || exit 1
mkdir -p $D/cmd
cd $D/cmd || exit 1
echo up > ../ready.tmp && mv ../ready.tmp ../ready
while :; do
	for f in *.sh; do
		[ -e "$f" ] || continue
		n=${f%.sh}
		mv "$f" "$n.run"
		t=$(cat "$n.timeout" 2>/dev/null || echo 300)
		timeout -k 5 "$t" sh "$n.run" </dev/null >"$n.out" 2>"$n.err"
		echo $? > "$n.rc.tmp" && mv "$n.rc.tmp" "$n.rc"
	done
	sleep 0.2
done
"""
RUNNER_UNIT = """[Unit]
Description=stock-host bed command runner (9p share)
After=local-fs.target systemd-udevd.service

[Service]
ExecStart=/usr/local/sbin/bed-runner
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
"""


def cache_root():
    return os.environ.get("AIRLOCK_STOCKHOST_CACHE", os.path.join(BUILD, "stockhost"))


def image(depends, log=print):
    """The cached image's directory (root.img, vmlinuz, initrd.img), built
    first if no image of this recipe is there. depends: the package's."""
    pkgs = sorted(set(PACKAGES) | set(depends))
    recipe = json.dumps([pkgs, IMAGE_MB, RUNNER, RUNNER_UNIT, "bookworm", 1])
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    out = os.path.join(cache_root(), key)
    if os.path.exists(os.path.join(out, "ok")):
        return out
    os.makedirs(cache_root(), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f"{key}.tmp-", dir=cache_root())
    try:
        root = os.path.join(tmp, "root")
        t0 = time.time()
        run("mmdebstrap", "--quiet", "--variant=minbase", "--include=" + ",".join(pkgs),
            "bookworm", root, timeout=1500)
        log(f"stockhost image: mmdebstrap {time.time() - t0:.0f} s")
        for path, text, mode in (("usr/local/sbin/bed-runner", RUNNER, 0o755),
                                 ("etc/systemd/system/bed-runner.service", RUNNER_UNIT, 0o644),
                                 ("etc/fstab", "/dev/vda / ext4 defaults 0 1\n", 0o644),
                                 ("etc/hostname", "stockhost\n", 0o644),
                                 ("etc/hosts", "127.0.0.1 localhost\n127.0.1.1 stockhost\n", 0o644)):
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
            os.chmod(os.path.join(root, path), mode)
        os.symlink("/etc/systemd/system/bed-runner.service",
                   os.path.join(root, "etc/systemd/system/multi-user.target.wants/bed-runner.service"))
        for k in ("vmlinuz", "initrd.img"):
            src = sorted(glob.glob(os.path.join(root, f"boot/{k}-*")))
            if not src:
                raise AssertionError(f"the image has no /boot/{k}-*")
            shutil.copy(src[-1], os.path.join(tmp, k))
        img = os.path.join(tmp, "root.img")
        run("mkfs.ext4", "-q", "-F", "-L", "stockhost", "-d", root, img, f"{IMAGE_MB}M")
        shutil.rmtree(root)
        with open(os.path.join(tmp, "ok"), "w") as f:
            f.write(recipe + "\n")
        try:
            os.rename(tmp, out)
        except OSError:
            if not os.path.exists(os.path.join(out, "ok")):   # else another run made it
                raise
        log(f"stockhost image: built in {time.time() - t0:.0f} s ({out})")
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def host_accel():
    """kvm or tcg, as airlockd's vm backend would choose here (`airlock
    doctor`: KVM only where a stock guest kernel runs on it, not PVM-only)."""
    r = run(os.path.join(BUILD, "bin", "airlock"), "--json", "doctor", check=False)
    try:
        return json.loads(r.stdout)["backends"]["vm"]["accel"]
    except (ValueError, KeyError):
        return "tcg"


class CmdResult:
    def __init__(self, rc, out, err):
        self.returncode, self.stdout, self.stderr = rc, out, err


class StockVM:
    """One boot of the image. Everything it makes lives in self.dir; close()
    stops QEMU (by pid) and removes it, on every path."""

    def __init__(self, img_dir, mem_mb=2048, cpus=2, boot_timeout=420):
        self.img_dir, self.mem_mb, self.cpus, self.boot_timeout = img_dir, mem_mb, cpus, boot_timeout
        self.dir = tempfile.mkdtemp(prefix="airlock-stockhost-")
        self.share = os.path.join(self.dir, "share")
        os.makedirs(os.path.join(self.share, "cmd"))
        self.console = os.path.join(self.dir, "console.log")
        self.qemu = None
        self.n = 0
        self.accel = host_accel()

    def start(self):
        """Boot; returns the seconds until the runner answered. On a boot
        that does not come up in time: AssertionError with the console."""
        accel = ["-accel", "kvm", "-cpu", "host"] if self.accel == "kvm" else \
            ["-accel", "tcg,thread=multi", "-cpu", "max"]
        cmd = ["qemu-system-x86_64", "-name", "airlock-stockhost", "-nodefaults", "-no-user-config",
               "-M", "pc", *accel, "-smp", str(self.cpus), "-m", str(self.mem_mb),
               "-nic", "none", "-display", "none", "-vga", "none", "-no-reboot",
               "-serial", f"file:{self.console}", "-monitor", "none",
               "-kernel", os.path.join(self.img_dir, "vmlinuz"),
               "-initrd", os.path.join(self.img_dir, "initrd.img"),
               "-append", "console=ttyS0 root=/dev/vda rw panic=-1",
               "-drive", f"file={os.path.join(self.img_dir, 'root.img')},format=raw,if=virtio,snapshot=on",
               "-virtfs", f"local,path={self.share},mount_tag={SHARE_TAG},security_model=none,id=bed"]
        t0 = time.time()
        # snapshot=on's overlay goes to $TMPDIR: our directory, removed by close()
        self.qemu = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=dict(os.environ, TMPDIR=self.dir))
        ready = os.path.join(self.share, "ready")
        while time.time() - t0 < self.boot_timeout:
            if os.path.exists(ready):
                return time.time() - t0
            if self.qemu.poll() is not None:
                raise AssertionError(f"QEMU exited {self.qemu.returncode} during boot: "
                                     f"{self.qemu.stdout.read().decode(errors='replace')}\n"
                                     f"{self.console_tail()}")
            time.sleep(0.5)
        raise AssertionError(f"the VM did not come up within {self.boot_timeout} s\n{self.console_tail()}")

    def console_tail(self, n=6000):
        try:
            with open(self.console, errors="replace") as f:
                return "---- console (tail) ----\n" + f.read()[-n:]
        except OSError:
            return "(no console log)"

    def sh(self, script, timeout=300, check=True):
        """Run script with /bin/sh in the guest (as root, in bed-runner's
        unit); CmdResult. check: AssertionError unless it exits 0."""
        self.n += 1
        base = os.path.join(self.share, "cmd", str(self.n))
        with open(base + ".timeout", "w") as f:
            f.write(f"{int(timeout)}\n")
        with open(base + ".tmp", "w") as f:
            f.write(script)
        os.rename(base + ".tmp", base + ".sh")
        deadline = time.time() + timeout + 60
        while not os.path.exists(base + ".rc"):
            if self.qemu.poll() is not None:
                raise AssertionError(f"QEMU exited {self.qemu.returncode} running {script!r}\n"
                                     f"{self.console_tail()}")
            if time.time() > deadline:
                raise AssertionError(f"no answer from the guest to {script!r}\n{self.console_tail()}")
            time.sleep(0.05)
        res = []
        for ext in (".rc", ".out", ".err"):
            with open(base + ext, errors="replace") as f:
                res.append(f.read())
        for p in glob.glob(base + ".*"):
            os.unlink(p)
        r = CmdResult(int(res[0]), res[1], res[2])
        if check and r.returncode != 0:
            raise AssertionError(f"guest: {script!r} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def put(self, path, name):
        """Copy host file path onto the share; its path in the guest."""
        shutil.copy(path, os.path.join(self.share, name))
        return f"/run/bed/{name}"

    def close(self):
        if self.qemu and self.qemu.poll() is None:
            try:   # a clean poweroff first: quicker to reap than to time out
                self.qemu.send_signal(signal.SIGTERM)
                self.qemu.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.qemu.kill()
                self.qemu.wait()
        if self.qemu:
            self.qemu.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---- airlock in the guest ----------------------------------------------------

def dropin(warm_pool=1):
    """The test's drop-in: busybox only, a small pool, warm_pool jails
    (0: none at all, the pool's adaptive target held at 0 too)."""
    cold = " --set ns_warm_pool_max=0" if warm_pool == 0 else ""
    return ("[Service]\nExecStart=\n"
            "ExecStart=/usr/bin/airlockd up --templates busybox "
            f"--set pool_size_mb=2048 --set ns_warm_pool={warm_pool}{cold}\n")


def write_dropin(vm, warm_pool=1):
    vm.sh("mkdir -p /etc/systemd/system/airlockd.service.d && cat > "
          "/etc/systemd/system/airlockd.service.d/bed.conf <<'EOF'\n"
          f"{dropin(warm_pool)}EOF\nsystemctl daemon-reload")


def cgroup2_opts(vm):
    """The options of the cgroup2 mount at /sys/fs/cgroup."""
    for line in vm.sh("cat /proc/self/mountinfo").stdout.splitlines():
        f = line.split()
        if f[4] == "/sys/fs/cgroup":
            return f[5] + " " + line.split(" - ", 1)[1].split()[-1]
    raise AssertionError("no /sys/fs/cgroup mount")


def metrics(vm):
    """The node's /metrics, {'name{labels}': value}."""
    cli = json.loads(vm.sh("cat /var/lib/airlock/cli.json").stdout)
    url, key = cli.get("url") or cli.get("api_url"), cli.get("key") or cli.get("api_key")
    text = vm.sh(f"curl -fsS -H 'Authorization: Bearer {key}' {url.rstrip('/')}/metrics").stdout
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


def prime(vm):
    """A template's first create is cold and starts its warm pool: one,
    removed at once."""
    vm.sh(f"airlock rm $(airlock {CREATE})", timeout=300)


def wait_warm(vm, timeout=180):
    """Until the busybox warm pool holds a jail (prime() first)."""
    key = 'airlock_warm_pool_ready{kind="ns",template="busybox'   # then /<version>
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(v >= 1 for k, v in metrics(vm).items() if k.startswith(key)):
            return
        time.sleep(1)
    raise AssertionError(f"the ns warm pool never held a jail: {metrics(vm)}")


def journal(vm, since=None):
    s = f" --since=@{since}" if since else ""
    return vm.sh(f"journalctl -u airlockd --no-pager -o short-unix{s}", check=False).stdout


def leftovers(vm):
    """What of airlockd is left in the guest, a list of sentences (empty:
    nothing): mounts of its data dir, loop devices, its nftables table,
    cgroups under its unit and /sys/fs/cgroup/airlock*, processes."""
    left = []
    mounts = vm.sh("cat /proc/self/mountinfo").stdout
    left += [f"mount {l.split()[4]}" for l in mounts.splitlines() if "/var/lib/airlock" in l.split()[4]]
    loops = vm.sh("losetup -a", check=False).stdout.strip()
    if loops:
        left.append(f"loop devices: {loops}")
    tables = vm.sh("nft list tables", check=False).stdout
    left += [f"nft {t}" for t in tables.splitlines() if "airlock" in t]
    cg = vm.sh("find /sys/fs/cgroup/system.slice/airlockd.service /sys/fs/cgroup/airlock* "
               "-mindepth 0 -type d 2>/dev/null", check=False).stdout.split()
    left += [f"cgroup {d}" for d in cg]
    procs = vm.sh("for p in /proc/[0-9]*; do c=$(cat $p/comm 2>/dev/null) && "
                  "echo \"${p#/proc/} $c\"; done").stdout.splitlines()
    left += [f"process {p}" for p in procs if p.split()[-1] in ("airlockd", "airlock-guest")]
    return left


# ---- the scenario, shared by tests/e2e/test_stockhost.py and bench/stockhost --

WARM_HIT = 'airlock_warm_pool_creates_total{backend="ns",result="hit"}'
OOM_HITS = 'airlock_sandbox_limit_hits_total{kind="oom_kill"}'
PIDS_HITS = 'airlock_sandbox_limit_hits_total{kind="pids_limit"}'


class Bed:
    """Steps on a booted StockVM, asserting with tc (a unittest.TestCase).
    Checks of what is known broken today are soft(), so one failing does
    not hide the rest."""

    def __init__(self, vm, tc, log=print):
        self.vm, self.tc, self.log = vm, tc, log
        self.failures = []   # the names of failed soft() checks, outside a test run

    @contextlib.contextmanager
    def soft(self, name):
        """A check that may fail without stopping the steps after it: a
        subTest in a test run; elsewhere (the bench) logged and counted."""
        if getattr(self.tc, "_outcome", None) is not None:
            with self.tc.subTest(name):
                yield
            return
        try:
            yield
        except AssertionError as e:
            self.failures.append(name)
            self.log(f"FAIL {name}: {e}")

    def cli(self, args, **kw):
        return self.vm.sh(f"airlock {args}", **kw).stdout.strip()

    def get(self, sid):
        return json.loads(self.cli(f"--json get {sid}"))

    def cgroup(self, sid):
        d = self.vm.sh(f"find /sys/fs/cgroup -maxdepth 4 -type d -name '{sid}*' | head -n1").stdout.strip()
        self.tc.assertTrue(d, f"no cgroup of {sid}")
        return d

    def wait_active(self, timeout=900):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = self.vm.sh("systemctl is-active airlockd", check=False).stdout.strip()
            if st == "active":
                return
            if st == "failed":
                break
            time.sleep(1)
        self.tc.fail(f"airlockd not active ({st})\n{journal(self.vm)[-4000:]}")

    def booted_stock(self):
        """The guest is a stock host: systemd PID 1, cgroup2 only. The
        cgroup2 mount options as they are before airlockd first starts."""
        tc, vm = self.tc, self.vm
        tc.assertEqual(vm.sh("cat /proc/1/comm").stdout.strip(), "systemd")
        tc.assertIn("systemd", vm.sh("readlink /proc/1/exe").stdout)
        tc.assertEqual(vm.sh("stat -fc %T /sys/fs/cgroup").stdout.strip(), "cgroup2fs")
        st = vm.sh("systemctl is-system-running --wait", check=False, timeout=300).stdout.strip()
        tc.assertIn(st, ("running", "degraded"),
                    vm.sh("systemctl --failed --no-pager", check=False).stdout)
        if st == "degraded":
            self.log("guest degraded: " + vm.sh("systemctl --failed --no-legend --no-pager",
                                                check=False).stdout.strip())
        self.log("guest: " + vm.sh("uname -r; nproc; free -m | sed -n 2p").stdout.replace("\n", "; "))
        return cgroup2_opts(vm)

    def install(self, deb, warm_pool=1):
        write_dropin(self.vm, warm_pool)
        path = self.vm.put(deb, "airlock.deb")
        t0 = time.time()
        self.vm.sh(f"DEBIAN_FRONTEND=noninteractive dpkg -i {path}", timeout=600)
        self.tc.assertEqual(self.vm.sh("systemctl is-enabled airlockd").stdout.strip(), "enabled")
        self.wait_active()
        self.log(f"dpkg -i to airlockd active: {time.time() - t0:.1f} s")
        self.tc.assertEqual(self.cli("health"), "ok")

    def warm_create(self, **limits):
        """A busybox create served from the warm pool, asserted as a warm
        take: the node's hit counter and nodemgr's log for that create, and
        its cgroup inside the unit's delegated subtree. The sandbox's id."""
        prime(self.vm)
        wait_warm(self.vm)
        m0 = metrics(self.vm)
        since = self.vm.sh("date +%s").stdout.strip()
        args = " ".join(f"--{k} {v}" for k, v in limits.items())
        sid = self.cli(f"{CREATE} {args}")
        m1 = metrics(self.vm)
        with self.soft("warm take"):
            j = journal(self.vm, since)
            mine = [l for l in j.splitlines() if sid in l]
            self.tc.assertFalse([l for l in mine if "not usable" in l or "cold create" in l],
                                f"the create of {sid} was not a warm take:\n" + "\n".join(mine))
            self.tc.assertTrue([l for l in mine if "warm" in l],
                               f"nodemgr did not log a warm take of {sid}:\n" + "\n".join(mine))
            self.tc.assertEqual(m1.get(WARM_HIT, 0) - m0.get(WARM_HIT, 0), 1,
                                f"{WARM_HIT} did not count the create")
        with self.soft("sandbox cgroup in the unit's subtree"):
            unit = "/sys/fs/cgroup/system.slice/airlockd.service/"
            self.tc.assertTrue(self.cgroup(sid).startswith(unit), self.cgroup(sid))
            self.tc.assertEqual(self.vm.sh(f"ls {unit}daemons/cgroup.procs >/dev/null && "
                                           f"cat {unit}cgroup.procs | wc -l").stdout.strip(), "0",
                                "the unit's own cgroup holds processes (no-internal-process rule)")
        return sid

    def exec_and_files(self, sid):
        tc, vm = self.tc, self.vm
        tc.assertEqual(self.cli(f"exec {sid} -- echo from-stock"), "from-stock")
        vm.sh(f"echo v1-content | airlock files write {sid} /tmp/f")
        tc.assertEqual(self.cli(f"files read {sid} /tmp/f"), "v1-content")

    def memory_limit(self, sid):
        """A process over --memory (64) is OOM-killed in the sandbox's cgroup."""
        tc, vm = self.tc, self.vm
        d = self.cgroup(sid)
        tc.assertEqual(vm.sh(f"cat {d}/memory.max").stdout.strip(), str(64 << 20))
        # dd's 200 MiB buffer, filled from /dev/zero (a shell variable as
        # big takes a minute under TCG)
        r = vm.sh(f"airlock exec {sid} -- sh -c 'dd if=/dev/zero of=/dev/null bs=200M count=1 "
                  "&& echo survived'", check=False, timeout=240)
        tc.assertNotIn("survived", r.stdout)
        ev = dict(l.split() for l in vm.sh(f"cat {d}/memory.events").stdout.splitlines())
        tc.assertGreaterEqual(int(ev["oom_kill"]), 1, f"memory.events: {ev}")
        # The API says so: limits_hit, an event, the metric (a 2 s poll)
        hit = self.wait_limit(sid, "oom_kills")
        tc.assertGreaterEqual(hit, 1)
        tc.assertIn("out of memory", self.cli(f"events {sid}"))
        tc.assertGreaterEqual(metrics(vm).get(OOM_HITS, 0), 1, OOM_HITS)
        tc.assertEqual(self.cli(f"exec {sid} -- echo still-here"), "still-here")

    def wait_limit(self, sid, field, timeout=60):
        """limits_hit[field] of the sandbox once it is not 0 (the node
        polls the cgroup counters every 2 s; TCG is slow)."""
        deadline = time.time() + timeout
        while True:
            n = (self.get(sid).get("limits_hit") or {}).get(field, 0)
            if n or time.time() > deadline:
                return n
            time.sleep(1)

    def pids_limit(self, sid):
        """A fork bomb in a sandbox of --pids 32 stays at 32."""
        tc, vm = self.tc, self.vm
        d = self.cgroup(sid)
        tc.assertEqual(vm.sh(f"cat {d}/pids.max").stdout.strip(), "32")
        r = vm.sh(f"airlock exec --timeout 20 {sid} -- sh -c 'f(){{ f | f & }}; f; sleep 30' "
                  f">/dev/null 2>&1 & p=$!; sleep 12; cat {d}/pids.current {d}/pids.events; "
                  "kill $p 2>/dev/null; wait", timeout=120)
        cur, ev = r.stdout.split("\n", 1)
        tc.assertLessEqual(int(cur), 32)
        tc.assertGreater(int(ev.split()[-1]), 0, f"the bomb never hit pids.max: {ev}")
        tc.assertGreaterEqual(self.wait_limit(sid, "pids_max_hits"), 1)
        tc.assertGreaterEqual(metrics(vm).get(PIDS_HITS, 0), 1, PIDS_HITS)

    def cpu_limit(self, sid, seconds=6):
        """cpu.max of --cpus 0.5, and the share a busy loop gets (rough)."""
        tc, vm = self.tc, self.vm
        d = self.cgroup(sid)
        tc.assertEqual(vm.sh(f"cat {d}/cpu.max").stdout.strip(), "50000 100000")
        r = vm.sh(f"a=$(sed -n 's/usage_usec //p' {d}/cpu.stat); t0=$(date +%s%N); "
                  f"airlock exec {sid} -- sh -c 'timeout {seconds} sh -c \"while :; do :; done\"'; "
                  f"b=$(sed -n 's/usage_usec //p' {d}/cpu.stat); t1=$(date +%s%N); "
                  "echo $((b - a)) $(((t1 - t0) / 1000))", check=False, timeout=120).stdout.split()
        share = int(r[0]) / int(r[1])
        self.log(f"cpu share at cpus=0.5: {share:.2f} of one CPU over {int(r[1]) / 1e6:.1f} s")
        tc.assertLess(share, 0.6)
        tc.assertGreater(share, 0.05)

    def lifecycle(self, sid):
        """pause/resume, snapshot, rollback, fork, suspend/restore (file store)."""
        tc, vm = self.tc, self.vm
        d = self.cgroup(sid)
        self.cli(f"pause {sid}")
        tc.assertEqual(self.get(sid)["state"], "paused")
        tc.assertEqual(vm.sh(f"cat {d}/cgroup.freeze").stdout.strip(), "1")
        self.cli(f"resume {sid}")
        tc.assertEqual(self.cli(f"exec {sid} -- echo resumed"), "resumed")
        snap = self.cli(f"snapshot create {sid}")
        vm.sh(f"echo v2-content | airlock files write {sid} /tmp/f")
        self.cli(f"rollback {sid} {snap}")
        tc.assertEqual(self.cli(f"files read {sid} /tmp/f"), "v1-content")
        child = self.cli(f"fork {sid}")
        tc.assertEqual(self.cli(f"files read {child} /tmp/f"), "v1-content")
        vm.sh(f"echo child | airlock files write {child} /tmp/f")
        tc.assertEqual(self.cli(f"files read {sid} /tmp/f"), "v1-content")
        self.cli(f"rm {child}")
        self.cli(f"suspend {sid}", timeout=300)
        tc.assertEqual(self.get(sid)["state"], "suspended")
        self.cli(f"restore {sid}", timeout=300)
        tc.assertEqual(self.get(sid)["state"], "running")
        tc.assertEqual(self.cli(f"files read {sid} /tmp/f"), "v1-content")

    def stop_start_kill(self, opts_before):
        """stop leaves nothing (and cgroup2's options as before the first
        start); start works again; a KILLed airlockd comes back."""
        tc, vm = self.tc, self.vm
        t0 = time.time()
        vm.sh("systemctl stop airlockd", timeout=200)
        self.log(f"systemctl stop: {time.time() - t0:.1f} s")
        tc.assertEqual(vm.sh("systemctl is-active airlockd", check=False).stdout.strip(), "inactive")
        tc.assertEqual(vm.sh("systemctl show -p Result --value airlockd").stdout.strip(), "success")
        tc.assertEqual(leftovers(vm), [], "airlockd left these after systemctl stop")
        with self.soft("cgroup2 mount options after stop"):
            tc.assertEqual(cgroup2_opts(vm), opts_before)
        vm.sh("systemctl start airlockd", timeout=600)
        tc.assertEqual(self.cli("health"), "ok")
        pid = vm.sh("systemctl show -p MainPID --value airlockd").stdout.strip()
        vm.sh("systemctl kill -s KILL airlockd")
        deadline = time.time() + 300
        while time.time() < deadline:
            if vm.sh("systemctl show -p NRestarts --value airlockd").stdout.strip() == "1" and \
                    vm.sh("systemctl is-active airlockd", check=False).stdout.strip() == "active":
                break
            time.sleep(1)
        tc.assertNotEqual(vm.sh("systemctl show -p MainPID --value airlockd").stdout.strip(), pid)
        tc.assertEqual(vm.sh("systemctl is-active airlockd", check=False).stdout.strip(), "active")
        tc.assertEqual(self.cli("health"), "ok")
