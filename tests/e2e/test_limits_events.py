"""Limits that bite are events: an OOM kill inside a sandbox with a memory
limit, and forks refused at its pids limit, show as a sandbox event (the
events API and `airlock events`), as `limits_hit` in GET /v1/sandboxes/{id},
and on GET /metrics, within a few seconds; the sandbox stays running. A loop
of OOMs is coalesced into rows (a counter, at most one row per kind per
interval), the counts survive a restart of the node, an exec at the pids
limit answers 409 pids_limit and works again once the bomb is gone, and a
guest agent the OOM killer ends fails the sandbox with "out of memory"."""
import json
import os
import subprocess
import time

from harness import AirlockTestCase, ApiError, BACKEND, CLI, main
from test_ops import parse_metrics

# a process that touches 128 MiB (busybox dd: one 128 MiB buffer)
HOG = "dd if=/dev/zero of=/dev/null bs=128M count=1"


class LimitsEventsTest(AirlockTestCase):
    def setUp(self):
        if BACKEND == "vm":
            self.skipTest("the limits bind the guest's processes on ns only (docs/API.md)")

    def metric(self, kind):
        status, body, _ = self.api.raw("GET", "/metrics")
        self.assertEqual(status, 200, body)
        return parse_metrics(body.decode()).get(
            ("airlock_sandbox_limit_hits_total", frozenset({("kind", kind)})))

    def events(self, sid, kind=None):
        evs = self.api.call("GET", f"/v1/sandboxes/{sid}/events?limit=1000")["events"]
        return [e for e in evs if kind is None or e.get("type") == kind]

    def wait_for(self, what, fn, timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = fn()
            if v:
                return v
            time.sleep(0.2)
        self.fail(f"not within {timeout} s: {what}")

    def cli(self, *args):
        r = subprocess.run([CLI, "--config", os.path.join(self.server.dir, "cli.json")] +
                           list(args), capture_output=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.decode()

    def start(self, sid, script):
        """Start sh -c script in sid; its pid (it outlives the stream)."""
        gen = self.api.stream("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["sh", "-c", script]})
        pid = next(gen)["pid"]
        gen.close()
        return pid

    def test_oom_kill_event_field_metric_cli(self):
        before = self.metric("oom_kill")
        self.assertIsNotNone(before, "no airlock_sandbox_limit_hits_total{kind=oom_kill}")
        s = self.api.create(limits={"memory_mb": 64})
        sid = s["id"]
        try:
            self.assertEqual(s["limits_hit"], {"oom_kills": 0, "pids_max_hits": 0,
                                               "last_at": None})
            t0 = time.time()
            code, _, _, _ = self.api.exec(sid, ["sh", "-c", HOG])
            self.assertEqual(code, 128 + 9)   # the kernel's SIGKILL
            ev = self.wait_for("an oom_kill event", lambda: self.events(sid, "oom_kill"))
            print(f"oom_kill event {time.time() - t0:.1f} s after the exec started")
            self.assertEqual(len(ev), 1)
            self.assertEqual(ev[0]["count"], 1)
            self.assertEqual(ev[0]["from"], "running")
            self.assertEqual(ev[0]["to"], "running")
            self.assertIn("out of memory: the kernel killed 1 process at the memory limit (64 MiB)",
                          ev[0]["reason"])
            got = self.api.call("GET", f"/v1/sandboxes/{sid}")
            self.assertEqual(got["state"], "running")
            self.assertEqual(got["limits_hit"]["oom_kills"], 1)
            self.assertEqual(got["limits_hit"]["pids_max_hits"], 0)
            self.assertIsNotNone(got["limits_hit"]["last_at"])
            self.assertGreaterEqual(self.metric("oom_kill"), before + 1)
            out = self.cli("events", sid)
            line = [l for l in out.splitlines() if "out of memory" in l]
            self.assertEqual(len(line), 1, out)
            self.assertIn("the kernel killed 1 process at the memory limit (64 MiB)", line[0])
            # lifecycle rows say type "state"
            self.assertTrue(all(e["type"] == "state" for e in self.events(sid)
                                if e["type"] != "oom_kill"))

            # a loop of OOMs: counted, but no row more within the interval
            code, _, _, _ = self.api.exec(sid, ["sh", "-c", f"for i in 1 2 3 4 5; do {HOG}; done"])
            self.wait_for("6 OOM kills counted", lambda: self.api.call(
                "GET", f"/v1/sandboxes/{sid}")["limits_hit"]["oom_kills"] == 6)
            self.assertEqual(len(self.events(sid, "oom_kill")), 1)
            # the coalesced row comes once the interval (30 s) is over
            ev = self.wait_for("the coalesced row", lambda: (lambda e: e if len(e) == 2 else None)(
                self.events(sid, "oom_kill")), timeout=45)
            self.assertEqual(ev[1]["count"], 6)
            self.assertIn("the kernel killed 5 processes", ev[1]["reason"])

            # the counts survive a restart of the node (and are not counted twice)
            self.kill_and_wait_restarted("node")
            time.sleep(5)   # two polls of the new node
            got = self.api.call("GET", f"/v1/sandboxes/{sid}")
            self.assertEqual(got["limits_hit"]["oom_kills"], 6)
            self.assertEqual(len(self.events(sid, "oom_kill")), 2)
            code, out, _, _ = self.api.exec(sid, ["echo", "alive"])
            self.assertEqual((code, out), (0, b"alive\n"))
        finally:
            self.api.delete(sid)

    def test_pids_limit_event_and_exec_error(self):
        before = self.metric("pids_limit")
        s = self.api.create(limits={"pids": 20})
        sid = s["id"]
        try:
            # a bomb bounded by the limit: an inner shell forks sleeps until
            # a fork fails (busybox sh then exits); the outer one stays as a
            # sleep, so that a signal to its group reaches them all
            bomb = self.start(sid, "sh -c 'while :; do sleep 1000 & done'; exec sleep 1000")
            ev = self.wait_for("a pids_limit event", lambda: self.events(sid, "pids_limit"))
            self.assertGreaterEqual(ev[0]["count"], 1)
            self.assertIn("pids limit:", ev[0]["reason"])
            self.assertIn("refused at the limit of 20 processes", ev[0]["reason"])
            got = self.api.call("GET", f"/v1/sandboxes/{sid}")
            self.assertEqual(got["state"], "running")
            self.assertGreaterEqual(got["limits_hit"]["pids_max_hits"], 1)
            self.assertEqual(got["limits_hit"]["oom_kills"], 0)
            self.assertGreaterEqual(self.metric("pids_limit"), before + 1)
            self.assertIn("pids limit:", self.cli("events", sid))

            # the one pid the inner shell gave back, taken
            holder = self.start(sid, "exec sleep 1000")
            # an exec at the limit says which limit
            with self.assertRaises(ApiError) as cm:
                self.api.exec(sid, ["echo", "hi"])
            self.assertEqual(cm.exception.status, 409, cm.exception)
            body = json.loads(cm.exception.body)
            self.assertEqual(body["error"]["code"], "pids_limit")
            self.assertIn("the sandbox has reached its pids limit (20)",
                          body["error"]["message"])

            # the bomb killed (its group: the shell and its sleeps), exec works again
            for pid in (bomb, holder):
                self.api.call("POST", f"/v1/sandboxes/{sid}/processes/{pid}/signal",
                              {"signal": 9})

            def works():
                try:
                    return self.api.exec(sid, ["echo", "again"])[1] == b"again\n"
                except ApiError:
                    return False
            self.wait_for("an exec after the bomb", works)
            self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{sid}")["state"], "running")
        finally:
            self.api.delete(sid)

    def test_oom_of_the_guest_agent_fails_the_sandbox(self):
        # no scheduled snapshot: with one, the node would recover it instead
        s = self.api.create(limits={"memory_mb": 64}, snapshots={"disk_interval_s": 0})
        sid = s["id"]
        try:
            # make the guest agent (PID 1 in the sandbox) the OOM killer's
            # choice: anyone may raise a process's oom_score_adj
            code, out, err, _ = self.api.exec(sid, ["sh", "-c",
                                                    "echo 1000 > /proc/1/oom_score_adj && "
                                                    "cat /proc/1/oom_score_adj"])
            self.assertEqual((code, out), (0, b"1000\n"), err)
            # eight hogs of 16 MiB each (busybox dd holds its buffer while it
            # copies), back at oom_score_adj 0 (a child inherits its parent's,
            # and anyone may lower theirs back to 0): each is far below the
            # agent's score
            try:
                self.api.exec(sid, ["sh", "-c", "echo 0 > /proc/self/oom_score_adj; "
                                    "for i in 1 2 3 4 5 6 7 8; do dd if=/dev/zero"
                                    " of=/dev/null bs=16M count=1000000 & done; wait"],
                              timeout_s=60)
            except (ApiError, OSError):
                pass   # the guest went away under the exec
            try:
                got = self.wait_for("the sandbox failed", lambda: (lambda g: g if g.get(
                    "error") else None)(self.api.call("GET", f"/v1/sandboxes/{sid}")))
            except AssertionError:
                print(self.server.log()[-6000:])
                print(self.events(sid))
                raise
            self.assertEqual(got["state"], "failed")
            self.assertIn("out of memory: the kernel's OOM killer ended the sandbox's guest agent",
                          got["error"])
            self.assertIn("memory limit 64 MiB", got["error"])
            self.assertGreaterEqual(got["limits_hit"]["oom_kills"], 1)
            fails = [e for e in self.events(sid) if e["to"] == "failed"]
            self.assertEqual(len(fails), 1)
            self.assertIn("out of memory", fails[0]["reason"])
        finally:
            self.api.delete(sid)


if __name__ == "__main__":
    main()
