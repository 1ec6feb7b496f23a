"""Operations: `version`, the CLI's exit codes and per-verb --help,
GET /v1/ready, `airlock doctor` and GET /metrics."""
import json
import os
import re
import signal
import subprocess
import time

import unittest

from harness import AIRLOCKD, BACKEND, CLI, AirlockTestCase, free_port, main, sigstop

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


VERBS = ["create", "ls", "list", "get", "top", "rm", "delete", "pause", "resume", "connect",
         "snapshot", "rollback", "fork", "exec", "ps", "logs", "kill", "console", "events",
         "port-forward", "network", "credential", "files", "template", "tenant", "key",
         "node", "health", "version", "doctor", "help", "completion", "mcp"]


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
                sigstop(pid)
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


def pvm_only():
    return os.path.exists("/sys/module/kvm_pvm") and not (
        os.path.exists("/sys/module/kvm_intel") or os.path.exists("/sys/module/kvm_amd"))


class DoctorTest(AirlockTestCase):
    """`airlock doctor` (local checks) and GET /v1/node/doctor (nodemgr's)."""

    def doctor(self, *args, remote=False):
        pre = ["--config", os.path.join(self.server.dir, "cli.json")]
        r = subprocess.run([CLI] + pre + ["doctor"] + (["--remote"] if remote else []) + list(args),
                           capture_output=True, text=True, timeout=120)
        return r

    def check_kvm(self, rep):
        checks = {c["name"]: c for c in rep["checks"]}
        for name in ("kvm", "vm_accel", "qemu", "guest_kernel", "btrfs", "loop_devices", "disk",
                     "cgroup", "nftables", "memory", "templates"):
            self.assertIn(name, checks)
            self.assertIn(checks[name]["status"], ("ok", "warn", "fail"))
            if checks[name]["status"] != "ok":
                self.assertTrue(checks[name]["fix"], name)
        if pvm_only():
            # this host: KVM is PVM-only, so the vm backend runs on TCG
            self.assertEqual(checks["kvm"]["status"], "warn")
            self.assertIn("kvm_pvm", checks["kvm"]["detail"])
            # judged by running a test guest (PVM runs it), not by the module
            self.assertIn("a test guest runs", checks["kvm"]["detail"])
            self.assertIn("kvm_intel", checks["kvm"]["fix"])
            self.assertEqual(rep["backends"]["vm"]["accel"], "tcg")
            self.assertIn("kvm_pvm", rep["backends"]["vm"]["accel_reason"])
        elif not os.path.exists("/dev/kvm"):
            self.assertEqual(checks["kvm"]["status"], "warn")
            self.assertEqual(rep["backends"]["vm"]["accel"], "tcg")
        return checks

    def test_local(self):
        r = self.doctor("--json", "--data-dir", self.server.dir)
        rep = json.loads(r.stdout)
        checks = self.check_kvm(rep)
        self.assertEqual(rep["default_backend"], "ns")
        self.assertTrue(rep["backends"]["ns"]["can_run"], rep)
        self.assertEqual((r.returncode, rep["ok"]), (0, True))
        self.assertIn("busybox", checks["templates"]["detail"])
        self.assertIn("loop", checks["btrfs"]["detail"])   # the test's data dir is on a pool.img
        # a gap in the default backend: exit 1, and the report says which
        r = self.doctor("--json", "--backend", "vm", "--vm-dir", "/nonexistent")
        rep = json.loads(r.stdout)
        self.assertEqual((r.returncode, rep["ok"]), (1, False))
        self.assertEqual(rep["backends"]["vm"]["missing"], ["guest_kernel"])
        self.assertEqual({c["name"]: c["status"] for c in rep["checks"]}["guest_kernel"], "fail")
        # the human table
        r = self.doctor("--data-dir", self.server.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("CHECK"), r.stdout)
        self.assertIn("backend ns: can run", r.stdout)
        if pvm_only():
            self.assertIn("fix: load kvm_intel", r.stdout)

    def test_remote(self):
        r = self.doctor("--json", remote=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        rep = json.loads(r.stdout)
        checks = self.check_kvm(rep)
        self.assertTrue(rep["ok"])
        # run by this server's nodemgr, on its data dir
        self.assertIn(self.server.dir, checks["btrfs"]["detail"])
        self.assertIn("busybox", checks["templates"]["detail"])
        self.assertEqual(checks["nftables"]["status"], "ok")   # nodemgr is root
        status, body, _ = self.api.raw("GET", "/v1/node/doctor")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["backends"], rep["backends"])
        _, tenant = self.new_tenant("doctor")
        self.assertEqual(tenant.raw("GET", "/v1/node/doctor")[0], 403)
        self.assertEqual(self.api.raw("GET", "/v1/node/doctor", auth=False)[0], 401)


def parse_metrics(text):
    """{(name, frozenset(labels)): value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-z_]+)(?:\{(.*)\})? (\S+)', line)
        assert m, f"bad metrics line {line!r}"
        labels = frozenset(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


class MetricsTest(AirlockTestCase):
    """GET /metrics: known operations move the counters by exactly that much."""

    def scrape(self):
        status, body, r = self.api.raw("GET", "/metrics")
        self.assertEqual(status, 200, body)
        self.assertTrue(r.getheader("Content-Type").startswith("text/plain"))
        return parse_metrics(body.decode())

    def test_auth(self):
        self.assertEqual(self.api.raw("GET", "/metrics", auth=False)[0], 401)
        _, tenant = self.new_tenant("metrics-auth")
        self.assertEqual(tenant.raw("GET", "/metrics")[0], 403)

    def test_counts_move_exactly(self):
        def op(m, name, op_, le="+Inf"):
            return m[(f"airlock_op_duration_seconds_{name}",
                      frozenset({("op", op_)} | ({("le", le)} if name == "bucket" else set())))]

        t, tenant = self.new_tenant("metrics")
        backend = BACKEND or "ns"
        before = self.scrape()
        N, M = 3, 4
        sids = []
        try:
            for _ in range(N):
                sids.append(tenant.create()["id"])
            for i in range(M):
                code, out, _, _ = tenant.exec(sids[i % N], ["sh", "-c", "echo hi"])
                self.assertEqual((code, out), (0, b"hi\n"))
            tenant.call("POST", f"/v1/sandboxes/{sids[0]}/snapshots", {})
            kids = tenant.call("POST", f"/v1/sandboxes/{sids[1]}/fork", {"count": 2})
            sids += [k["id"] for k in kids["sandboxes"]]
            # one connection the gateway refuses (a private address)
            code, _, err, _ = tenant.exec(
                sids[2], ["sh", "-c", "timeout 5 wget -q -O - http://192.168.255.1/"])
            self.assertIn(b"403", err)
            after = self.scrape()
            moved = {o: op(after, "count", o) - op(before, "count", o)
                     for o in ("create", "exec", "snapshot", "fork")}
            self.assertEqual(moved, {"create": N, "exec": M + 1, "snapshot": 1, "fork": 1})
            for o in moved:
                # buckets are cumulative and end at the count
                les = [op(after, "bucket", o, le) for le in
                       sorted({dict(k[1])["le"] for k in after if k[0].endswith("_bucket")
                               and dict(k[1]).get("op") == o} - {"+Inf"}, key=float)]
                self.assertEqual(les, sorted(les))
                self.assertEqual(op(after, "bucket", o), op(after, "count", o))
                self.assertGreater(op(after, "sum", o), op(before, "sum", o))
            self.assertEqual(after[("airlock_tenant_sandboxes",
                                    frozenset({("tenant", t["id"])}))], N + 2)
            running = ("airlock_sandboxes",
                       frozenset({("state", "running"), ("backend", backend)}))
            self.assertEqual(after[running] - before[running], N + 2)
            self.assertEqual(after[("airlock_gateway_up", frozenset())], 1)
            g = lambda m, k: m.get((f"airlock_gateway_{k}", frozenset()), 0)
            self.assertEqual(g(after, "connections_total") - g(before, "connections_total"), 1)
            self.assertEqual(g(after, "denied_total") - g(before, "denied_total"), 1)
            self.assertGreater(after[("airlock_node_memory_available_bytes", frozenset())], 0)
            self.assertGreater(after[("airlock_node_pool_free_bytes", frozenset())], 0)
        finally:
            for sid in sids:
                tenant.call("DELETE", f"/v1/sandboxes/{sid}", expect=(200, 204, 404))
        final = self.scrape()
        self.assertNotIn(("airlock_tenant_sandboxes", frozenset({("tenant", t["id"])})), final)


if __name__ == "__main__":
    main()
