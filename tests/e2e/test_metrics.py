"""Metrics and logs (issue 19, item 2): GET /metrics's warm-pool, gateway-byte
and snapshot-byte families move by exactly what the test did;
GET /v1/sandboxes/{id}/metrics and `airlock top --once` show a sandbox's CPU,
memory, disk and network use; a request id follows a request through the
api, node and nodemgr logs; `--log-format json` gives one JSON object a line.

The network part uses a test "world" as test_network.py does: a network
namespace joined to the host by a veth, with a raw HTTP server in it that
records the exact bytes it read and wrote, so the gateway's byte counters can
be checked to the byte. The gateway resolves the test name to it
(gateway_hosts) and the operator allows its /24 (network_allow_private_cidrs).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import harness
from harness import BACKEND, CLI, AirlockTestCase, Client, main
from test_ops import parse_metrics

SUB = 100 + (os.getpid() + 37) % 100
NET = f"10.252.{SUB}"
HOST_IP, WORLD_IP = f"{NET}.1", f"{NET}.2"
NS = f"almt-{os.getpid()}"
VETH = f"almt{os.getpid() % 100000}"
BLOB = 1 << 20   # bytes of the body the world serves

# One request per connection: read the head, answer a fixed response
# (BLOB bytes of body), close; note "<read> <written>" for each.
WORLD = r'''
import socket, sys, threading
ip, logpath, blob = sys.argv[1], sys.argv[2], int(sys.argv[3])
lock = threading.Lock()
def note(line):
    with lock, open(logpath, "a") as f:
        f.write(line + "\n")
body = b"x" * blob
resp = (b"HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % blob) + body
def one(c):
    with c:
        got = b""
        while b"\r\n\r\n" not in got:
            d = c.recv(65536)
            if not d:
                break
            got += d
        c.sendall(resp)
        c.shutdown(socket.SHUT_WR)
        while c.recv(65536):
            pass
        note("conn %d %d" % (len(got), len(resp)))
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((ip, 80))
s.listen(64)
note("ready")
while True:
    c, _ = s.accept()
    threading.Thread(target=one, args=(c,), daemon=True).start()
'''

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def run(*cmd, check=True):
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


class World:
    """The namespace, its veth and the HTTP server; removed by stop()."""

    def __init__(self):
        self.proc = None
        self.tmp = tempfile.mkdtemp(prefix="airlock-mt-")
        self.log = os.path.join(self.tmp, "world.log")

    def start(self):
        run("ip", "netns", "add", NS)
        run("ip", "link", "add", VETH, "type", "veth", "peer", "name", "w0", "netns", NS)
        run("ip", "addr", "add", f"{HOST_IP}/24", "dev", VETH)
        run("ip", "link", "set", VETH, "up")
        run("ip", "netns", "exec", NS, "ip", "addr", "add", f"{WORLD_IP}/24", "dev", "w0")
        run("ip", "netns", "exec", NS, "ip", "link", "set", "w0", "up")
        run("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
        with open(os.path.join(self.tmp, "world.py"), "w") as f:
            f.write(WORLD)
        self.proc = harness.start_world(
            NS, [sys.executable, os.path.join(self.tmp, "world.py"), WORLD_IP, self.log, str(BLOB)],
            self.log)

    def conns(self):
        """[(bytes read, bytes written)] of each finished connection."""
        with open(self.log) as f:
            return [tuple(map(int, l.split()[1:])) for l in f if l.startswith("conn ")]

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        run("ip", "link", "del", VETH, check=False)
        run("ip", "netns", "del", NS, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


class WorldTestCase(AirlockTestCase):
    """A server whose gateway reaches the world as world.test."""
    extra_args = ("--set", f"network_allow_private_cidrs={NET}.0/24",
                  "--set", f"gateway_hosts=world.test={WORLD_IP}")
    world = None

    @classmethod
    def setUpClass(cls):
        cls.world = World()
        try:
            cls.world.start()
            super().setUpClass()
        except Exception:
            cls.world.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.world.stop()

    def sh(self, api, sid, script):
        code, out, err, _ = api.exec(sid, ["sh", "-c", script])
        self.assertEqual(code, 0, (script, out, err))
        return out.decode(errors="replace")

    def download(self, api, sid):
        """GET the blob from the world through the gateway; returns the
        world's (read, written) of that connection."""
        n = len(self.world.conns())
        self.sh(api, sid, f"grep -q world.test /etc/hosts || echo '{WORLD_IP} world.test' "
                          ">> /etc/hosts; timeout 20 wget -q -O /dev/null http://world.test/blob")
        for _ in range(100):
            c = self.world.conns()
            if len(c) > n:
                return c[n]
            time.sleep(0.05)
        self.fail("the world saw no connection")

    def scrape(self):
        status, body, _ = self.api.raw("GET", "/metrics")
        self.assertEqual(status, 200, body)
        return parse_metrics(body.decode())


def val(m, name, **labels):
    return m.get((name, frozenset(labels.items())), 0)


class MetricsCountersTest(WorldTestCase):
    """A fresh server (its busybox pool never used): the first create is a
    warm-pool miss that fills the pool, the next ones are hits."""

    def pool_ready(self, m):
        return sum(v for (name, labels), v in m.items() if name == "airlock_warm_pool_ready"
                   and dict(labels).get("kind") == (BACKEND or "ns")
                   and dict(labels).get("template", "").startswith("busybox/"))

    def test_counters_move_exactly(self):
        backend = BACKEND or "ns"
        t, tenant = self.new_tenant("metrics-counters")
        before = self.scrape()
        sids = []
        try:
            # N = 3 creates: a miss (nothing pooled for busybox yet), then,
            # once the pool holds 2, K = 2 hits
            sids.append(tenant.create(network={"allow": {"domains": ["world.test"]}})["id"])
            hits = 0
            if backend == "ns":
                for _ in range(600):
                    if self.pool_ready(self.scrape()) >= 2:
                        break
                    time.sleep(0.1)
                else:
                    self.fail("the ns warm pool did not fill:\n" + self.server.log())
                hits = 2
            for _ in range(2):
                sids.append(tenant.create(network={"allow": {"domains": ["world.test"]}})["id"])
            # M = 2 execs besides the download's
            for sid in sids[:2]:
                self.sh(tenant, sid, "echo hi")
            snap = tenant.call("POST", f"/v1/sandboxes/{sids[0]}/snapshots", {})
            read, written = self.download(tenant, sids[1])
            # the gateway counts a delivered byte after it is sent: let it land
            for _ in range(50):
                after = self.scrape()
                if val(after, "airlock_gateway_bytes_total", direction="in") - \
                        val(before, "airlock_gateway_bytes_total", direction="in") >= written:
                    break
                time.sleep(0.1)

            def moved(name, **labels):
                return val(after, name, **labels) - val(before, name, **labels)

            # hit rate
            got_hits = moved("airlock_warm_pool_creates_total", backend=backend, result="hit")
            got_miss = moved("airlock_warm_pool_creates_total", backend=backend, result="miss")
            self.assertEqual(got_hits + got_miss, 3)
            if backend == "ns":
                self.assertEqual((got_hits, got_miss), (hits, 1))
            # the pool was taken from and is being (or was) refilled: a level exists
            self.assertTrue([k for k in after if k[0] == "airlock_warm_pool_ready"]
                            or backend != "ns", after)
            # histograms: 3 creates, 2 + 1 execs (echo, the download), 1 snapshot
            self.assertEqual(moved("airlock_op_duration_seconds_count", op="create"), 3)
            self.assertEqual(moved("airlock_op_duration_seconds_count", op="exec"), 3)
            self.assertEqual(moved("airlock_op_duration_seconds_count", op="snapshot"), 1)
            # gateway bytes: exactly what the world read and wrote
            self.assertEqual(moved("airlock_gateway_bytes_total", direction="in"), written)
            self.assertEqual(moved("airlock_gateway_bytes_total", direction="out"), read)
            self.assertGreater(written, BLOB)
            # snapshot bytes: the one snapshot's size, from the database
            size = snap.get("size_bytes") or 0
            self.assertEqual(moved("airlock_snapshots", kind="disk"), 1)
            self.assertEqual(moved("airlock_snapshot_bytes", kind="disk"), size)
        finally:
            for sid in sids:
                tenant.call("DELETE", f"/v1/sandboxes/{sid}", expect=(200, 204, 404))
        final = self.scrape()
        self.assertEqual(val(final, "airlock_snapshots", kind="disk"),
                         val(before, "airlock_snapshots", kind="disk"))

    def test_text_log_has_iso_timestamps(self):
        with open(self.server.log_path, errors="replace") as f:
            lines = [l for l in f.read().splitlines()
                     if re.match(r"\S+ (api|node|nodemgr|gateway) (error|warn|info|debug)", l)
                     or re.match(ISO, l)]
        self.assertTrue(lines)
        for l in lines:
            self.assertRegex(l, rf"^{ISO} (api|node|nodemgr|gateway|up) "
                                r"(error|warn|info|debug)( \[[A-Za-z0-9._-]+\])?: ")


class SandboxMetricsTest(WorldTestCase):
    """GET /v1/sandboxes/{id}/metrics and `airlock top --once`."""

    def metrics(self, api, sid):
        return api.call("GET", f"/v1/sandboxes/{sid}/metrics")

    def test_use_grows_with_what_the_sandbox_does(self):
        _, tenant = self.new_tenant("metrics-sbx")
        sid = tenant.create(network={"allow": {"domains": ["world.test"]}})["id"]
        self.addCleanup(tenant.call, "DELETE", f"/v1/sandboxes/{sid}", expect=(200, 204, 404))
        m0 = self.metrics(tenant, sid)
        self.assertEqual(m0["id"], sid)
        self.assertEqual(m0["backend"], BACKEND or "ns")
        for k in ("cpu_seconds", "memory_bytes", "disk_used_bytes"):
            self.assertIsInstance(m0[k], (int, float), k)
        self.assertGreater(m0["memory_bytes"], 0)

        # CPU: a busy loop
        self.sh(tenant, sid, "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
        m1 = self.metrics(tenant, sid)
        self.assertGreater(m1["cpu_seconds"] - m0["cpu_seconds"], 0.05, (m0, m1))

        # memory: a 64 MiB buffer, filled (dd reads /dev/zero into it)
        self.sh(tenant, sid, "dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null")
        m2 = self.metrics(tenant, sid)
        self.assertIsNotNone(m2["memory_peak_bytes"])
        self.assertGreaterEqual(m2["memory_peak_bytes"], 64 << 20, m2)

        # disk: an 8 MiB file, synced
        self.sh(tenant, sid, "mkdir -p /work; dd if=/dev/urandom of=/work/blob bs=1M count=8 "
                             "2>/dev/null; sync")
        # nodemgr scans a sandbox's disk at most every 2 s
        for _ in range(40):
            m3 = self.metrics(tenant, sid)
            if m3["disk_used_bytes"] - m2["disk_used_bytes"] >= 8 << 20:
                break
            time.sleep(0.1)
        self.assertGreaterEqual(m3["disk_used_bytes"] - m2["disk_used_bytes"], 8 << 20, m3)

        # network: a download
        read, written = self.download(tenant, sid)
        for _ in range(50):
            m4 = self.metrics(tenant, sid)
            if m4["network"] and m4["network"]["bytes_in"] >= written:
                break
            time.sleep(0.1)
        self.assertEqual(m4["network"]["bytes_in"] - (m3["network"] or {}).get("bytes_in", 0),
                         written)
        self.assertEqual(m4["network"]["bytes_out"] - (m3["network"] or {}).get("bytes_out", 0),
                         read)

        # airlock top --once: the tenant's sandbox, with its numbers
        cfg = os.path.join(self.server.dir, "cli.json")
        env = dict(os.environ, AIRLOCK_API_KEY=tenant.key)
        env.pop("AIRLOCK_URL", None)
        r = subprocess.run([CLI, "--config", cfg, "top", "--once"], capture_output=True,
                           text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertRegex(lines[0], r"^ID\s+STATE\s+BACKEND\s+CPU-S\s+CPU%\s+MEM\s+MEM-PEAK\s+"
                                   r"DISK\s+NET-IN\s+NET-OUT")
        row = [l for l in lines if l.startswith(sid)]
        self.assertEqual(len(row), 1, r.stdout)
        cells = row[0].split()
        self.assertEqual(cells[1:3], ["running", BACKEND or "ns"])
        self.assertGreater(float(cells[3]), 0)
        self.assertRegex(cells[6], r"^\d+(\.\d)?[MG]$")   # the peak: >= 64 MiB
        self.assertRegex(cells[8], r"^\d+(\.\d)?[KMG]$")  # ~1 MiB in
        r = subprocess.run([CLI, "--config", cfg, "--json", "top", "--once"],
                           capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(sid, [m["id"] for m in json.loads(r.stdout)])

    def test_top_redraws_on_a_terminal(self):
        import pty
        import select
        _, tenant = self.new_tenant("metrics-top")
        sid = tenant.create()["id"]
        self.addCleanup(tenant.call, "DELETE", f"/v1/sandboxes/{sid}", expect=(200, 204, 404))
        env = dict(os.environ, AIRLOCK_API_KEY=tenant.key)
        env.pop("AIRLOCK_URL", None)
        master, slave = pty.openpty()
        p = subprocess.Popen([CLI, "--config", os.path.join(self.server.dir, "cli.json"),
                              "top", "--interval", "1"], stdout=slave, stderr=subprocess.PIPE,
                             env=env)
        os.close(slave)
        out = b""
        try:
            deadline = time.time() + 30
            while out.count(b"\x1b[H\x1b[2J") < 3 and time.time() < deadline:
                if select.select([master], [], [], 0.5)[0]:
                    out += os.read(master, 65536)
        finally:
            p.send_signal(signal.SIGINT)
            p.wait(timeout=10)
            os.close(master)
            err = p.stderr.read()
            p.stderr.close()
        # redrawn every interval: screens cleared and the table each time,
        # CPU% known from the second screen on
        screens = out.split(b"\x1b[H\x1b[2J")[1:]
        self.assertGreaterEqual(len(screens), 3, out)
        for scr in screens[:2]:
            self.assertIn(b"CPU%", scr)
        self.assertRegex(screens[1].decode(), rf"{sid}\s+running\s+\S+\s+[0-9.]+\s+[0-9]+\s")
        self.assertEqual(p.returncode, 0, err)

    def test_owner_only_and_states(self):
        _, a = self.new_tenant("metrics-a")
        _, b = self.new_tenant("metrics-b")
        sid = a.create()["id"]
        self.addCleanup(a.call, "DELETE", f"/v1/sandboxes/{sid}", expect=(200, 204, 404))
        self.assertEqual(b.raw("GET", f"/v1/sandboxes/{sid}/metrics")[0], 404)
        self.assertEqual(a.raw("GET", "/v1/sandboxes/sb-nope/metrics")[0], 404)
        self.assertEqual(a.raw("POST", f"/v1/sandboxes/{sid}/metrics")[0], 405)
        # paused: the cgroup is still there
        a.call("POST", f"/v1/sandboxes/{sid}/pause", {})
        self.assertEqual(self.metrics(a, sid)["state"], "paused")
        a.call("POST", f"/v1/sandboxes/{sid}/resume", {})


class RequestIdTest(AirlockTestCase):
    """X-Request-Id through api -> node -> nodemgr, with --log-format json."""
    extra_args = ("--log-level", "debug", "--log-format", "json")

    def json_lines(self):
        with open(self.server.log_path, errors="replace") as f:
            text = f.read()
        out = []
        for l in text.splitlines():
            if l.startswith("{"):
                out.append(json.loads(l))   # every JSON-looking line parses
        return out, text

    def test_request_id_followed_and_json_lines(self):
        rid = f"test-rid.{os.getpid()}_x"
        status, body, r = self.api.raw("POST", "/v1/sandboxes",
                                       {"template": "busybox",
                                        **({"backend": BACKEND} if BACKEND else {})},
                                       headers={"X-Request-Id": rid})
        self.assertEqual(status, 201, body)
        sid = json.loads(body)["id"]
        self.addCleanup(self.api.delete, sid)
        self.assertEqual(r.getheader("X-Request-Id"), rid)
        time.sleep(0.3)
        lines, text = self.json_lines()
        self.assertGreater(len(lines), 10)
        for o in lines:
            self.assertEqual(set(o) - {"request_id"}, {"ts", "level", "component", "msg"}, o)
            self.assertRegex(o["ts"], f"^{ISO}$")
            self.assertIn(o["level"], ("error", "warn", "info", "debug"))
        mine = [o for o in lines if o.get("request_id") == rid]
        comps = {o["component"] for o in mine}
        self.assertTrue({"api", "node", "nodemgr"} <= comps, (comps, mine))
        self.assertTrue(any(sid in o["msg"] for o in mine if o["component"] == "nodemgr"), mine)
        # no text-format line from the daemons themselves
        self.assertFalse(re.search(rf"^{ISO} (api|node|nodemgr|gateway) ", text, re.M))

    def test_request_id_made_when_absent_or_insane(self):
        for given in (None, "x" * 65, "bad id", "a\u00e9b", ""):
            h = {} if given is None else {"X-Request-Id": given}
            status, _, r = self.api.raw("GET", "/v1/sandboxes", headers=h)
            self.assertEqual(status, 200)
            got = r.getheader("X-Request-Id")
            self.assertRegex(got, r"^[0-9a-f]{16}$", given)
        # on errors too, and the sane client id is kept
        status, _, r = self.api.raw("GET", "/v1/sandboxes/sb-nope",
                                    headers={"X-Request-Id": "A-1.b_2"})
        self.assertEqual(status, 404)
        self.assertEqual(r.getheader("X-Request-Id"), "A-1.b_2")
        status, _, r = self.api.raw("GET", "/v1/sandboxes", auth=False,
                                    headers={"X-Request-Id": "unauth-1"})
        self.assertEqual(status, 401)
        self.assertEqual(r.getheader("X-Request-Id"), "unauth-1")


if __name__ == "__main__":
    main()
