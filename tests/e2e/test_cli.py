"""The CLI against a real server: the commands of the quick start."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import unittest

from harness import AIRLOCKD, AirlockTestCase, BACKEND, CLI, Server, main


class CliTest(AirlockTestCase):
    def cli(self, *args, stdin=None, check=True):
        env = dict(os.environ)
        env.pop("AIRLOCK_URL", None)
        env.pop("AIRLOCK_API_KEY", None)
        r = subprocess.run([CLI, "--config", os.path.join(self.server.dir, "cli.json")] + list(args),
                           input=stdin, capture_output=True, env=env, timeout=120)
        if check and r.returncode != 0:
            self.fail(f"airlock {args} -> {r.returncode}: {r.stderr.decode()}")
        return r

    def test_quick_start(self):
        extra = ["--backend", BACKEND] if BACKEND else []
        sid = self.cli("create", "--template", "busybox", *extra).stdout.decode().strip()
        self.assertTrue(sid)
        try:
            r = self.cli("exec", sid, "--", "sh", "-c", "echo 4")
            self.assertEqual(r.stdout, b"4\n")
            r = self.cli("exec", sid, "--", "sh", "-c", "echo oops >&2; exit 3", check=False)
            self.assertEqual(r.returncode, 3)
            self.assertEqual(r.stderr, b"oops\n")
            with tempfile.NamedTemporaryFile() as f:
                f.write(b"local contents\n")
                f.flush()
                with open(f.name, "rb") as inp:
                    self.cli("files", "write", sid, "/work/b.txt", stdin=inp.read())
            r = self.cli("files", "read", sid, "/work/b.txt")
            self.assertEqual(r.stdout, b"local contents\n")
            r = self.cli("exec", "-i", sid, "--", "cat", stdin=b"piped\n")
            self.assertEqual(r.stdout, b"piped\n")
            r = self.cli("ls")
            self.assertIn(sid.encode(), r.stdout)
            r = self.cli("--json", "ls")
            ids = [s["id"] for s in json.loads(r.stdout)["sandboxes"]]
            self.assertIn(sid, ids)
            r = self.cli("template", "ls")
            self.assertIn(b"busybox", r.stdout)
            self.cli("pause", sid)
            self.cli("resume", sid)
            lines = self.cli("events", sid).stdout.decode().splitlines()
            self.assertEqual(lines[0].split(), ["AT", "FROM", "TO", "REASON"])
            rows = [l.split(None, 3) for l in lines[1:]]
            self.assertEqual([r[1:] for r in rows[-2:]],
                             [["running", "paused", "paused by client"],
                              ["paused", "running", "resumed by client"]])
        finally:
            self.cli("rm", sid)
        r = self.cli("ls")
        self.assertNotIn(sid.encode(), r.stdout)

    def test_env_overrides_and_errors(self):
        env = dict(os.environ, AIRLOCK_URL=f"http://{self.server.addr}", AIRLOCK_API_KEY="al_bad")
        r = subprocess.run([CLI, "ls"], capture_output=True, env=env)
        self.assertEqual(r.returncode, 126)   # the key was refused
        self.assertIn(b"unauthorized", r.stderr)
        r = self.cli("exec", "sbx-nope", "--", "true", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"not_found", r.stderr)


class DataDirTest(unittest.TestCase):
    def test_untraversable_parent_named_at_start(self):
        # A data dir under a directory the unprivileged user cannot cross
        # (here a 0700 mkdtemp of root's): `up` stops at once, names that
        # directory and the fix, instead of starting roles that fail later
        # with "unable to open database file".
        top = tempfile.mkdtemp(prefix="airlock-e2e-")
        os.chmod(top, 0o700)
        data = os.path.join(top, "nested", "data")
        srv = Server()
        shutil.rmtree(srv.dir)
        srv.dir = data        # so that cleanup looks for what this made
        p = subprocess.Popen([AIRLOCKD, "up", "--data-dir", data, "--listen", srv.addr,
                              "--templates", "busybox", "--pool-size-mb", "16384"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            self.fail("airlockd up did not stop: " + out.decode(errors="replace")[-2000:])
        finally:
            srv.cleanup()
            shutil.rmtree(top, ignore_errors=True)
        msg = out.decode(errors="replace")
        self.assertNotEqual(p.returncode, 0, msg)
        self.assertIn(f"directory {top} is not traversable by user `airlock`", msg)
        self.assertIn(f"chmod o+x {top}", msg)
        self.assertNotIn("unable to open database file", msg)


if __name__ == "__main__":
    main()
