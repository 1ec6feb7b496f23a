#!/usr/bin/env python3
"""Installing Airlock like a service (issue 19, item 3).

- A staged install (`cmake --install` with DESTDIR, prefix /usr) runs from
  where it was put: `airlockd up` finds the guest agent and the template
  builder beside itself, a sandbox runs, and the installed programs hold no
  build or source path.
- `airlockd up` speaks systemd's notify protocol: READY=1 once it is up (after
  the "airlock is up" line), STOPPING=1 when told to stop.
- The Debian package (`cpack`, as `make deb` runs it) installs into a fresh
  mmdebstrap root of this machine's apt sources with only its declared
  dependencies, its programs run there, and remove/purge leave nothing.
- The config file, which may hold secrets (the S3 keys, the database's
  password), is installed 0640: root's to write, the airlock group's to
  read (the package's postinst makes the group), no one else's (issue 34,
  item 8).
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from debpkg import BUILD, deb_depends, make_deb, run
from harness import Server, stop_and_check, main

SRC = os.path.realpath(os.environ.get("AIRLOCK_SRC", os.path.join(os.path.dirname(__file__), "..", "..")))


class Package(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="airlock-pkg-")
        os.chmod(self.tmp, 0o755)  # the daemons' user traverses it
        self.server = None

    def tearDown(self):
        if self.server:
            self.server.cleanup()
        for mp in reversed(sorted(self.mounts_under(self.tmp))):
            subprocess.run(["umount", "-l", mp], capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    @staticmethod
    def mounts_under(path):
        with open("/proc/self/mountinfo") as f:
            return [line.split()[4] for line in f if line.split()[4].startswith(path + "/")]

    def test_staged_install_runs_and_notifies(self):
        root = os.path.join(self.tmp, "root")
        run("cmake", "--install", BUILD, "--prefix", "/usr", "--strip", env=dict(os.environ, DESTDIR=root))
        airlockd = os.path.join(root, "usr/bin/airlockd")
        for f in ("usr/bin/airlock", "usr/lib/airlock/airlock-guest",
                  "usr/lib/airlock/scripts/template-build.sh",
                  "usr/lib/systemd/system/airlockd.service", "etc/airlock/airlockd.conf"):
            self.assertTrue(os.path.exists(os.path.join(root, f)), f)
        mode = os.stat(os.path.join(root, "etc/airlock/airlockd.conf")).st_mode & 0o7777
        self.assertEqual(oct(mode), oct(0o640), "the config must not be readable by every user")
        for prog in ("usr/bin/airlockd", "usr/bin/airlock"):
            with open(os.path.join(root, prog), "rb") as f:
                data = f.read()
            for p in (BUILD, SRC):
                self.assertNotIn(p.encode(), data, f"{prog} holds the path {p}")

        # systemd's side of Type=notify: a datagram socket in $NOTIFY_SOCKET.
        sock_path = os.path.join(self.tmp, "notify.sock")
        ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        ns.bind(sock_path)
        os.chmod(sock_path, 0o777)
        ns.settimeout(0.2)
        try:
            self.server = Server("busybox", airlockd=airlockd, env={"NOTIFY_SOCKET": sock_path})
            self.server.start()
            got = []
            deadline = time.time() + 10
            while time.time() < deadline and "READY=1" not in got:
                try:
                    got.append(ns.recv(4096).decode())
                except socket.timeout:
                    pass
            self.assertIn("READY=1", got, "no READY=1 after `airlock is up`")

            # The relocated tree is the one at work: its daemons, and the
            # template built by its script (which names itself).
            self.assertEqual(os.readlink(f"/proc/{self.server.pid_of('nodemgr')}/exe"), airlockd)
            self.assertIn(f"template-build: {root}/usr/lib/airlock/scripts/template-build.sh",
                          self.server.log())
            api = self.server.client()
            sid = api.create(template="busybox")["id"]
            code, out, _, _ = api.exec(sid, ["echo", "from-the-install"])
            self.assertEqual((code, out), (0, b"from-the-install\n"))
            api.delete(sid)

            self.server.proc.send_signal(15)
            deadline = time.time() + 30
            while time.time() < deadline and "STOPPING=1" not in got:
                try:
                    got.append(ns.recv(4096).decode())
                except socket.timeout:
                    pass
            self.assertIn("STOPPING=1", got)
            server, self.server = self.server, None
            stop_and_check(server)
        finally:
            ns.close()

    def test_deb_installs_runs_and_uninstalls_in_a_fresh_root(self):
        if not shutil.which("mmdebstrap") or not shutil.which("cpack"):
            self.skipTest("needs mmdebstrap and cpack")
        deb = make_deb(os.path.join(self.tmp, "deb"))
        files = run("dpkg-deb", "-c", deb).stdout
        for f in ("./usr/bin/airlockd", "./usr/bin/airlock", "./usr/lib/airlock/airlock-guest",
                  "./usr/lib/airlock/airlock-oci",
                  "./usr/lib/airlock/scripts/template-build.sh",
                  "./usr/lib/systemd/system/airlockd.service", "./etc/airlock/airlockd.conf",
                  "./usr/share/bash-completion/completions/airlock", "./usr/share/man/man1/airlock.1"):
            self.assertIn(f, files)
        self.assertIn("/etc/airlock/airlockd.conf", run("dpkg-deb", "-I", deb, "conffiles").stdout)

        # A fresh root with only what the package says it depends on (from
        # this machine's apt sources: no mirror named), then dpkg -i, which
        # refuses a package whose Depends are not met.
        names = ",".join(deb_depends(deb))
        root = os.path.join(self.tmp, "root")
        run("mmdebstrap", "--quiet", "--variant=minbase", f"--include={names}", "bookworm", root)
        shutil.copy(deb, os.path.join(root, "tmp", "airlock.deb"))
        run("chroot", root, "dpkg", "-i", "/tmp/airlock.deb")
        # The config: root's, readable by the airlock group (made by the
        # postinst, as `airlockd up` would make it), by no one else.
        st = os.stat(os.path.join(root, "etc/airlock/airlockd.conf"))
        self.assertEqual(oct(st.st_mode & 0o7777), oct(0o640), "the config must not be readable by every user")
        group = subprocess.run(["chroot", root, "getent", "group", "airlock"],
                               capture_output=True, text=True).stdout.strip()
        self.assertTrue(group, "the package made no airlock group")
        self.assertEqual((st.st_uid, st.st_gid), (0, int(group.split(":")[2])),
                         "/etc/airlock/airlockd.conf must be root:airlock")
        self.assertRegex(run("chroot", root, "airlockd", "version").stdout, r"^airlockd \d+\.\d+")
        self.assertIn("Usage: airlock", run("chroot", root, "airlock", "--help").stdout)
        with open(os.path.join(root, "usr/lib/systemd/system/airlockd.service")) as f:
            unit = f.read()
        for line in ("Type=notify", "Delegate=yes", "Restart=on-failure",
                     "ExecStart=/usr/bin/airlockd up"):
            self.assertIn(line, unit)

        run("chroot", root, "dpkg", "-r", "airlock")
        for f in ("usr/bin/airlockd", "usr/bin/airlock", "usr/lib/airlock"):
            self.assertFalse(os.path.exists(os.path.join(root, f)), f"{f} left after remove")
        self.assertTrue(os.path.exists(os.path.join(root, "etc/airlock/airlockd.conf")),
                        "remove must keep the conffile")
        run("chroot", root, "dpkg", "-P", "airlock")
        self.assertFalse(os.path.exists(os.path.join(root, "etc/airlock")), "purge left /etc/airlock")


if __name__ == "__main__":
    main()
