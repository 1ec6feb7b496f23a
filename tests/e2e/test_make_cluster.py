"""`make cluster` (scripts/cluster.py): the local demo as a user runs it. It
starts PostgreSQL, the S3-compatible server and two nodes and prints the CLI
config; with it, a sandbox created on n2 is suspended, restored on n1 with
its files (its data key, sealed by the local BYOK provider on n2, opens on
n1), and deleted; SIGTERM (what Ctrl-C amounts to) stops everything and
leaves nothing behind."""
import os
import re
import signal
import subprocess
import sys
import time
import unittest

from harness import BIN, CLI, SRC, main, mounts_under, procs_for, until


class MakeClusterTest(unittest.TestCase):
    def setUp(self):
        if not os.path.isdir(os.path.join(SRC, "tests", "s3", "node_modules", "s3rver")):
            self.skipTest("tests/s3's npm packages are missing (sh tests/s3/setup.sh)")
        self.out = open(os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                     f"airlock-make-cluster-{os.getpid()}.log"), "w+")
        self.proc = subprocess.Popen([sys.executable, os.path.join(SRC, "scripts", "cluster.py"),
                                      "--bin", BIN], stdout=self.out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.addCleanup(self.stop)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.out.close()
        os.unlink(self.out.name)

    def log(self):
        self.out.flush()
        with open(self.out.name) as f:
            return f.read()

    def cli(self, *args):
        r = subprocess.run([CLI] + list(args), capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, AIRLOCK_CONFIG=self.config))
        self.assertEqual(r.returncode, 0, f"airlock {' '.join(args)}: {r.stderr}")
        return r.stdout

    def test_demo(self):
        self.assertTrue(until(lambda: "Ctrl-C stops" in self.log() or self.proc.poll() is not None,
                              timeout=900, step=0.5), self.log())
        self.assertIsNone(self.proc.poll(), self.log())
        text = self.log()
        self.config = re.search(r"export AIRLOCK_CONFIG=(\S+)", text).group(1)
        top = re.search(r"removes (\S+)\.", text).group(1)
        self.assertIn("part_mib=1024", text)
        nodes = self.cli("node", "ls")
        self.assertRegex(nodes, r"n1\s+up")
        self.assertRegex(nodes, r"n2\s+up")
        sid = re.search(r"sb-[0-9a-f]+", self.cli("create", "--template", "busybox",
                                                     "--node", "n2")).group(0)
        written = self.cli("exec", sid, "--", "sh", "-c",
                           "head -c 3000000 /dev/urandom > /root/f; sha256sum /root/f").split()[0]
        self.assertIn("suspended", self.cli("suspend", sid))
        self.cli("restore", sid, "--node", "n1")
        got = self.cli("get", sid)
        self.assertRegex(got, r"(?m)^node:\s+n1$")
        self.assertRegex(got, r"(?m)^state:\s+running$")
        self.assertEqual(self.cli("exec", sid, "--", "sha256sum", "/root/f").split()[0], written)
        self.cli("rm", sid)
        # Ctrl-C: everything stops and the directory goes
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=120), 0, self.log())
        self.assertIn("[cluster] postgresql: stopped", self.log())
        self.assertFalse(os.path.exists(top))
        self.assertEqual(mounts_under(top), [])
        # (PostgreSQL's stop script may take a moment to exit)
        until(lambda: procs_for(top) == [], timeout=20)
        self.assertEqual(procs_for(top), [])


if __name__ == "__main__":
    main()
