"""The Python SDK (sdk/python, package `airlock`) against a real `airlockd up`
on ns: every method of its surface, a stream cut in the middle and resumed by
offset (through a loopback proxy that breaks the first exec connection), a
create whose answer is lost and retried with the same Idempotency-Key, file
watch events, errors mapped to their exception types (401, 404, 409, 422,
429, timeouts), and Sandbox.list over 250 sandboxes."""
import json
import os
import socket
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

import harness
from harness import AirlockTestCase, main

sys.path.insert(0, os.path.join(harness.SRC, "sdk", "python"))
import airlock  # noqa: E402
from airlock import Sandbox  # noqa: E402

TEMPLATE = "busybox"


class CutProxy:
    """A loopback TCP proxy to the api. The first connection whose request
    bytes contain `match` gets only `cut_after` bytes of the answer (0: none)
    and is then closed both ways; every other connection passes whole.
    `requests` holds the first line of each connection's first request."""

    def __init__(self, target_port, match, cut_after):
        self.target_port = target_port
        self.match = match.encode()
        self.cut_after = cut_after
        self.cut_done = False
        self.requests = []
        self.lock = threading.Lock()
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.socks = []
        self.closed = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.target_port))
            with self.lock:
                self.socks += [c, u]
                if self.closed:
                    break
            state = {"cut": False, "sent": 0, "seen": b""}
            threading.Thread(target=self._up, args=(c, u, state), daemon=True).start()
            threading.Thread(target=self._down, args=(u, c, state), daemon=True).start()

    def _up(self, c, u, state):
        first = True
        while True:
            try:
                d = c.recv(65536)
            except OSError:
                d = b""
            if not d:
                break
            if first:
                with self.lock:
                    self.requests.append(d.split(b"\r\n", 1)[0].decode(errors="replace"))
                first = False
            state["seen"] += d[:4096]
            with self.lock:
                if not self.cut_done and self.match in state["seen"]:
                    self.cut_done = state["cut"] = True
            try:
                u.sendall(d)
            except OSError:
                break
        self._shut(u)

    def _down(self, u, c, state):
        while True:
            try:
                d = u.recv(65536)
            except OSError:
                d = b""
            if not d:
                break
            if state["cut"]:
                room = self.cut_after - state["sent"]
                if len(d) >= room:
                    try:
                        c.sendall(d[:max(0, room)])
                    except OSError:
                        pass
                    self._shut(c)
                    self._shut(u)
                    return
                state["sent"] += len(d)
            try:
                c.sendall(d)
            except OSError:
                break
        self._shut(c)

    @staticmethod
    def _shut(s):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self):
        with self.lock:
            self.closed = True
        self._shut(self.lsock)
        self.lsock.close()
        self.thread.join(5)
        with self.lock:
            for s in self.socks:
                self._shut(s)
                s.close()


class SdkTest(AirlockTestCase):
    # 250 creates for the pagination test: no throttling of this instance's keys.
    extra_args = ("--set", "rate_per_s=100000", "--set", "rate_burst=100000",
                  "--set", "suspend_after_idle=0", "--set", "max_sandboxes=400")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.url = f"http://{cls.server.addr}"
        cls.kw = {"api_url": cls.url, "api_key": cls.server.admin_key}

    def create(self, **kw):
        args = dict(self.kw)
        args.update(kw)
        args.setdefault("template", TEMPLATE)
        if harness.BACKEND:
            args.setdefault("backend", harness.BACKEND)
        sb = Sandbox.create(**args)
        self.addCleanup(sb.kill)
        return sb

    def tenant_kw(self, name):
        _, client = self.new_tenant(name)
        return {"api_url": self.url, "api_key": client.key}

    # ---- sandbox lifecycle ----------------------------------------------

    def test_create_with_block_info_and_connect(self):
        with Sandbox.create(template=TEMPLATE, env={"GREETING": "hi"},
                            metadata={"team": "sdk"}, timeout=600, network="allow-all",
                            limits={"memory_mb": 64}, idle_timeout_s=0, **self.kw) as sb:
            self.assertEqual(sb.state, "running")
            self.assertEqual(sb.data["metadata"], {"team": "sdk"})
            self.assertEqual(sb.data["timeout_s"], 600)
            self.assertEqual(sb.data["limits"]["memory_mb"], 64)
            self.assertEqual(sb.commands.run("echo $GREETING").stdout, "hi\n")
            info = sb.info()
            self.assertEqual(info["id"], sb.id)
            self.assertIs(sb.refresh(), sb)
            again = Sandbox.connect(sb.id, **self.kw)
            self.assertEqual((again.id, again.state), (sb.id, "running"))
            sid = sb.id
        # the with block deleted it
        status, _, _ = self.api.raw("GET", f"/v1/sandboxes/{sid}")
        self.assertEqual(status, 404)
        self.assertTrue(sb.kill())  # a deleted sandbox: DELETE is 204 again
        ghost = Sandbox(dict(info, id="sb-0000000000000000"), airlock.Transport(**self.kw))
        self.assertFalse(ghost.kill())
        with self.assertRaises(airlock.NotFoundError):
            ghost.delete()

    def test_connection_settings(self):
        """Arguments, then AIRLOCK_API_URL/AIRLOCK_API_KEY, then the CLI's
        config file."""
        saved = {k: os.environ.pop(k, None) for k in
                 ("AIRLOCK_API_URL", "AIRLOCK_API_KEY", "AIRLOCK_URL", "AIRLOCK_CONFIG")}
        tmp = tempfile.mkdtemp(prefix="airlock-sdk-cfg-")
        try:
            cfg = os.path.join(tmp, "cli.json")
            with open(cfg, "w") as f:
                json.dump({"url": self.url, "api_key": self.server.admin_key}, f)
            os.environ["AIRLOCK_CONFIG"] = cfg
            t = airlock.Transport()
            self.assertEqual((t.api_url, t.api_key), (self.url, self.server.admin_key))
            list(Sandbox.list())  # works on the config file alone
            os.environ["AIRLOCK_API_URL"] = "http://127.0.0.1:1/"
            os.environ["AIRLOCK_API_KEY"] = "env-key"
            t = airlock.Transport()
            self.assertEqual((t.api_url, t.api_key), ("http://127.0.0.1:1", "env-key"))
            t = airlock.Transport(api_url=self.url, api_key="arg-key")
            self.assertEqual((t.api_url, t.api_key), (self.url, "arg-key"))
            with self.assertRaises(airlock.AuthenticationError) as cm:
                list(Sandbox.list(api_url=self.url))   # the env's key
            self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthorized"))
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v
            os.unlink(cfg)
            os.rmdir(tmp)

    def test_pause_resume_suspend_restore(self):
        sb = self.create()
        sb.files.write("/keep.txt", "kept")
        self.assertEqual(sb.pause().state, "paused")
        self.assertEqual(sb.info()["state"], "paused")
        self.assertEqual(sb.resume().state, "running")
        sb.pause()
        self.assertEqual(Sandbox.connect(sb.id, **self.kw).state, "running")  # connect resumes
        self.assertEqual(sb.suspend().state, "suspended")
        self.assertTrue(sb.data["suspended_bytes"] > 0)
        self.assertEqual(sb.restore().state, "running")
        self.assertEqual(sb.files.read("/keep.txt"), "kept")
        sb.suspend()
        self.assertEqual(sb.resume().state, "running")  # resume restores a suspended one
        reasons = [e["reason"] for e in sb.events()]
        self.assertIn("paused by client", reasons)

    # ---- commands -------------------------------------------------------

    def test_commands_run(self):
        sb = self.create(env={"FROM_SB": "sb"})
        r = sb.commands.run("echo out; echo err >&2; exit 3")
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.signal), ("out\n", "err\n", 3, None))
        self.assertFalse(r.ok)
        with self.assertRaises(airlock.CommandExitError) as cm:
            sb.commands.run("echo x; exit 4", check=True)
        self.assertEqual((cm.exception.exit_code, cm.exception.stdout), (4, "x\n"))
        self.assertEqual(sb.commands.run(["echo", "a b", "$HOME"]).stdout, "a b $HOME\n")
        r = sb.commands.run("pwd; echo $FROM_SB $MINE; id -u", cwd="/tmp", env={"MINE": "m"},
                            user=1000)
        self.assertEqual(r.stdout, "/tmp\nsb m\n1000\n")
        self.assertEqual(sb.commands.run("id -un", user="root").stdout, "root\n")
        outs, errs = [], []
        r = sb.commands.run("for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.1; done",
                            on_stdout=outs.append, on_stderr=errs.append)
        self.assertEqual("".join(outs), "o1\no2\no3\n")
        self.assertEqual("".join(errs), "e1\ne2\ne3\n")
        self.assertGreaterEqual(len(outs), 2)  # streamed, not one piece at the end
        # the sandbox kills it at the timeout: signal 9, exit code 128+9
        t0 = time.time()
        r = sb.commands.run("sleep 30", timeout=1)
        self.assertLess(time.time() - t0, 15)
        self.assertEqual((r.signal, r.exit_code), (9, 137))
        # a quiet socket past the read timeout reconnects instead of failing
        quiet = Sandbox.connect(sb.id, request_timeout=1, **self.kw)
        r = quiet.commands.run("sleep 2.5; echo late")
        self.assertEqual(r.stdout, "late\n")
        with self.assertRaises(airlock.InvalidRequestError):
            sb.commands.run(["/no/such/binary"])

    def test_commands_background(self):
        sb = self.create()
        got = []
        h = sb.commands.run("cat; echo done", background=True, stdin=True, on_stdout=got.append)
        self.assertIsInstance(h.pid, int)
        h.send_stdin("line one\n")
        h.send_stdin(b"line two\n", eof=True)
        r = h.wait(timeout=30)
        self.assertEqual(r.stdout, "line one\nline two\ndone\n")
        self.assertEqual("".join(got), r.stdout)
        self.assertEqual(h.exit_code, 0)
        # kill one
        h = sb.commands.run("sleep 300", background=True)
        with self.assertRaises(airlock.TimeoutError):
            h.wait(timeout=0.5)
        self.assertTrue(h.kill())
        r = h.wait(timeout=30)
        self.assertEqual(r.signal, 9)
        self.assertFalse(h.kill())  # already ended
        with self.assertRaises(airlock.CommandExitError):
            h.wait(check=True)
        # list, connect (replays from the start), kill by pid
        h = sb.commands.run("echo before; sleep 300", background=True)
        procs = {p["pid"]: p for p in sb.commands.list()}
        self.assertTrue(procs[h.pid]["running"])
        h.disconnect()
        again = sb.commands.connect(h.pid)
        deadline = time.time() + 10
        while again.stdout != "before\n" and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(again.stdout, "before\n")
        self.assertTrue(sb.commands.kill(h.pid))
        self.assertEqual(again.wait(timeout=30).signal, 9)
        self.assertFalse(procs[h.pid]["pty"])

    def test_stream_reconnect_loses_and_repeats_nothing(self):
        """The first exec connection is cut after 30000 bytes of its answer
        (mid-line); the SDK resumes with GET .../output?offset=N and the
        output is exactly the program's, in callbacks and in the result."""
        sb = self.create()
        n = 4000
        script = (f"i=0; while [ $i -lt {n} ]; do echo out-$i-xxxxxxxxxxxxxxxxxxxx; "
                  f"echo err-$i >&2; i=$((i+1)); done")
        want_out = "".join(f"out-{i}-xxxxxxxxxxxxxxxxxxxx\n" for i in range(n))
        want_err = "".join(f"err-{i}\n" for i in range(n))
        proxy = CutProxy(self.server.port, "/exec", 30000)
        try:
            via = Sandbox.connect(sb.id, api_url=proxy.url, api_key=self.server.admin_key)
            outs, errs = [], []
            h = via.commands.run(script, on_stdout=outs.append, on_stderr=errs.append,
                                 background=True)
            r = h.wait(timeout=120)
            self.assertTrue(proxy.cut_done)
            self.assertGreaterEqual(h.reconnects, 1)
            self.assertTrue(any("/output?offset=" in q and "stderr_offset=" in q
                                for q in proxy.requests), proxy.requests)
            self.assertEqual(r.exit_code, 0)
            self.assertEqual(r.stdout, want_out)
            self.assertEqual(r.stderr, want_err)
            self.assertEqual("".join(outs), want_out)
            self.assertEqual("".join(errs), want_err)
            self.assertEqual(r.dropped, [])
            # the same in the foreground, cut within its first answer bytes
            proxy.cut_done, proxy.cut_after = False, 2000
            r = via.commands.run(script)
            self.assertTrue(proxy.cut_done)
            self.assertEqual((r.stdout, r.stderr), (want_out, want_err))
        finally:
            proxy.close()

    def test_create_retried_with_one_idempotency_key(self):
        """The first create's answer is lost (the proxy closes the connection
        without a byte of it): the SDK retries with the same key and gets
        the same sandbox; only one exists."""
        kw = self.tenant_kw("idem")
        proxy = CutProxy(self.server.port, "POST /v1/sandboxes ", 0)
        try:
            sb = Sandbox.create(template=TEMPLATE, api_url=proxy.url, api_key=kw["api_key"],
                                backend=harness.BACKEND)
            # (deleted directly: the proxy is gone by then)
            self.addCleanup(Sandbox(sb.data, airlock.Transport(**kw)).kill)
            self.assertTrue(proxy.cut_done)
            self.assertEqual(sum(q.startswith("POST /v1/sandboxes ") for q in proxy.requests), 2)
        finally:
            proxy.close()
        self.assertEqual([s.id for s in Sandbox.list(**kw)], [sb.id])

    def test_pty(self):
        sb = self.create()
        data = bytearray()
        lock = threading.Lock()

        def on_data(b):
            with lock:
                data.extend(b)

        def wait_for(text):
            deadline = time.time() + 20
            while time.time() < deadline:
                with lock:
                    if text in data:
                        return
                time.sleep(0.05)
            self.fail(f"{text!r} not in {bytes(data)!r}")

        t = sb.pty.create(rows=24, cols=80, on_data=on_data)
        t.send_input("stty size\n")
        wait_for(b"24 80")
        t.resize(40, 100)
        t.send_input("stty size\n")
        wait_for(b"40 100")
        t.send_input("exit 5\n")
        self.assertEqual(t.wait(timeout=20).exit_code, 5)
        t = sb.pty.create(cmd=["sleep", "300"])
        self.assertTrue(t.kill())
        self.assertEqual(t.wait(timeout=20).signal, 9)
        self.assertTrue([p for p in sb.commands.list() if p["pid"] == t.pid][0]["pty"])

    # ---- files ----------------------------------------------------------

    def test_files(self):
        sb = self.create()
        f = sb.files
        f.write("/tmp/d/a.txt", "héllo")
        self.assertEqual(f.read("/tmp/d/a.txt"), "héllo")
        f.write("/tmp/d/b.bin", bytes(range(256)), mode=0o600)
        self.assertEqual(f.read("/tmp/d/b.bin", format="bytes"), bytes(range(256)))
        st = f.stat("/tmp/d/b.bin")
        self.assertEqual((st["type"], st["size"], st["mode"]), ("file", 256, "0600"))
        names = sorted((e["name"], e["path"], e["type"]) for e in f.list("/tmp/d"))
        self.assertEqual(names, [("a.txt", "/tmp/d/a.txt", "file"),
                                 ("b.bin", "/tmp/d/b.bin", "file")])
        self.assertTrue(f.exists("/tmp/d/a.txt"))
        self.assertFalse(f.exists("/tmp/d/nope"))
        f.rename("/tmp/d/a.txt", "/tmp/d/c.txt")
        self.assertFalse(f.exists("/tmp/d/a.txt"))
        self.assertEqual(f.read("/tmp/d/c.txt"), "héllo")
        f.make_dir("/tmp/d/x/y")
        self.assertEqual(f.stat("/tmp/d/x/y")["type"], "dir")
        with self.assertRaises(airlock.AirlockError):
            f.make_dir("/tmp/d/p/q", parents=False)
        f.remove("/tmp/d/c.txt")
        self.assertFalse(f.exists("/tmp/d/c.txt"))
        f.remove("/tmp/d", recursive=True)
        self.assertFalse(f.exists("/tmp/d"))
        with self.assertRaises(airlock.NotFoundError) as cm:
            f.read("/tmp/d/a.txt")
        self.assertEqual(cm.exception.status, 404)
        with open(os.path.join(harness.SRC, "README.md"), "rb") as src:
            f.write("/readme", src)
        self.assertEqual(sb.commands.run("wc -c < /readme").stdout.strip(),
                         str(os.path.getsize(os.path.join(harness.SRC, "README.md"))))

    def test_files_watch(self):
        sb = self.create()
        sb.files.make_dir("/tmp/w")
        w = sb.files.watch("/tmp/w", recursive=True)
        got = []

        def reader():
            for ev in w:
                got.append(ev)
                if ev["type"] == "remove":
                    return
        t = threading.Thread(target=reader)
        t.start()
        sb.files.write("/tmp/w/a", "1")
        sb.files.rename("/tmp/w/a", "/tmp/w/b")
        sb.files.remove("/tmp/w/b")
        t.join(20)
        w.stop()
        self.assertFalse(t.is_alive())
        kinds = [(e["type"], e.get("path")) for e in got]
        self.assertIn(("rename", "/tmp/w/b"), kinds)
        self.assertEqual(kinds[-1], ("remove", "/tmp/w/b"))
        self.assertTrue(any(k[1] == "/tmp/w/a" for k in kinds), kinds)
        self.assertFalse(w.broken)
        # callback form, and stop() from the main thread ends it
        events = []
        w = sb.files.watch("/tmp/w", on_event=events.append)
        sb.commands.run("mkdir /tmp/w/sub")
        deadline = time.time() + 20
        while not events and time.time() < deadline:
            time.sleep(0.05)
        w.stop()
        self.assertEqual(events[0], {"type": "create", "path": "/tmp/w/sub", "dir": True})
        with self.assertRaises(airlock.NotFoundError):
            sb.files.watch("/tmp/nope")
        # quiet for longer than the read timeout: the watch still waits; the
        # sandbox's end ends it cleanly (not broken)
        quiet = Sandbox.connect(sb.id, request_timeout=1, **self.kw)
        w = quiet.files.watch("/tmp/w")
        time.sleep(2.5)
        sb.commands.run("touch /tmp/w/late")
        ev = next(w)
        self.assertEqual((ev["type"], ev["path"]), ("create", "/tmp/w/late"))
        sb.kill()
        list(w)
        self.assertFalse(w.broken)

    # ---- snapshots, rollback, fork, network, ports ----------------------

    def test_snapshots_rollback_fork(self):
        sb = self.create()
        sb.files.write("/state", "one")
        snap = sb.snapshots.create(name="s1")
        self.assertEqual((snap["name"], snap["kind"]), ("s1", "disk"))
        sb.files.write("/state", "two")
        snap2 = sb.snapshots.create()
        self.assertEqual([s["id"] for s in sb.snapshots.list()], [snap["id"], snap2["id"]])
        self.assertEqual(sb.rollback("s1").state, "running")
        self.assertEqual(sb.files.read("/state"), "one")
        sb.rollback(snap2)
        self.assertEqual(sb.files.read("/state"), "two")
        sb.snapshots.delete(snap2)
        sb.snapshots.delete("s1")
        self.assertEqual(sb.snapshots.list(), [])
        with self.assertRaises(airlock.NotFoundError):
            sb.snapshots.delete("s1")
        if sb.data["backend"] == "ns":   # no memory checkpoint on ns: 501
            with self.assertRaises(airlock.NotSupportedError) as cm:
                sb.snapshots.create(kind="full")
            self.assertEqual(cm.exception.status, 501)
        else:
            full = sb.snapshots.create(kind="full")
            self.assertEqual(full["kind"], "full")
            sb.snapshots.delete(full)
        kids = sb.fork(2)
        for k in kids:
            self.addCleanup(k.kill)
        self.assertEqual(len(kids), 2)
        for k in kids:
            self.assertIsInstance(k, Sandbox)
            self.assertEqual((k.data["parent"], k.state), (sb.id, "running"))
            self.assertEqual(k.files.read("/state"), "two")
        k2 = sb.fork(from_snapshot=sb.snapshots.create(name="base"))
        self.addCleanup(k2[0].kill)
        self.assertEqual(k2[0].files.read("/state"), "two")

    def test_metrics(self):
        sb = self.create()
        sb.commands.run("dd if=/dev/zero of=/root/m bs=1M count=4 2>/dev/null; sync")
        m = sb.metrics()
        self.assertGreater(m["cpu_seconds"], 0)
        self.assertGreater(m["memory_bytes"], 0)
        self.assertGreaterEqual(m["disk_used_bytes"], 4 << 20)
        sb.kill()
        with self.assertRaises((airlock.NotFoundError, airlock.ConflictError)):
            sb.metrics()

    def test_network_and_ports(self):
        sb = self.create()
        net = sb.network.get()
        self.assertIn("addr", net)
        got = sb.network.set({"default": "deny", "allow": {"domains": ["example.com"]}})
        self.assertEqual(got["network"]["default"], "deny")
        self.assertEqual(got["network"]["allow"]["domains"], ["example.com"])
        self.assertEqual(sb.network.get()["network"], got["network"])
        self.assertIsInstance(sb.network.log(), list)
        with self.assertRaises(airlock.InvalidRequestError):
            sb.network.set({"default": "sideways"})
        sb.files.write("/www/index.html", "served")
        sb.commands.run("httpd -f -p 8080 -h /www", background=True)
        url = sb.get_url(8080)
        self.assertEqual(url, f"{self.url}/v1/sandboxes/{sb.id}/ports/8080/")
        deadline = time.time() + 20
        while True:
            req = urllib.request.Request(sb.get_url(8080, "index.html"),
                                         headers={"Authorization": "Bearer " +
                                                  self.server.admin_key})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    self.assertEqual(r.read(), b"served")
                    break
            except urllib.error.HTTPError as e:
                if e.code != 502 or time.time() > deadline:
                    raise
                time.sleep(0.1)
        tok = sb.port_token(8080, ttl_s=120)
        self.assertEqual((tok["port"], tok["sandbox_id"]), (8080, sb.id))
        self.assertTrue(tok["token"])
        with self.assertRaises(airlock.InvalidRequestError):
            sb.port_token(8080, ttl_s=0)

    # ---- errors ---------------------------------------------------------

    def test_errors(self):
        with self.assertRaises(airlock.NotFoundError) as cm:
            Sandbox.connect("sb-0000000000000000", **self.kw)
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        self.assertTrue(cm.exception.message)
        with self.assertRaises(airlock.NotFoundError):   # an id is one path segment
            Sandbox.connect("../sandboxes", **self.kw)
        sb = self.create()
        with self.assertRaises(airlock.ConflictError) as cm:
            sb.resume()
        self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.state),
                         (409, "conflict", "running"))
        with self.assertRaises(airlock.InvalidRequestError) as cm:
            self.create(limits={"pids": 5000})
        self.assertEqual((cm.exception.status, cm.exception.code), (422, "invalid_argument"))
        with self.assertRaises(airlock.InvalidRequestError) as cm:
            self.create(on_timeout="explode")
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(airlock.NotFoundError) as cm:
            self.create(template="no-such-template")
        self.assertEqual(cm.exception.code, "template_not_found")
        # a tenant quota: QuotaExceededError, an InvalidRequestError
        t, _ = self.new_tenant("quota1")
        k = self.api.call("POST", "/v1/keys", {"tenant": t["id"]})["key"]
        self.api.call("PUT", f"/v1/tenants/{t['id']}/quota", {"sandboxes": 1})
        tkw = {"api_url": self.url, "api_key": k}
        one = Sandbox.create(template=TEMPLATE, **tkw)
        try:
            with self.assertRaises(airlock.QuotaExceededError) as cm:
                Sandbox.create(template=TEMPLATE, **tkw)
            self.assertIsInstance(cm.exception, airlock.InvalidRequestError)
            self.assertEqual((cm.exception.status, cm.exception.code), (422, "quota_exceeded"))
        finally:
            one.kill()
        self.assertEqual(list(Sandbox.list(**tkw)), [])
        with self.assertRaises(airlock.AuthenticationError) as cm:
            Sandbox.connect(sb.id, api_url=self.url, api_key="wrong")
        self.assertEqual(cm.exception.status, 401)
        # nothing listens: APIConnectionError after the retries
        with self.assertRaises(airlock.APIConnectionError):
            Sandbox.connect(sb.id, api_url=f"http://127.0.0.1:{harness.free_port()}",
                            api_key="k", max_retries=1)
        # a server that never answers: TimeoutError within the timeout
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        try:
            t0 = time.time()
            with self.assertRaises(airlock.TimeoutError):
                Sandbox.connect(sb.id, api_url=f"http://127.0.0.1:{silent.getsockname()[1]}",
                                api_key="k", request_timeout=0.5, max_retries=0)
            self.assertLess(time.time() - t0, 5)
        finally:
            silent.close()

    # ---- list -----------------------------------------------------------

    def test_list_250_over_pages(self):
        import concurrent.futures
        kw = self.tenant_kw("list250")

        def one(i):
            return Sandbox.create(template=TEMPLATE, limits={"memory_mb": 32},
                                  metadata={"half": str(i % 2)}, **kw)
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            made = list(ex.map(one, range(250)))
        try:
            seen = [s.id for s in Sandbox.list(page_size=100, **kw)]
            self.assertEqual(len(seen), 250)
            self.assertEqual(sorted(seen), sorted(s.id for s in made))
            # the server's default page (100) is followed too
            self.assertEqual(len(list(Sandbox.list(**kw))), 250)
            odd = [s for s in Sandbox.list(metadata={"half": "1"}, page_size=30, **kw)]
            self.assertEqual(sorted(s.id for s in odd),
                             sorted(s.id for s in made if s.data["metadata"]["half"] == "1"))
            self.assertEqual(len(list(Sandbox.list(state="running", template=TEMPLATE, **kw))),
                             250)
            self.assertEqual(list(Sandbox.list(state="paused", **kw)), [])
        finally:
            with concurrent.futures.ThreadPoolExecutor(8) as ex:
                list(ex.map(lambda s: s.kill(), made))
        self.assertEqual(list(Sandbox.list(**kw)), [])


class SdkKeepAliveTest(unittest.TestCase):
    """The SDK's side alone, against a loopback server that answers with
    keep-alive and then closes the connection while it is idle (as the api
    does after 120 s): the next request, a POST that is never retried, goes
    out once, on a fresh connection, and succeeds."""

    def test_closed_idle_connection_is_not_reused(self):
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        seen = []

        def serve():
            for _ in range(2):
                c, _ = lsock.accept()
                data = b""
                while b"\r\n\r\n" not in data:
                    data += c.recv(65536)
                head, _, rest = data.partition(b"\r\n\r\n")
                n = int([l.split(b":")[1] for l in head.split(b"\r\n")
                         if l.lower().startswith(b"content-length:")][0]) \
                    if b"content-length" in head.lower() else 0
                while len(rest) < n:
                    rest += c.recv(65536)
                seen.append(head.split(b"\r\n")[0].decode())
                body = b'{"id":"sb-1","state":"running"}'
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                time.sleep(0.1)
                c.close()   # idle keep-alive connection closed by the server
        th = threading.Thread(target=serve, daemon=True)
        th.start()
        try:
            t = airlock.Transport(api_url=f"http://127.0.0.1:{lsock.getsockname()[1]}",
                                  api_key="k", max_retries=0)
            sb = Sandbox(t.call("GET", "/v1/sandboxes/sb-1"), t)
            time.sleep(0.5)
            self.assertEqual(sb.pause().state, "running")   # POST, retry=False
            th.join(5)
            self.assertEqual(seen, ["GET /v1/sandboxes/sb-1 HTTP/1.1",
                                    "POST /v1/sandboxes/sb-1/pause HTTP/1.1"])
        finally:
            lsock.close()


class SdkRateLimitTest(AirlockTestCase):
    """429 on an instance whose keys get 1 request/s (burst 2)."""
    extra_args = ("--set", "rate_per_s=1", "--set", "rate_burst=2")

    def test_rate_limited(self):
        kw = {"api_url": f"http://{self.server.addr}", "api_key": self.server.admin_key}
        with self.assertRaises(airlock.RateLimitError) as cm:
            for _ in range(10):
                list(Sandbox.list(max_retries=0, **kw))
        e = cm.exception
        self.assertEqual((e.status, e.code), (429, "rate_limited"))
        self.assertGreaterEqual(e.retry_after, 1)
        # with retries the SDK waits out Retry-After and gets through
        t0 = time.time()
        self.assertEqual(list(Sandbox.list(**kw)), [])
        self.assertGreaterEqual(time.time() - t0, 0.5)


if __name__ == "__main__":
    main()
