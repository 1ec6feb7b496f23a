"""The default debian template: built once by mmdebstrap (concurrent requests
share the build), and python3 works inside."""
from concurrent.futures import ThreadPoolExecutor

import json
import os
import subprocess

from harness import CLI, AirlockTestCase, main


class DebianTest(AirlockTestCase):
    templates = "busybox"  # debian is built on demand below

    def test_debian_on_demand_shared_build(self):
        with ThreadPoolExecutor(max_workers=3) as ex:
            sbxs = list(ex.map(lambda _: self.api.create(template="debian"), range(3)))
        versions = [t for t in self.api.call("GET", "/v1/templates")["templates"]
                    if t["name"] == "debian"]
        self.assertEqual(len(versions), 1, versions)  # one build for three requests
        for s in sbxs:
            self.assertEqual(s["template"], "debian")
        sid = sbxs[0]["id"]
        code, out, _, _ = self.api.exec(sid, ["python3", "-c", "print(2+2)"])
        self.assertEqual((code, out), (0, b"4\n"))
        code, out, _, _ = self.api.exec(sid, ["sh", "-c", "git --version && curl --version | head -1 && ps -p 1 -o comm="])
        self.assertEqual(code, 0, out)
        self.assertIn(b"git version", out)
        # default template is debian
        d = self.api.call("POST", "/v1/sandboxes", {})
        self.assertEqual(d["template"], "debian")
        for s in sbxs + [d]:
            self.api.delete(s["id"])

    # Raw syscalls from python3 (ctypes) in a debian sandbox: x86_64 numbers.
    SYSCALL_PROBE = r"""
import ctypes, errno, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
out = {
    "kcmp": call(312, os.getpid(), os.getpid(), 0, 0, 0),
    "pidfd_getfd": call(438, 0, 0, 0),
    "process_madvise": call(440, 0, 0, 0, 0, 0),
    "userfaultfd": call(323, 0),
    "io_uring_setup": call(425, 1, 0),
    "bpf": call(321, 0, 0, 0),
    "ptrace": call(101, 0, 0, 0, 0),
    "mount": call(165, 0, 0, 0, 0, 0),
    "unshare_user": call(272, 0x10000000),
    "settimeofday": call(164, 0, 0),
    "vhangup": call(153),
    "personality_exec": call(135, 0x0400000),
    "personality_query": call(135, 0xffffffff),
    "unknown_1000": call(1000),
}
try:
    socket.socket(40, socket.SOCK_STREAM)
    out["vsock"] = "ok"
except OSError as e:
    out["vsock"] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""

    def debian_sandbox(self):
        return self.api.create(template="debian")["id"]

    def test_syscall_allowlist_refuses_what_it_should(self):
        sid = self.debian_sandbox()
        try:
            code, out, err, _ = self.api.exec(sid, ["python3", "-c", self.SYSCALL_PROBE])
            self.assertEqual(code, 0, err)
            got = json.loads(out)
            # Known and refused: EPERM. Not on the allowlist: ENOSYS, as a
            # call the kernel lacked would.
            for name in ("kcmp", "pidfd_getfd", "process_madvise", "userfaultfd",
                         "io_uring_setup", "bpf", "ptrace", "mount", "unshare_user", "vsock"):
                self.assertEqual(got[name], "EPERM", (name, got))
            for name in ("settimeofday", "vhangup", "personality_exec", "unknown_1000"):
                self.assertEqual(got[name], "ENOSYS", (name, got))
            self.assertEqual(got["personality_query"], "ok", got)
        finally:
            self.api.delete(sid)

    def test_common_programs_work_under_the_allowlist(self):
        sid = self.debian_sandbox()
        script = r"""
set -e
python3 - <<'PY'
import multiprocessing, os, select, signal, socket, sqlite3, ssl, subprocess, tempfile, threading, mmap, time
with multiprocessing.Pool(2) as p: assert p.map(abs, [-1, -2]) == [1, 2]
t = threading.Thread(target=time.sleep, args=(0.01,)); t.start(); t.join()
a, b = socket.socketpair(); a.send(b"x"); assert b.recv(1) == b"x"
e = select.epoll(); e.register(b.fileno()); e.close()
db = sqlite3.connect(":memory:"); db.execute("create table t(x)"); db.execute("insert into t values(1)")
ssl.create_default_context()
with tempfile.TemporaryFile() as f:
    f.write(b"0" * 4096); f.flush(); m = mmap.mmap(f.fileno(), 4096); m[0:1] = b"1"; m.close()
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); s.close()
assert subprocess.run(["true"]).returncode == 0
signal.signal(signal.SIGUSR1, lambda *a: None); os.kill(os.getpid(), signal.SIGUSR1)
print("python ok")
PY
cd /tmp && git init -q repo && cd repo && echo hi > f && git add f
git -c user.name=t -c user.email=t@t commit -qm one && git log --oneline | wc -l
curl --version | head -1
apt-get --version | head -1
apt-get check -q >/dev/null && echo apt ok
dpkg -l | grep -c ^ii
perl -e 'print "perl ok
"'
tar czf /tmp/a.tgz -C /etc hostname && tar tzf /tmp/a.tgz
ps -eo pid,comm | head -3
if command -v cc >/dev/null; then echo 'int main(){return 0;}' > /tmp/t.c && cc /tmp/t.c -o /tmp/t && /tmp/t && echo cc ok; fi
echo ALL OK
"""
        try:
            code, out, err, _ = self.api.exec(sid, ["bash", "-c", script])
            self.assertEqual(code, 0, out + err)
            for want in (b"python ok", b"apt ok", b"perl ok", b"ALL OK", b"curl "):
                self.assertIn(want, out, out + err)
        finally:
            self.api.delete(sid)

    def test_build_with_packages_via_cli(self):
        cfg = os.path.join(self.server.dir, "cli.json")
        r = subprocess.run([CLI, "--config", cfg, "template", "build", "deb-jq",
                            "--from", "debian:bookworm", "--packages", "jq"],
                           capture_output=True, timeout=900)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.strip(), "the build shows its progress")
        s = self.api.create(template="deb-jq")
        try:
            code, out, _, _ = self.api.exec(s["id"], ["sh", "-c", "echo '{\"a\":41}' | jq '.a+1'"])
            self.assertEqual((code, out), (0, b"42\n"))
        finally:
            self.api.delete(s["id"])
        r = subprocess.run([CLI, "--config", cfg, "template", "build", "deb-bad",
                            "--from", "debian:bookworm", "--packages", "no such package"],
                           capture_output=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)


if __name__ == "__main__":
    main()
