"""Lifecycle through the real API, on either backend (AIRLOCK_E2E_BACKEND=vm):
pause and resume, connect, transparent resume on exec / files, output that
keeps flowing across a pause with nothing lost, no CPU while paused, 409 on
every illegal transition the API can reach, and delete of a paused sandbox."""
import base64
import os
import signal
import subprocess
import threading
import time

from harness import BACKEND, CLI, AirlockTestCase, ApiError, cgroup_parent, main

COUNTER = ["sh", "-c", "i=0; while :; do echo $i; i=$((i+1)); sleep 0.1; done"]
BUSY = ["sh", "-c", "while :; do :; done"]


class LifecycleTest(AirlockTestCase):
    def setUp(self):
        self.sbx = self.api.create(template="busybox")
        self.sid = self.sbx["id"]

    def tearDown(self):
        try:
            self.api.delete(self.sid)
        except ApiError:
            pass

    # ---- helpers ------------------------------------------------------------

    def post(self, op, sid=None, expect=(200,)):
        return self.api.call("POST", f"/v1/sandboxes/{sid or self.sid}/{op}", {}, expect=expect)

    def state(self, sid=None):
        return self.api.call("GET", f"/v1/sandboxes/{sid or self.sid}")["state"]

    def conflict(self, state, method, path, body=None):
        """The request must answer 409 conflict naming `state`."""
        status, data, _ = self.api.raw(method, path, body if body is not None else {})
        self.assertEqual(status, 409, f"{method} {path}: {data[:300]!r}")
        import json
        j = json.loads(data)
        self.assertEqual(j["error"]["code"], "conflict")
        self.assertIn(state, j["error"]["message"])
        self.assertEqual(j.get("state"), state, data)

    def cgroup_dir(self, ctrl):
        parent = cgroup_parent(self.server.dir)
        v2 = f"/sys/fs/cgroup/{parent}/{self.sid}"
        if os.path.exists(os.path.join(v2, "cgroup.freeze")):
            return v2
        return f"/sys/fs/cgroup/{ctrl}/{parent}/{self.sid}"

    def cpu_seconds(self):
        """CPU time used so far by everything in the sandbox's cgroup: the
        jail's processes (ns) or its QEMU (vm). v2: cpu.stat usage_usec. v1
        here has no per-sandbox cpuacct group, so sum utime+stime of every
        process in its freezer cgroup (the busy loop never exits, so nothing
        is lost to reaping)."""
        d = self.cgroup_dir("freezer")
        stat = os.path.join(d, "cpu.stat")
        if not d.startswith("/sys/fs/cgroup/freezer/") and os.path.exists(stat):
            with open(stat) as f:
                for line in f:
                    k, v = line.split()
                    if k == "usage_usec":
                        return int(v) / 1e6
        tck = os.sysconf("SC_CLK_TCK")
        total = 0
        with open(os.path.join(d, "cgroup.procs")) as f:
            pids = f.read().split()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
            except OSError:
                pass
        return total / tck

    def start_bg(self, cmd):
        """Start cmd, drop the stream at once (the process carries on)."""
        ev = self.api.stream("POST", f"/v1/sandboxes/{self.sid}/exec", {"cmd": cmd})
        pid = next(ev)["pid"]
        ev.close()
        return pid

    def kill(self, pid):
        self.api.call("POST", f"/v1/sandboxes/{self.sid}/processes/{pid}/signal",
                      {"signal": "KILL"}, expect=(204, 409))

    @staticmethod
    def contiguous(events):
        """stdout bytes of events, checking each chunk starts where the last ended."""
        out, off = b"", None
        for ev in events:
            if ev["type"] != "stdout":
                continue
            data = base64.b64decode(ev["data"])
            if off is not None:
                assert ev["offset"] == off, f"offset {ev['offset']} != expected {off}"
            else:
                off = ev["offset"]
            off += len(data)
            out += data
        return out, off

    def check_counts(self, out, first=0):
        nums = [int(x) for x in out.decode().split()]
        self.assertTrue(nums, "no output")
        self.assertEqual(nums, list(range(first, first + len(nums))), f"gap in {nums}")
        return nums

    # ---- pause / resume -----------------------------------------------------

    def test_pause_resume_states(self):
        got = self.post("pause")
        self.assertEqual(got["state"], "paused")
        self.assertEqual(got["id"], self.sid)
        self.assertEqual(self.state(), "paused")
        listed = self.api.call("GET", "/v1/sandboxes?state=paused")["sandboxes"]
        self.assertIn(self.sid, [s["id"] for s in listed])
        got = self.post("resume")
        self.assertEqual(got["state"], "running")
        code, out, _, _ = self.api.exec(self.sid, ["echo", "ok"])
        self.assertEqual((code, out), (0, b"ok\n"))
        node = self.api.call("GET", "/v1/node")
        caps = {b["name"]: b["caps"] for b in node["backends"]}
        self.assertTrue(caps[BACKEND or node["default_backend"]]["pause"])

    def test_output_flows_across_pause(self):
        events, stamps, done = [], [], threading.Event()
        stream = self.api.stream("POST", f"/v1/sandboxes/{self.sid}/exec", {"cmd": COUNTER})

        def reader():
            try:
                for ev in stream:
                    stamps.append(time.monotonic())
                    events.append(ev)
            finally:
                done.set()

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        deadline = time.time() + 30
        while sum(e["type"] == "stdout" for e in events) < 5 and time.time() < deadline:
            time.sleep(0.02)
        pid = events[0]["pid"]
        self.post("pause")
        paused_at = time.monotonic()
        time.sleep(1.2)
        # Output in flight when the freeze landed may still arrive just
        # after; nothing may arrive after that while paused.
        quiet_from = paused_at + 0.3
        resume_at = time.monotonic()
        late = [e for e, s in zip(list(events), list(stamps)) if quiet_from < s < resume_at]
        self.assertEqual(late, [], "output arrived while paused")
        n_before = sum(e["type"] == "stdout" for e in events)
        self.post("resume")
        deadline = time.time() + 30
        while sum(e["type"] == "stdout" for e in events) < n_before + 5 and time.time() < deadline:
            time.sleep(0.02)
        self.assertGreaterEqual(sum(e["type"] == "stdout" for e in events), n_before + 5,
                                "the stream did not continue after resume")
        self.kill(pid)
        self.assertTrue(done.wait(30))
        self.assertEqual(events[-1]["type"], "exit")
        out, _ = self.contiguous(events)
        self.check_counts(out)

    def test_reconnect_after_resume_misses_nothing(self):
        stream = self.api.stream("POST", f"/v1/sandboxes/{self.sid}/exec", {"cmd": COUNTER})
        seen = [next(stream)]
        pid = seen[0]["pid"]
        for ev in stream:
            seen.append(ev)
            if sum(e["type"] == "stdout" for e in seen) >= 3:
                break
        stream.close()  # the client goes away, then the sandbox is paused
        out1, next_off = self.contiguous(seen)
        self.post("pause")
        time.sleep(0.5)
        self.post("resume")
        time.sleep(0.5)
        got = []
        for ev in self.api.stream("GET", f"/v1/sandboxes/{self.sid}/processes/{pid}/output"
                                         f"?offset={next_off}"):
            self.assertNotEqual(ev["type"], "dropped")
            got.append(ev)
            if len(self.contiguous(got)[0].split()) >= 10:
                break
        self.assertEqual(got[0]["offset"], next_off)
        out2, _ = self.contiguous(got)
        self.check_counts(out1 + out2)
        self.kill(pid)

    def test_paused_uses_no_cpu(self):
        pid = self.start_bg(BUSY)
        time.sleep(0.5)
        c0 = self.cpu_seconds()
        time.sleep(1.0)
        running = self.cpu_seconds() - c0
        self.assertGreater(running, 0.3, "the busy loop does not show as CPU use")
        self.post("pause")
        if (BACKEND or "ns") == "ns":
            d = self.cgroup_dir("freezer")
            f = os.path.join(d, "freezer.state")
            if not os.path.exists(f):
                f = os.path.join(d, "cgroup.events")
            with open(f) as fh:
                st = fh.read()
            self.assertTrue(st.strip() == "FROZEN" or "frozen 1" in st, st)
        time.sleep(0.2)
        p0 = self.cpu_seconds()
        time.sleep(2.0)
        paused = self.cpu_seconds() - p0
        # ns: frozen tasks get no CPU at all (tick granularity aside). vm: a
        # stopped QEMU's main loop still wakes for its timers; allow 5%.
        eps = 0.03 if (BACKEND or "ns") == "ns" else 0.1
        print(f"\n  cpu: {running:.2f} s in 1 s running, {paused:.3f} s in 2 s paused",
              flush=True)
        self.assertLess(paused, eps, f"{paused:.3f} s of CPU while paused")
        self.post("resume")
        time.sleep(0.2)
        r0 = self.cpu_seconds()
        time.sleep(1.0)
        self.assertGreater(self.cpu_seconds() - r0, 0.3, "no CPU after resume")
        self.kill(pid)

    # ---- transparent resume and connect ---------------------------------------

    def test_exec_resumes_paused(self):
        self.post("pause")
        code, out, _, _ = self.api.exec(self.sid, ["sh", "-c", "echo resumed"])
        self.assertEqual((code, out), (0, b"resumed\n"))
        self.assertEqual(self.state(), "running")

    def test_files_resume_paused(self):
        self.post("pause")
        self.api.call("PUT", f"/v1/sandboxes/{self.sid}/files?path=/tmp/p.txt", b"paused-write",
                      headers={"Content-Type": "application/octet-stream"})
        self.assertEqual(self.state(), "running")
        self.post("pause")
        data = self.api.call("GET", f"/v1/sandboxes/{self.sid}/files?path=/tmp/p.txt")
        self.assertEqual(data, b"paused-write")
        self.assertEqual(self.state(), "running")

    def test_process_signal_resumes_paused(self):
        pid = self.start_bg(["sleep", "1000"])
        self.post("pause")
        self.api.call("POST", f"/v1/sandboxes/{self.sid}/processes/{pid}/signal",
                      {"signal": "KILL"}, expect=(204,))
        self.assertEqual(self.state(), "running")
        evs = list(self.api.stream("GET", f"/v1/sandboxes/{self.sid}/processes/{pid}/output"))
        self.assertEqual(evs[-1], {"type": "exit", "signal": 9})

    def test_connect(self):
        got = self.post("connect")
        self.assertEqual(got["state"], "running")
        self.assertEqual(got["id"], self.sid)
        pid = self.start_bg(COUNTER)
        self.post("pause")
        got = self.post("connect")
        self.assertEqual(got["state"], "running")
        # Ready to use: the process carries on and exec works at once.
        procs = self.api.call("GET", f"/v1/sandboxes/{self.sid}/processes")["processes"]
        self.assertTrue([p for p in procs if p["pid"] == pid and p["running"]])
        code, out, _, _ = self.api.exec(self.sid, ["echo", "hi"])
        self.assertEqual((code, out), (0, b"hi\n"))
        self.kill(pid)

    def test_cli(self):
        cfg = os.path.join(self.server.dir, "cli.json")

        def cli(*args):
            return subprocess.run([CLI, "--config", cfg] + list(args), capture_output=True,
                                  text=True, timeout=60)

        r = cli("pause", self.sid)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("paused", r.stdout)
        r = cli("pause", self.sid)
        self.assertEqual(r.returncode, 125)   # the API's 409
        self.assertIn("conflict", r.stderr)
        r = cli("--json", "resume", self.sid)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('"state":"running"', r.stdout.replace(" ", ""))
        r = cli("connect", self.sid)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("running", r.stdout)

    # ---- 409 on illegal transitions -----------------------------------------

    def test_conflicts_running_and_paused(self):
        base = f"/v1/sandboxes/{self.sid}"
        self.conflict("running", "POST", base + "/resume")
        self.post("pause")
        self.conflict("paused", "POST", base + "/pause")
        self.post("resume")
        self.conflict("running", "POST", base + "/resume")

    def test_conflicts_failed(self):
        # Kill the jail from the host: the guest channel closes and the
        # sandbox fails.
        d = self.cgroup_dir("freezer")
        with open(os.path.join(d, "cgroup.procs")) as f:
            for pid in f.read().split():
                os.kill(int(pid), signal.SIGKILL)
        deadline = time.time() + 30
        while self.state() != "failed" and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.state(), "failed")
        base = f"/v1/sandboxes/{self.sid}"
        for op in ("pause", "resume", "connect", "exec"):
            body = {"cmd": ["true"]} if op == "exec" else {}
            self.conflict("failed", "POST", f"{base}/{op}", body)
        self.conflict("failed", "GET", f"{base}/files/stat?path=/")
        self.api.delete(self.sid)

    def test_conflicts_deleted(self):
        self.api.delete(self.sid)
        base = f"/v1/sandboxes/{self.sid}"
        for op in ("pause", "resume", "connect", "exec"):
            body = {"cmd": ["true"]} if op == "exec" else {}
            self.conflict("deleted", "POST", f"{base}/{op}", body)
        self.conflict("deleted", "GET", f"{base}/files/stat?path=/")
        with self.assertRaises(ApiError) as cm:
            self.api.call("GET", base)
        self.assertEqual(cm.exception.status, 404)

    # ---- restart -----------------------------------------------------------------

    def test_node_restart_while_paused(self):
        # kill -9 the node (our own server's, by pid) while a sandbox is
        # paused: the restarted node thaws it to re-adopt it and pauses it
        # again (both recorded); an exec then resumes it, and the process
        # carried on from where it was.
        pid = self.start_bg(COUNTER)
        time.sleep(0.5)
        self.post("pause")
        self.kill_and_wait_restarted("node")
        self.assertEqual(self.state(), "paused")
        reasons = [e["reason"] for e in self.api.call("GET", f"/v1/sandboxes/{self.sid}/events")
                   ["events"]]
        self.assertIn("resumed to re-adopt after restart", reasons)
        self.assertIn("paused again after restart", reasons)
        code, out, _, _ = self.api.exec(self.sid, ["sh", "-c", "echo back"])
        self.assertEqual((code, out), (0, b"back\n"))
        # The process table did not survive the node, but the process did.
        code, out, _, _ = self.api.exec(self.sid, ["sh", "-c", "ps | grep -c '[i]=0'"])
        self.assertEqual(code, 0)
        self.assertGreaterEqual(int(out.decode().strip() or 0), 1)

    # ---- delete -----------------------------------------------------------------

    def test_delete_paused(self):
        self.start_bg(BUSY)
        self.post("pause")
        self.assertTrue(any(self.sid in c for c in self.cgroups()))
        self.api.delete(self.sid)
        self.assertFalse(any(self.sid in c for c in self.cgroups()), "cgroup left")
        self.assertFalse(any(self.sid in l for l in self.subvolumes()), "subvolume left")
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/cmdline", "rb") as f:
                        self.assertNotIn(self.sid.encode(), f.read(), f"process {d} left")
                except OSError:
                    pass


if __name__ == "__main__":
    main()
