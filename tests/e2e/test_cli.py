"""The CLI against a real server: the commands of the quick start."""
import json
import os
import subprocess
import tempfile

from harness import AirlockTestCase, BACKEND, CLI, main


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


if __name__ == "__main__":
    main()
