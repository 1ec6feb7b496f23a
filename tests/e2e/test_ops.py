"""Operations: `version`, the CLI's exit codes and per-verb --help,
GET /v1/ready, `airlock doctor` and GET /metrics."""
import json
import os
import re
import signal
import subprocess
import time

import unittest

from harness import AIRLOCKD, BACKEND, CLI, AirlockTestCase, free_port, main

SRC = os.environ.get("AIRLOCK_SRC", os.path.join(os.path.dirname(__file__), "../.."))


def project_version():
    with open(os.path.join(SRC, "CMakeLists.txt")) as f:
        return re.search(r"project\(airlock VERSION ([0-9.]+)", f.read()).group(1)


class VersionTest(unittest.TestCase):
    """No server needed."""

    def test_version(self):
        want = project_version()
        for binary, name in ((CLI, "airlock"), (AIRLOCKD, "airlockd")):
            r = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=10)
            self.assertEqual(r.returncode, 0, r.stderr)
            line = r.stdout.strip()
            # the project version, then what `git describe` said at build time
            self.assertRegex(line, rf"^{name} {re.escape(want)}( \(git [0-9a-zA-Z._-]+\))?$")
            self.assertNotIn("/", line)   # no build path
        r = subprocess.run([CLI, "--json", "version"], capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 0)
        self.assertTrue(json.loads(r.stdout)["version"].startswith(want))


VERBS = ["create", "ls", "list", "get", "rm", "delete", "pause", "resume", "connect",
         "snapshot", "rollback", "fork", "exec", "ps", "logs", "kill", "console", "events",
         "port-forward", "network", "credential", "files", "template", "tenant", "key",
         "node", "health", "version"]


class CliExitTest(AirlockTestCase):
    """The CLI's own failures exit 125..127 (docs: README "CLI"), never 1 or 2,
    which a remote command's status could be."""

    def cli(self, *args, key=None, url=None, stdin=None):
        env = dict(os.environ)
        env.pop("AIRLOCK_URL", None)
        env.pop("AIRLOCK_API_KEY", None)
        if key:
            env["AIRLOCK_API_KEY"] = key
        pre = ["--config", os.path.join(self.server.dir, "cli.json")]
        if url:
            pre += ["--url", url]
        return subprocess.run([CLI] + pre + list(args), input=stdin, capture_output=True,
                              text=True, env=env, timeout=120)

    def test_exit_code_table(self):
        _, tenant = self.new_tenant("exit-codes")
        extra = ["--backend", BACKEND] if BACKEND else []
        sid = self.cli("create", "--template", "busybox", *extra).stdout.strip()
        self.assertTrue(sid.startswith("sb-"), sid)
        try:
            table = [
                # (what, args, key, url, want)
                ("ok", ["get", sid], None, None, 0),
                ("remote status", ["exec", sid, "--", "sh", "-c", "exit 3"], None, None, 3),
                ("remote status 1", ["exec", sid, "--", "false"], None, None, 1),
                ("remote status 2", ["exec", sid, "--", "sh", "-c", "exit 2"], None, None, 2),
                ("no verb", [], None, None, 125),
                ("unknown verb", ["bogus"], None, None, 125),
                ("unknown option", ["create", "--bogus"], None, None, 125),
                ("missing argument", ["get"], None, None, 125),
                ("bad value", ["create", "--memory", "lots"], None, None, 125),
                ("API 404", ["get", "sbx-nope"], None, None, 125),
                ("API 404 on exec", ["exec", "sbx-nope", "--", "true"], None, None, 125),
                ("API 400 on exec", ["exec", sid, "--", "/no/such/cmd"], None, None, 125),
                ("API 409", ["rollback", sid, "no-such-snap"], None, None, 125),
                ("bad key (401)", ["ls"], "al_bad", None, 126),
                ("bad key on exec", ["exec", sid, "--", "true"], "al_bad", None, 126),
                ("not admin (403)", ["tenant", "ls"], tenant.key, None, 126),
                ("unreachable", ["ls"], None, f"http://127.0.0.1:{free_port()}", 127),
                ("unreachable exec", ["exec", sid, "--", "true"], None,
                 f"http://127.0.0.1:{free_port()}", 127),
            ]
            for what, args, key, url, want in table:
                with self.subTest(what):
                    r = self.cli(*args, key=key, url=url)
                    self.assertEqual(r.returncode, want, f"{args}: {r.stderr}")
                    if want >= 125:
                        self.assertIn("airlock", r.stderr)
        finally:
            self.api.delete(sid)

    def test_verb_help(self):
        for verb in VERBS:
            with self.subTest(verb):
                r = self.cli(verb, "--help")
                self.assertEqual(r.returncode, 0, r.stderr)
                lines = r.stdout.splitlines()
                self.assertTrue(lines[0].startswith("Usage: airlock"), r.stdout)
                want = {"list": "ls", "delete": "rm", "resume": "pause"}.get(verb, verb)
                # only this verb's lines, not the whole usage
                self.assertTrue(lines[1].startswith("  " + want), r.stdout)
                self.assertLess(len(lines), 15, r.stdout)
        r = self.cli("snapshot", "create", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("snapshot create SBX", r.stdout)
        r = self.cli("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("127", r.stdout)


class ReadyTest(AirlockTestCase):
    """GET /v1/ready names the component that is down; a stopped (SIGSTOP)
    daemon counts, since `up` restarts dead ones but not stalled ones."""

    def ready(self):
        status, body, _ = self.api.raw("GET", "/v1/ready", auth=False)
        return status, json.loads(body)

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, body = self.ready()
            if status == 200:
                return body
            time.sleep(0.2)
        self.fail(f"not ready again: {body}")

    def test_all_up(self):
        body = self.wait_ready()
        self.assertEqual(body["status"], "ready")
        self.assertEqual(body["down"], [])
        self.assertEqual({k: v["status"] for k, v in body["components"].items()},
                         {"database": "up", "node": "up", "nodemgr": "up", "gateway": "up"})
        # /v1/health stays the liveness check
        status, _, _ = self.api.raw("GET", "/v1/health", auth=False)
        self.assertEqual(status, 200)
        status, _, _ = self.api.raw("POST", "/v1/ready", auth=False)
        self.assertEqual(status, 405)

    def test_stalled_component_is_named(self):
        for role, others in (("gateway", {"database": "up", "node": "up", "nodemgr": "up"}),
                             ("nodemgr", {"database": "up", "node": "up", "gateway": "up"}),
                             ("node", {"database": "up", "nodemgr": "unknown",
                                       "gateway": "unknown"})):
            with self.subTest(role):
                self.wait_ready()
                pid = self.server.pid_of(role)
                os.kill(pid, signal.SIGSTOP)
                try:
                    t0 = time.time()
                    status, body = self.ready()
                    took = time.time() - t0
                finally:
                    os.kill(pid, signal.SIGCONT)
                self.assertEqual(status, 503, body)
                self.assertEqual(body["status"], "not_ready")
                self.assertEqual(body["down"], [role])
                comps = body["components"]
                self.assertEqual(comps[role]["status"], "down")
                self.assertTrue(comps[role]["error"])
                self.assertEqual({k: v["status"] for k, v in comps.items() if k != role}, others)
                self.assertLess(took, 10)   # bounded, not hung on the stalled daemon
                self.assertEqual(self.server.pid_of(role), pid)   # stalled, not restarted
                self.wait_ready()


if __name__ == "__main__":
    main()
