"""Crash recovery: kill -9 the node daemon and it re-adopts its sandboxes;
kill -9 everything and restart, and every sandbox is re-adopted or cleanly
failed with a reason, with nothing leaked."""
import os
import signal
import subprocess
import time

from harness import AirlockTestCase, Server, main


class RestartTest(AirlockTestCase):
    def wait_health(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                st, _, _ = self.api.raw("GET", "/v1/sandboxes")
                if st == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.fail("server did not answer after restart:\n" + self.server.log())

    def test_kill_node_readopts(self):
        s = self.api.create(template="busybox")
        self.api.exec(s["id"], ["sh", "-c", "echo before > /work/f"])
        old = self.server.pid_of("node")
        os.kill(old, signal.SIGKILL)
        deadline = time.time() + 30
        while time.time() < deadline and self.server.pid_of("node") == old:
            time.sleep(0.05)
        self.wait_health()
        time.sleep(0.5)
        got = self.api.call("GET", f"/v1/sandboxes/{s['id']}")
        self.assertEqual(got["state"], "running")
        code, out, _, _ = self.api.exec(s["id"], ["cat", "/work/f"])
        self.assertEqual(out, b"before\n")
        self.api.delete(s["id"])

    def test_kill_everything(self):
        s = self.api.create(template="busybox")
        # Freeze the supervisor so it cannot restart what we kill, kill the
        # roles, then the supervisor: every process dies by SIGKILL, none sees
        # a SIGTERM (the roles' parent-death signal fires only once `up` is
        # gone, and by then they are dead).
        up = self.server.proc.pid
        pids = [self.server.pid_of(r) for r in ("api", "node", "nodemgr")]
        os.kill(up, signal.SIGSTOP)
        for p in pids:
            os.kill(p, signal.SIGKILL)
        os.kill(up, signal.SIGKILL)
        self.server.proc.wait()
        deadline = time.time() + 10
        while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
            time.sleep(0.05)
        self.server.start()
        self.api = self.server.client()
        got = self.api.call("GET", f"/v1/sandboxes/{s['id']}")
        self.assertIn(got["state"], ("running", "failed"))
        if got["state"] == "failed":
            self.assertTrue(got.get("error"))
        else:
            code, _, _, _ = self.api.exec(s["id"], ["true"])
            self.assertEqual(code, 0)
        # no process of the old jail survives: its cgroup has no tasks
        self.api.delete(s["id"])
        self.assertFalse(any(s["id"] in l for l in self.subvolumes()))
        self.assertFalse(any(s["id"] in c for c in self.cgroups()))


if __name__ == "__main__":
    main()
