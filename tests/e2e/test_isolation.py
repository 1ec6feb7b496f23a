"""A sandbox is hostile: it must not see the host, load modules, mount, reach
the host's services, or starve another sandbox."""
import os
import tempfile
import threading
import time

from harness import AirlockTestCase, main


class IsolationTest(AirlockTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sbx = cls.api.create(template="busybox", limits={"memory_mb": 64, "pids": 64})
        cls.sid = cls.sbx["id"]

    @classmethod
    def tearDownClass(cls):
        cls.api.delete(cls.sid)
        super().tearDownClass()

    def sh(self, script):
        return self.api.exec(self.sid, ["sh", "-c", script])

    def test_no_host_processes(self):
        code, out, _, _ = self.sh("ls /proc | grep -E '^[0-9]+$' | wc -l")
        self.assertLess(int(out), 10)
        code, out, _, _ = self.sh("cat /proc/1/cmdline | tr '\\0' ' '")
        self.assertIn(b"airlock-guest", out)
        # our own pid (the test runner) is invisible inside
        code, _, _, _ = self.sh(f"test -e /proc/{os.getpid()}/cmdline && grep -q python /proc/{os.getpid()}/cmdline")
        self.assertNotEqual(code, 0)

    def test_no_host_files(self):
        with tempfile.NamedTemporaryFile(prefix="airlock-secret-", dir="/tmp") as f:
            f.write(b"secret")
            f.flush()
            code, out, _, _ = self.sh(f"cat {f.name}; ls /tmp")
            self.assertNotIn(b"secret", out)
            self.assertNotIn(os.path.basename(f.name).encode(), out)
        code, out, _, _ = self.sh("ls /dev")
        allowed = set(b"full null ptmx pts random shm tty urandom zero fd stdin stdout stderr".split())
        self.assertLessEqual(set(out.split()), allowed)
        for dev in (b"vda", b"sda", b"kvm", b"loop0", b"mem", b"kmsg"):
            self.assertNotIn(dev, out.split())

    def test_uid_mapped(self):
        code, out, _, _ = self.sh("id -u; cat /proc/self/uid_map")
        lines = out.split(b"\n")
        self.assertEqual(lines[0], b"0")
        inside, outside, count = lines[1].split()
        self.assertEqual(inside, b"0")
        self.assertNotEqual(outside, b"0")  # root inside is not root outside

    def test_cannot_load_modules(self):
        code, out, err, _ = self.sh("echo junk > /tmp/x.ko; insmod /tmp/x.ko")
        self.assertNotEqual(code, 0)
        self.assertRegex((out + err).lower(), rb"not permitted|permission|function not implemented")

    def test_proc_hides_and_freezes_the_host(self):
        # What container runtimes hide: files that show the host's kernel
        # (keys, timers, ...) are /dev/null (a character device reading as
        # empty), host hardware dirs are empty; kernel settings read-only.
        code, out, _, _ = self.sh(
            "for f in keys key-users timer_list sched_debug kcore; do"
            "  test -e /proc/$f && echo $f=$(test -c /proc/$f && echo null || echo file); done;"
            " test -d /proc/acpi && echo acpi=$(ls -A /proc/acpi | wc -l); true")
        seen = dict(l.split(b"=") for l in out.split())
        self.assertIn(b"keys", seen)  # this kernel has it: the check is not vacuous
        self.assertEqual({k: v for k, v in seen.items() if v not in (b"null", b"0")}, {}, out)
        code, _, err, _ = self.sh("echo x > /proc/sys/kernel/domainname")
        self.assertNotEqual(code, 0)
        self.assertIn(b"Read-only", err)
        code, _, err, _ = self.sh("echo h > /proc/sysrq-trigger")
        self.assertNotEqual(code, 0)
        # the sandbox's own /proc still works
        code, out, _, _ = self.sh("cat /proc/self/status | grep -c ^Pid; cat /proc/sys/kernel/hostname")
        self.assertEqual(code, 0)
        self.assertEqual(out.split()[0], b"1")

    def test_cannot_mount(self):
        code, out, err, _ = self.sh("mkdir -p /mnt/t; mount -t tmpfs none /mnt/t")
        self.assertNotEqual(code, 0)
        code, out, err, _ = self.sh("mount -t proc proc /mnt/t")
        self.assertNotEqual(code, 0)

    def test_network_only_through_gateway(self):
        # lo and the veth to the host; every packet on it goes to the gateway
        # (tests/e2e/test_network.py covers what the gateway lets through)
        code, out, _, _ = self.sh("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
        self.assertEqual(sorted(out.split()), [b"eth0", b"lo"])
        # the API listens on the host's loopback; the sandbox's loopback is its own
        code, out, err, _ = self.sh(f"timeout 10 wget -q -O - http://127.0.0.1:{self.server.port}/v1/health")
        self.assertNotEqual(code, 0)
        # and through the host end of its veth, the host's own addresses are refused
        code, out, _, _ = self.sh("ip route | awk '/default/ {print $3}'")
        gw = out.decode().strip()
        self.assertTrue(gw)
        code, out, err, _ = self.sh(f"timeout 10 wget -q -O - http://{gw}:{self.server.port}/v1/health")
        self.assertNotEqual(code, 0)
        self.assertNotIn(b"ok", out)

    def test_fork_bomb_contained(self):
        other = self.api.create(template="busybox")
        try:
            def bomb():
                self.api.exec(self.sid, ["sh", "-c", "f() { f & f & }; f; sleep 5"], timeout_s=10)
            t = threading.Thread(target=bomb)
            t.start()
            time.sleep(1.0)
            t0 = time.time()
            code, out, _, _ = self.api.exec(other["id"], ["echo", "alive"])
            self.assertEqual(out, b"alive\n")
            self.assertLess(time.time() - t0, 5)
            t.join(60)
            # the bomb hit its pids limit
            code, out, _, _ = self.api.exec(self.sid, ["sh", "-c", "ls /proc | grep -cE '^[0-9]+$'"])
            self.assertLessEqual(int(out or b"0"), 70)
        finally:
            self.api.delete(other["id"])

    def test_memory_hog_contained(self):
        other = self.api.create(template="busybox")
        try:
            # allocate ~200 MiB in a 64 MiB sandbox: the kernel kills the hog
            code, out, err, _ = self.api.exec(
                self.sid, ["sh", "-c", "a=$(head -c 200000000 /dev/zero | tr '\\0' x); echo survived"])
            self.assertNotEqual(out, b"survived\n")
            code, out, _, _ = self.api.exec(other["id"], ["echo", "alive"])
            self.assertEqual(out, b"alive\n")
            code, out, _, _ = self.api.exec(self.sid, ["echo", "still-here"])
            self.assertEqual(out, b"still-here\n")
        finally:
            self.api.delete(other["id"])


if __name__ == "__main__":
    main()
