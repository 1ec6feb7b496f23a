"""The sandbox network: every packet from a sandbox goes through the gateway,
which applies the sandbox's egress policy.

The "internet" is a network namespace this test creates, joined to the host
by a veth with test addresses. Inside it run a plain HTTP server, an HTTPS
server with its own test CA (made with the openssl CLI), a DNS server that
would answer every name with 6.6.6.6 (a resolver the sandbox must never
reach) and a UDP sink; each records what it received. The gateway resolves
the test names to that namespace (gateway_hosts) and the operator allows its
/24 as a private range (network_allow_private_cidrs). Nothing is sent
anywhere else.

busybox's static wget cannot resolve names through DNS (no NSS in the
template), so the sandbox names the test hosts in /etc/hosts; the gateway
still decides on the Host header / SNI and dials the address it resolves
itself. DNS is tested with nslookup.

Runs on both backends (AIRLOCK_E2E_BACKEND=vm: the vm guest's eth0 is a
virtio-net NIC with the same address in every VM, which QEMU's network
namespace routes and translates to the same kind of veth, so the host sees
the sandbox's own address); where the backends differ (a vm guest's root may
change its own addresses; a vm's memory can be read from the host) the test
says so."""
import hashlib
import ipaddress
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import harness
from harness import AirlockTestCase, main

VM_GUEST_ADDR = "100.96.0.2"   # the fixed vm network, proto.h PROTO_VM_NET_*
VM_GUEST_GW = "100.96.0.1"

SUB = 100 + os.getpid() % 100
NET = f"10.251.{SUB}"
HOST_IP, WORLD_IP = f"{NET}.1", f"{NET}.2"
NS = f"alnt-{os.getpid()}"
VETH = f"alnt{os.getpid() % 100000}"

WORLD = r'''
import hashlib, http.server, socket, socketserver, ssl, sys, threading, time
ip, certdir, logpath = sys.argv[1], sys.argv[2], sys.argv[3]
lock = threading.Lock()
def note(line):
    with lock, open(logpath, "a") as f:
        f.write(line + "\n")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/slow"):
            time.sleep(6)   # a slow answer: the connection stays open meanwhile
        note("http host=%s" % self.headers.get("Host"))
        note("req host=%s path=%s auth=%s xkey=%s" % (self.headers.get("Host"), self.path,
             self.headers.get("Authorization"), self.headers.get("X-Key")))
        body = b"hello from " + (self.headers.get("Host") or "?").encode() + b"\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        framing = "length"
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            parts, framing = [], "chunked"
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()   # no trailer fields
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            data = b"".join(parts)
        else:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        n = len(data)
        # a large body is noted by its hash
        got = ("sha256:" + hashlib.sha256(data).hexdigest() if n > 65536
               else data.decode(errors="replace"))
        note("post path=%s len=%d body=%s" % (self.path, n, got))
        note("posthead path=%s auth=%s framing=%s" % (self.path,
             self.headers.get("Authorization"), framing))
        body = b"posted %d\n" % n
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
plain = S((ip, 80), H)
tls = S((ip, 443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(certdir + "/server.pem", certdir + "/server.key")
def sni(sock, name, c):
    note("sni %s" % name)
ctx.sni_callback = sni
tls.socket = ctx.wrap_socket(tls.socket, server_side=True, do_handshake_on_connect=False)
class T(threading.Thread):
    def __init__(self, fn):
        super().__init__(daemon=True); self.fn = fn
    def run(self):
        try:
            self.fn()
        except Exception as e:
            note("error %r" % e)
def udp(port, answer):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, port))
    def loop():
        while True:
            data, peer = s.recvfrom(2048)
            note("udp%d from=%s" % (port, peer[0]))
            if answer and len(data) > 12:
                # answer every A query with 6.6.6.6
                q = data[12:]
                end = q.index(b"\0") + 5
                resp = data[:2] + b"\x81\x80" + data[4:6] + b"\x00\x01\x00\x00\x00\x00" + q[:end]
                resp += b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + bytes([6, 6, 6, 6])
                s.sendto(resp, peer)
    return loop
def banner(port):
    # a server-speaks-first protocol (SMTP-like): the banner, then an echo
    # of one line
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port))
    s.listen(16)
    def one(c):
        with c:
            note("banner accepted")
            c.sendall(b"220 world ready\r\n")
            line = c.makefile("rb").readline()
            c.sendall(b"250 got " + line)
    def loop():
        while True:
            c, _ = s.accept()
            T(lambda: one(c)).start()
    return loop
for fn in (plain.serve_forever, tls.serve_forever, udp(53, True), udp(5353, False),
           banner(2525)):
    T(fn).start()
note("ready")
threading.Event().wait()
'''


def fnv(s):
    h = 2166136261
    for c in s.encode():
        h = ((h ^ c) * 16777619) & 0xffffffff
    return h


def run(*cmd, check=True):
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


class NetworkTest(AirlockTestCase):
    extra_args = ("--set", f"network_allow_private_cidrs={NET}.0/24",
                  "--set", "gateway_max_conns=8",
                  "--set", f"gateway_hosts=allowed.test={WORLD_IP},denied.test={WORLD_IP},"
                           f"other.allowed.test={WORLD_IP}")

    @classmethod
    def setUpClass(cls):
        cls.world = None
        cls.tmp = tempfile.mkdtemp(prefix="airlock-net-")
        os.chmod(cls.tmp, 0o755)   # the gateway (airlock user) reads the test CA
        cls.world_log = os.path.join(cls.tmp, "world.log")
        # the gateway verifies the test servers (TLS it intercepts) against the test CA
        cls.extra_args = NetworkTest.extra_args + (
            "--set", f"gateway_upstream_ca={cls.tmp}/ca.pem")
        try:
            cls.make_world()
            super().setUpClass()
        except Exception:
            cls.destroy_world()
            raise
        h = fnv(cls.server.dir)
        cls.table = f"airlock-{h:08x}"
        cls.prefix = f"al{h & 0xfffff:05x}-"

    @classmethod
    def make_world(cls):
        run("ip", "netns", "add", NS)
        run("ip", "link", "add", VETH, "type", "veth", "peer", "name", "w0", "netns", NS)
        run("ip", "addr", "add", f"{HOST_IP}/24", "dev", VETH)
        run("ip", "link", "set", VETH, "up")
        run("ip", "netns", "exec", NS, "ip", "addr", "add", f"{WORLD_IP}/24", "dev", "w0")
        run("ip", "netns", "exec", NS, "ip", "link", "set", "w0", "up")
        run("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
        # a test CA and a server certificate for both test names
        d = cls.tmp
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=airlock test CA", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem")
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=allowed.test",
            "-keyout", f"{d}/server.key", "-out", f"{d}/server.csr")
        with open(f"{d}/ext.cnf", "w") as f:
            f.write("subjectAltName=DNS:allowed.test,DNS:denied.test,DNS:other.allowed.test\n")
        run("openssl", "x509", "-req", "-in", f"{d}/server.csr", "-CA", f"{d}/ca.pem",
            "-CAkey", f"{d}/ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", f"{d}/ext.cnf", "-out", f"{d}/server.pem")
        os.chmod(f"{d}/ca.pem", 0o644)
        with open(f"{d}/world.py", "w") as f:
            f.write(WORLD)
        cls.world = harness.start_world(
            NS, [sys.executable, f"{d}/world.py", WORLD_IP, d, cls.world_log], cls.world_log)

    @classmethod
    def destroy_world(cls):
        if cls.world and cls.world.poll() is None:
            os.killpg(cls.world.pid, signal.SIGKILL)
            cls.world.wait()
        run("ip", "link", "del", VETH, check=False)
        run("ip", "netns", "del", NS, check=False)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
            # after shutdown: no table, no sandbox interface of this instance
            tables = run("nft", "list", "tables").stdout
            assert cls.table not in tables, f"nft table left after shutdown: {tables}"
            links = run("ip", "-o", "link").stdout
            assert cls.prefix not in links, f"links left after shutdown: {links}"
        finally:
            cls.destroy_world()

    # ---- helpers ----

    def world_lines(self):
        with open(self.world_log) as f:
            return f.read().splitlines()

    def sandbox(self, network=None):
        kw = {"template": "busybox"}
        if network is not None:
            kw["network"] = network
        sb = self.api.create(**kw)
        self.addCleanup(self.api.delete, sb["id"])
        hosts = "".join(f"{WORLD_IP} {n}\n" for n in ("allowed.test", "denied.test",
                                                       "other.allowed.test"))
        self.sh(sb["id"], f"printf '{hosts}' >> /etc/hosts")
        return sb["id"]

    def sh(self, sid, script):
        code, out, err, _ = self.api.exec(sid, ["sh", "-c", script])
        return code, out.decode(errors="replace"), err.decode(errors="replace")

    def get(self, sid, url):
        return self.sh(sid, f"timeout 10 wget -q -O - {url}")

    def log(self, sid):
        return self.api.call("GET", f"/v1/sandboxes/{sid}/network/log")["entries"]

    def addr(self, sid):
        return self.api.call("GET", f"/v1/sandboxes/{sid}/network")["addr"]

    def gateway_stats(self):
        """GET /stats on the gateway's admin socket (root may connect)."""
        path = os.path.join(self.server.dir, "run", "gateway.sock")
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
            s.sendall(b"GET /stats HTTP/1.0\r\nHost: gateway\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        self.assertIn(b" 200 ", head.split(b"\r\n")[0])
        return json.loads(body)

    # ---- tests ----

    def test_allowed_and_denied_http(self):
        sid = self.sandbox({"allow": {"domains": ["allowed.test", "*.allowed.test"]}})
        code, out, _ = self.get(sid, "http://allowed.test/")
        self.assertEqual(code, 0)
        self.assertEqual(out, "hello from allowed.test\n")
        code, out, _ = self.get(sid, "http://other.allowed.test/")
        self.assertEqual(code, 0, out)
        code, out, _ = self.get(sid, "http://denied.test/")
        self.assertNotEqual(code, 0)
        self.assertNotIn("hello", out)
        self.assertNotIn("http host=denied.test", self.world_lines())
        log = self.log(sid)
        allow = [e for e in log if e["host"] == "allowed.test" and e["proto"] == "http"]
        self.assertTrue(allow and allow[0]["decision"] == "allow", log)
        self.assertEqual(allow[0]["ip"], WORLD_IP)
        self.assertEqual(allow[0]["port"], 80)
        self.assertEqual(allow[0]["rule"], "allow.domains allowed.test")
        deny = [e for e in log if e["host"] == "denied.test" and e["proto"] == "http"]
        self.assertTrue(deny and deny[0]["decision"] == "deny", log)
        self.assertIn("time_ms", deny[0])

    def test_gateway_stats(self):
        sid = self.sandbox({"allow": {"domains": ["allowed.test"]}})
        before = self.gateway_stats()
        for url in ("http://allowed.test/", "http://allowed.test/", "http://denied.test/"):
            self.get(sid, url)
        after = self.gateway_stats()
        d = {k: after[k] - before[k] for k in after}
        # three connections, one refused on its name (never dialled)
        self.assertEqual(d["connections"], 3, d)
        self.assertEqual(d["denied"], 1, d)
        self.assertEqual(d["dials"], 2, d)
        self.assertEqual(d["dial_fails"], 0, d)
        for k in ("sniff_us", "decide_us", "dial_us"):   # each took some time
            self.assertGreater(d[k], 0, d)

    def test_connection_limit(self):
        # A sandbox holds at most gateway_max_conns (8 here) live connections
        # through the gateway, each a worker; past that it is refused at
        # once, and other sandboxes are not.
        sid = self.sandbox({"default": "allow"})
        other = self.sandbox({"default": "allow"})
        before = self.gateway_stats()
        # 8 silent connections: accepted after the listener's 1 s defer,
        # relayed to the world's HTTP server, which waits for a request
        self.sh(sid, "rm -f /tmp/pids; for i in $(seq 8); do "
                     f"(sleep 120 | nc {WORLD_IP} 80 >/dev/null 2>&1 & echo $! >> /tmp/pids); "
                     "done")
        for _ in range(100):
            if self.gateway_stats()["connections"] - before["connections"] >= 8:
                break
            time.sleep(0.1)
        code, out, _ = self.get(sid, "http://allowed.test/")
        self.assertNotEqual(code, 0, out)
        d = {k: v - before[k] for k, v in self.gateway_stats().items()}
        self.assertEqual(d["connections"], 8, d)
        self.assertGreaterEqual(d["over_limit"], 1, d)
        self.assertTrue([e for e in self.log(sid) if e["rule"] == "connection limit"
                         and e["decision"] == "deny"], self.log(sid))
        code, out, _ = self.get(other, "http://allowed.test/")
        self.assertEqual((code, out), (0, "hello from allowed.test\n"))
        # the held ones end: the sandbox gets through again
        self.sh(sid, "kill $(cat /tmp/pids)")
        for _ in range(100):
            code, out, _ = self.get(sid, "http://allowed.test/")
            if code == 0:
                break
            time.sleep(0.1)
        self.assertEqual((code, out), (0, "hello from allowed.test\n"))

    def test_relayed_connections_hold_no_worker(self):
        # Once dialled, a connection is carried by the relay loop: three
        # sandboxes at their cap hold 24 connections and no worker thread
        # is busy, and the gateway may hold far more fds than it was
        # started with (the harness starts the daemons with a soft limit
        # of 1024, as a login shell does).
        sids = [self.sandbox({"default": "allow"}) for _ in range(3)]
        other = self.sandbox({"default": "allow"})
        before = self.gateway_stats()
        for sid in sids:
            self.sh(sid, "rm -f /tmp/pids; for i in $(seq 8); do "
                         f"(sleep 120 | nc {WORLD_IP} 80 >/dev/null 2>&1 & echo $! >> /tmp/pids); "
                         "done")
        for _ in range(100):
            st = self.gateway_stats()
            if st["relayed"] - before["relayed"] >= 24:
                break
            time.sleep(0.1)
        self.assertEqual(st["relayed"] - before["relayed"], 24, st)
        self.assertEqual(st["workers"] - st["workers_idle"], 0, st)
        # another sandbox is served meanwhile, and that one is not kept
        code, out, _ = self.get(other, "http://allowed.test/")
        self.assertEqual((code, out), (0, "hello from allowed.test\n"))
        with open(f"/proc/{st['pid']}/limits") as f:
            soft, hard = next(l for l in f if l.startswith("Max open files")).split()[3:5]
        self.assertEqual(soft, hard)
        for sid in sids:
            self.sh(sid, "kill $(cat /tmp/pids)")
        for _ in range(100):
            st = self.gateway_stats()
            if st["relayed"] == before["relayed"]:
                break
            time.sleep(0.1)
        self.assertEqual(st["relayed"], before["relayed"], st)

    def test_https_sni(self):
        sid = self.sandbox({"allow": {"domains": ["allowed.test"]}})
        # busybox's TLS may not finish a handshake with this server; what
        # matters is which names reach it at all
        self.sh(sid, "timeout 10 wget -q --no-check-certificate -O - https://allowed.test/")
        code, _, _ = self.sh(sid, "timeout 10 wget -q --no-check-certificate -O - https://denied.test/")
        self.assertNotEqual(code, 0)
        lines = self.world_lines()
        self.assertIn("sni allowed.test", lines)
        self.assertNotIn("sni denied.test", lines)
        log = self.log(sid)
        self.assertTrue([e for e in log if e["proto"] == "tls" and e["host"] == "allowed.test"
                         and e["decision"] == "allow"], log)
        self.assertTrue([e for e in log if e["proto"] == "tls" and e["host"] == "denied.test"
                         and e["decision"] == "deny"], log)

    def test_direct_ip_bypasses_nothing(self):
        sid = self.sandbox({"allow": {"domains": ["allowed.test"]}})
        # an IP literal is not an allowed name
        code, out, _ = self.get(sid, f"http://{WORLD_IP}/")
        self.assertNotEqual(code, 0)
        # raw bytes that are neither TLS nor HTTP: decided on the IP, denied
        before = len(self.world_lines())
        code, out, _ = self.sh(sid, f"echo hello | nc -w 3 {WORLD_IP} 80")
        self.assertNotIn("HTTP", out)
        # a forged Host toward an address that name does not resolve to is
        # dialled at the name's address, never at the one the sandbox chose
        code, out, _ = self.sh(
            sid, f"printf 'GET / HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n' | nc -w 3 {NET}.3 80")
        self.assertIn("hello from allowed.test", out)
        log = self.log(sid)
        self.assertTrue([e for e in log if e["proto"] == "tcp" and e["ip"] == WORLD_IP
                         and e["decision"] == "deny"], log)
        self.assertEqual([l for l in self.world_lines()[before:] if l.startswith("http")],
                         ["http host=allowed.test"])
        # an allow-all policy with a denied CIDR: the IP decides
        sid2 = self.sandbox({"default": "allow", "deny": {"cidrs": [f"{NET}.0/24"]}})
        code, out, _ = self.get(sid2, "http://allowed.test/")
        self.assertNotEqual(code, 0)
        self.assertIn(f"deny.cidrs {NET}.0/24", [e["rule"] for e in self.log(sid2)])

    def test_server_speaks_first(self):
        # The gateway accepts only once the first bytes are there or the
        # listener's defer ran out (TCP_DEFER_ACCEPT): a protocol whose
        # server speaks first still gets its banner to a silent client, and
        # the client's answer after it reaches the server.
        sid = self.sandbox({"default": "allow"})
        # the client answers only once it has read the banner (a bounded
        # wait for it, no assertion on time)
        wait = ('i=0; while ! grep -q "$1" out && [ $i -lt 150 ]; do '
                'sleep 0.2; i=$((i+1)); done; grep -q "$1" out')
        code, out, err = self.sh(sid, (
            f"w() {{ {wait}; }}; cd /tmp && rm -f in out && mkfifo in && "
            f"(timeout 60 nc {WORLD_IP} 2525 <in >out &) && exec 3>in && "
            f"w 220 && echo HELO sandbox >&3 && w 250; exec 3>&-; cat out"))
        self.assertIn("220 world ready", out, err)
        self.assertIn("250 got HELO sandbox", out, err)
        self.assertTrue([e for e in self.log(sid) if e["proto"] == "tcp" and e["port"] == 2525
                         and e["decision"] == "allow"], self.log(sid))

    def test_blocked_paths(self):
        sid = self.sandbox()  # the default: allow-all minus private ranges (ours allowed)
        other = self.sandbox()
        other_addr = self.addr(other)
        self.sh(other, "nc -l -p 8080 -e echo reached >/dev/null 2>&1 &")
        before = len(self.world_lines())
        # DNS to another resolver is answered by the gateway, not by that resolver
        code, out, _ = self.sh(sid, f"nslookup allowed.test {WORLD_IP}")
        self.assertIn(WORLD_IP, out)
        self.assertNotIn("6.6.6.6", out)
        # other UDP, ICMP
        self.sh(sid, f"echo hi | nc -u -w 1 {WORLD_IP} 5353; echo hi | nc -u -w 1 {WORLD_IP} 5353")
        code, _, _ = self.sh(sid, f"ping -c 1 -W 2 {WORLD_IP}")
        self.assertNotEqual(code, 0)
        new = self.world_lines()[before:]
        self.assertFalse([l for l in new if l.startswith("udp")], new)
        # IPv6: no address outside the sandbox answers (the host end has none)
        code, out, _ = self.sh(sid, "echo x | nc -w 2 ff02::1%eth0 80; "
                                    "ip -6 route get 2001:db8::1 2>&1")
        self.assertNotIn("via", out)
        # metadata, the API port on the host, another sandbox
        code, out, _ = self.get(sid, "http://169.254.169.254/latest/meta-data/")
        self.assertNotEqual(code, 0)
        # the host end of the sandbox's veth (on vm the guest's own gateway
        # is the address QEMU's namespace holds; the host end lies beyond)
        host_end = str(ipaddress.ip_address(self.addr(sid)) - 1)
        code, out, _ = self.get(sid, f"http://{host_end}:{self.server.port}/v1/health")
        self.assertNotEqual(code, 0)
        code, out, _ = self.sh(sid, f"echo hi | nc -w 2 {other_addr} 8080")
        self.assertNotIn("reached", out)
        log = self.log(sid)
        rules = {(e["ip"], e["rule"]) for e in log if e["decision"] == "deny"}
        # link-local is dropped by nftables before the gateway sees it
        self.assertFalse([e for e in log if (e["ip"] or "").startswith("169.254.")
                          and e["decision"] == "allow"], log)
        self.assertIn((host_end, "host"), rules)
        self.assertIn((other_addr, "host"), rules)

    def test_host_address_added_later_is_refused(self):
        """An address the host gains after the gateway started is the host's
        too: the gateway reads its address list again after the kernel
        announces a change (not on a connection's path), so a sandbox is
        refused it within a few seconds."""
        sid = self.sandbox()   # the test's /24 is an allowed private range
        late = f"{NET}.7"
        run("ip", "addr", "add", f"{late}/32", "dev", VETH)
        self.addCleanup(run, "ip", "addr", "del", f"{late}/32", "dev", VETH, check=False)
        url = f"http://{late}:{self.server.port}/v1/health"
        deadline = time.monotonic() + 15
        while True:
            code, _, _ = self.get(sid, url)
            denied = [e for e in self.log(sid) if e["ip"] == late and e["decision"] == "deny"]
            if denied:
                break
            self.assertLess(time.monotonic(), deadline, f"{late} never refused: {code}")
            time.sleep(0.5)
        self.assertNotEqual(code, 0)
        self.assertEqual(denied[-1]["rule"], "host")

    def test_dns_policy(self):
        sid = self.sandbox({"allow": {"domains": ["allowed.test"]}})
        code, out, _ = self.sh(sid, "nslookup allowed.test")
        self.assertEqual(code, 0, out)
        self.assertIn(WORLD_IP, out)
        code, out, _ = self.sh(sid, "nslookup denied.test")
        self.assertNotEqual(code, 0)
        self.assertIn("REFUSED", out)
        code, out, _ = self.sh(sid, "nslookup -type=AAAA allowed.test")
        self.assertNotIn("::", out.split("answer:")[-1] if "answer:" in out else "")
        log = self.log(sid)
        # refused on the name, before any lookup: no address in the entry
        # (a name a sandbox may not reach is never sent to a resolver)
        self.assertTrue([e for e in log if e["proto"] == "dns" and e["host"] == "denied.test"
                         and e["decision"] == "deny" and e["ip"] is None
                         and e["rule"] == "default"], log)

    def test_policy_changed_live(self):
        sid = self.sandbox()
        self.assertEqual(self.get(sid, "http://denied.test/")[0], 0)
        r = self.api.call("PATCH", f"/v1/sandboxes/{sid}/network", '"deny-all"')
        self.assertEqual(r["network"]["default"], "deny")
        self.assertNotEqual(self.get(sid, "http://denied.test/")[0], 0)
        self.assertNotEqual(self.get(sid, "http://allowed.test/")[0], 0)
        self.api.call("PATCH", f"/v1/sandboxes/{sid}/network",
                      {"network": {"allow": {"domains": ["denied.test"], "ports": [80]}}})
        self.assertEqual(self.get(sid, "http://denied.test/")[0], 0)
        self.assertNotEqual(self.get(sid, "http://allowed.test/")[0], 0)
        got = self.api.call("GET", f"/v1/sandboxes/{sid}/network")["network"]
        self.assertEqual(got["allow"]["domains"], ["denied.test"])
        self.assertEqual(got["allow"]["ports"], [80])
        # the log kept the decisions of every policy
        rules = [e["rule"] for e in self.log(sid) if e["host"] == "denied.test"]
        self.assertIn("default", rules)
        self.assertIn("allow.domains denied.test", rules)


    def test_policy_survives_gateway_and_node_restart(self):
        sid = self.sandbox({"allow": {"domains": ["allowed.test"]}})
        self.assertEqual(self.get(sid, "http://allowed.test/")[0], 0)
        # a killed gateway is restarted by `up` and pulls the policies from
        # the node; without them every connection would be refused
        self.kill_and_wait_restarted("gateway")
        code, out, _ = self.get(sid, "http://allowed.test/")
        self.assertEqual(code, 0, out)
        self.assertNotEqual(self.get(sid, "http://denied.test/")[0], 0)
        # a restarted node re-adopts the sandbox and pushes its policy again
        self.api.call("PATCH", f"/v1/sandboxes/{sid}/network",
                      {"allow": {"domains": ["denied.test"]}})
        self.kill_and_wait_restarted("node")
        for _ in range(200):
            st, _, _ = self.api.raw("GET", f"/v1/sandboxes/{sid}")
            if st == 200:
                break
            time.sleep(0.05)
        self.assertEqual(self.get(sid, "http://denied.test/")[0], 0)
        self.assertNotEqual(self.get(sid, "http://allowed.test/")[0], 0)

    def test_cli(self):
        cli = os.path.join(os.path.dirname(harness.AIRLOCKD), "airlock")
        cfg = os.path.join(self.server.dir, "cli.json")

        def airlock(*a):
            r = subprocess.run([cli, "--config", cfg] + list(a), capture_output=True, text=True)
            return r.returncode, r.stdout, r.stderr
        backend = ["--backend", harness.BACKEND] if harness.BACKEND else []
        code, out, err = airlock("create", "--template", "busybox", *backend,
                                 "--network", '{"allow":{"domains":["allowed.test"]}}')
        self.assertEqual(code, 0, err)
        sid = out.strip()
        self.addCleanup(self.api.delete, sid)
        code, out, err = airlock("--json", "network", sid)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["network"]["allow"]["domains"], ["allowed.test"])
        code, out, err = airlock("network", "set", sid, "deny-all")
        self.assertEqual(code, 0, err)
        self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{sid}/network")["network"]["default"],
                         "deny")
        self.sh(sid, f"printf '{WORLD_IP} allowed.test\\n' >> /etc/hosts")
        self.get(sid, "http://allowed.test/")
        code, out, err = airlock("network", "log", sid)
        self.assertEqual(code, 0, err)
        self.assertIn("allowed.test", out)
        self.assertIn("deny", out)
        code, out, err = airlock("network", "set", sid, "{not json")
        self.assertEqual(code, 125)

    def test_debian_curl_and_python(self):
        # the one test on the debian template (built on demand here): real
        # name resolution through the gateway's DNS, and verified TLS to the
        # test CA's server, from curl and from python's urllib
        sb = self.api.create(template="debian",
                             network={"allow": {"domains": ["allowed.test"]}})
        sid = sb["id"]
        self.addCleanup(self.api.delete, sid)
        with open(os.path.join(self.tmp, "ca.pem"), "rb") as f:
            self.api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/ca.pem", f.read())
        code, out, err = self.sh(sid, "curl -sS --max-time 10 --cacert /tmp/ca.pem "
                                      "https://allowed.test/")
        self.assertEqual((code, out), (0, "hello from allowed.test\n"), err)
        code, out, err = self.sh(sid, "curl -sS --max-time 10 http://allowed.test/")
        self.assertEqual((code, out), (0, "hello from allowed.test\n"), err)
        code, out, err = self.sh(sid, "curl -sS --max-time 10 --cacert /tmp/ca.pem "
                                      "https://denied.test/")
        self.assertNotEqual(code, 0)
        py = ("import ssl, sys, urllib.request\n"
              "ctx = ssl.create_default_context(cafile='/tmp/ca.pem')\n"
              "try:\n"
              "    print(urllib.request.urlopen(sys.argv[1], context=ctx, timeout=10).read().decode(), end='')\n"
              "except Exception as e:\n"
              "    print('failed', type(e).__name__); sys.exit(3)\n")
        self.api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/get.py", py)
        code, out, err = self.sh(sid, "python3 /tmp/get.py https://allowed.test/")
        self.assertEqual((code, out), (0, "hello from allowed.test\n"), err)
        code, out, err = self.sh(sid, "python3 /tmp/get.py https://denied.test/")
        self.assertEqual(code, 3, out + err)
        log = self.log(sid)
        self.assertTrue([e for e in log if e["proto"] == "tls" and e["host"] == "allowed.test"
                         and e["decision"] == "allow"], log)
        self.assertTrue([e for e in log if e["host"] == "denied.test"
                         and e["decision"] == "deny"], log)

    # ---- credential injection (the gateway's side of /v1/credentials) ----

    def credential(self, project, **kw):
        body = {"name": f"c-{os.urandom(4).hex()}", "value": "s3cr3t-" + os.urandom(8).hex(),
                "env": "TEST_KEY", "inject": {"type": "header"}, "hosts": ["allowed.test"],
                "bindings": [{"project": project}]}
        body.update(kw)
        c = self.api.call("POST", "/v1/credentials", body)
        self.addCleanup(self.api.call, "DELETE", f"/v1/credentials/{c['id']}")
        return c, body["value"]

    def sandbox_in(self, project, template="busybox"):
        sb = self.api.create(template=template, metadata={"project": project},
                             network={"allow": {"domains": ["allowed.test", "*.allowed.test"]}})
        self.addCleanup(self.api.delete, sb["id"])
        hosts = "".join(f"{WORLD_IP} {n}\n" for n in ("allowed.test", "other.allowed.test"))
        self.sh(sb["id"], f"printf '{hosts}' >> /etc/hosts")
        return sb["id"]

    def requests_seen(self, path):
        return [l for l in self.world_lines() if l.startswith("req ") and f" path={path} " in l]

    def posts_seen(self, path):
        return [l for l in self.world_lines() if l.startswith("post ") and f" path={path} " in l]

    def audit(self, cred_id):
        return self.api.call("GET", f"/v1/credentials/audit?credential={cred_id}")["records"]

    def test_credential_injected_over_http(self):
        project = "inj-" + os.urandom(3).hex()
        # the body replacement below is an opt-in (replace_in), and so is
        # plain HTTP (schemes)
        c, secret = self.credential(project, replace_in=["body"], schemes=["http"])
        sid = self.sandbox_in(project)
        code, ph, _ = self.sh(sid, "printf %s \"$TEST_KEY\"")
        self.assertTrue(ph.startswith("airlock-ph-"), ph)
        # the placeholder in the client's own header is replaced
        code, out, err = self.sh(sid, 'timeout 10 wget -q -O - --header "Authorization: Bearer '
                                      '$TEST_KEY" http://allowed.test/p1')
        self.assertEqual((code, out), (0, "hello from allowed.test\n"), err)
        self.assertIn(f"auth=Bearer {secret}", self.requests_seen("/p1")[-1])
        # in a JSON body: replaced, and the length follows the value
        body = '{"key":"%s"}' % ph
        code, out, err = self.sh(sid, 'timeout 10 wget -q -O - --header "Content-Type: '
                                      "application/json\" --post-data '%s' "
                                      "http://allowed.test/b1" % body)
        want = '{"key":"%s"}' % secret
        self.assertEqual((code, out), (0, "posted %d\n" % len(want)), err)
        self.assertIn(f"len={len(want)} body={want}", self.posts_seen("/b1")[-1])
        # no placeholder at all: the gateway adds the header
        code, out, _ = self.sh(sid, "timeout 10 wget -q -O - http://allowed.test/p2")
        self.assertEqual(code, 0)
        self.assertIn(f"auth=Bearer {secret}", self.requests_seen("/p2")[-1])
        # toward a host it is not bound to: never replaced, audited
        code, out, _ = self.sh(sid, 'timeout 10 wget -q -O - --header "X-Key: $TEST_KEY" '
                                    'http://other.allowed.test/p3')
        self.assertEqual(code, 0)
        seen = self.requests_seen("/p3")[-1]
        self.assertIn(f"xkey={ph}", seen)
        self.assertNotIn(secret, seen)
        self.assertIn("auth=None", seen)
        decisions = [a["decision"] for a in self.audit(c["id"])]
        self.assertEqual(decisions.count("injected"), 3, decisions)
        self.assertIn("exfiltration_attempt", decisions)
        rec = [a for a in self.audit(c["id"]) if a["decision"] == "exfiltration_attempt"][0]
        self.assertEqual((rec["sandbox"], rec["host"], rec["path"]),
                         (sid, "other.allowed.test", "/p3"))
        # the secret is nowhere in the sandbox
        code, out, _ = self.sh(sid, f"env; grep -rl {secret} /etc /root /tmp /work 2>/dev/null; true")
        self.assertNotIn(secret, out)

    def test_credential_rate_limit_and_expiry(self):
        project = "rl-" + os.urandom(3).hex()
        c, secret = self.credential(project, rate_limit={"per_minute": 2}, schemes=["http"])
        sid = self.sandbox_in(project)
        codes = []
        for i in range(3):
            _, out, _ = self.sh(sid, f"printf 'GET /rl{i} HTTP/1.1\\r\\nHost: allowed.test\\r\\n"
                                     f"\\r\\n' | timeout 10 nc allowed.test 80 | head -1")
            codes.append(out.split(" ")[1] if out.startswith("HTTP/") else out)
        self.assertEqual(codes, ["200", "200", "429"])
        self.assertEqual(self.requests_seen("/rl2"), [])   # never reached the server
        self.assertIn("rate_limited", [a["decision"] for a in self.audit(c["id"])])

        # a credential that expires: injected before, never after
        project = "ex-" + os.urandom(3).hex()
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 4))
        c2, secret2 = self.credential(project, expires_at=expires, schemes=["http"])
        sid2 = self.sandbox_in(project)
        self.sh(sid2, 'timeout 10 wget -q -O - --header "Authorization: Bearer $TEST_KEY" '
                      'http://allowed.test/ex1')
        self.assertIn(f"auth=Bearer {secret2}", self.requests_seen("/ex1")[-1])
        deadline = time.time() + 30
        while time.time() < deadline and self.api.call(
                "GET", f"/v1/credentials/{c2['id']}")["status"] != "expired":
            time.sleep(0.5)
        self.sh(sid2, 'timeout 10 wget -q -O - --header "Authorization: Bearer $TEST_KEY" '
                      'http://allowed.test/ex2')
        seen = self.requests_seen("/ex2")[-1]
        self.assertNotIn(secret2, seen)
        self.assertIn("auth=Bearer airlock-ph-", seen)
        self.assertIn("expired", [a["decision"] for a in self.audit(c2["id"])])

    def test_credential_injected_over_https(self):
        # python's urllib in the debian template, trusting only the system
        # store (which holds the gateway CA): the gateway intercepts TLS for
        # the bound host, injects, and verifies the real server itself
        project = "tls-" + os.urandom(3).hex()
        c, secret = self.credential(project, replace_in=["body"])   # the form bodies below
        sid = self.sandbox_in(project, template="debian")
        py = ("import os, sys, urllib.request\n"
              "data = sys.argv[2].replace('PH', os.environ['TEST_KEY']).encode() "
              "if len(sys.argv) > 2 else None\n"
              "if len(sys.argv) > 3:  # chunked: an iterable has no length\n"
              "    data = iter([data[:7], data[7:]])\n"
              "req = urllib.request.Request(sys.argv[1], data=data, headers={'Authorization': "
              "'Bearer ' + os.environ['TEST_KEY'], 'Content-Type': "
              "'application/x-www-form-urlencoded'})\n"
              "try:\n"
              "    print(urllib.request.urlopen(req, timeout=10).read().decode(), end='')\n"
              "except Exception as e:\n"
              "    print('failed', e); sys.exit(3)\n")
        self.api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/get.py", py)
        net0 = self.api.call("GET", f"/v1/sandboxes/{sid}/metrics")["network"]
        code, out, err = self.sh(sid, "python3 /tmp/get.py https://allowed.test/tls1")
        self.assertEqual((code, out), (0, "hello from allowed.test\n"), err)
        # the intercepted connection counts for the sandbox too: its side's
        # TLS records (the gateway CA's chain in, a ClientHello out at least)
        net1 = self.api.call("GET", f"/v1/sandboxes/{sid}/metrics")["network"]
        self.assertGreater(net1["bytes_in"] - net0["bytes_in"], 500, (net0, net1))
        self.assertGreater(net1["bytes_out"] - net0["bytes_out"], 200, (net0, net1))
        self.assertIn(f"auth=Bearer {secret}", self.requests_seen("/tls1")[-1])
        self.assertIn("injected", [a["decision"] for a in self.audit(c["id"])])
        # a form body, intercepted: the placeholder in it is replaced too (opted in)
        code, out, err = self.sh(sid, "python3 /tmp/get.py https://allowed.test/tls2 "
                                      "'grant=x&client_secret=PH'")
        want = f"grant=x&client_secret={secret}"
        self.assertEqual((code, out), (0, "posted %d\n" % len(want)), err)
        self.assertIn(f"len={len(want)} body={want}", self.posts_seen("/tls2")[-1])
        # the same, sent chunked (two chunks): decoded, replaced, and sent
        # on with its length
        code, out, err = self.sh(sid, "python3 /tmp/get.py https://allowed.test/tls3 "
                                      "'grant=x&client_secret=PH' chunked")
        self.assertEqual((code, out), (0, "posted %d\n" % len(want)), err)
        self.assertIn(f"len={len(want)} body={want}", self.posts_seen("/tls3")[-1])
        # first from the host (the grep below sends the secret in, as its
        # own argument)
        if harness.BACKEND == "vm":
            self.assert_not_in_vm(sid, secret)
        code, out, _ = self.sh(sid, "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; "
                                    f"grep -rl {secret} /etc /root /tmp /work /usr/local 2>/dev/null; true")
        self.assertNotIn(secret, out)

    def test_credential_large_body_over_https(self):
        # a body past 1 MiB (5 MiB here) streams through interception: the
        # head gets the credential; the body arrives byte-identical by
        # default, and with "body" opted in its placeholders (one across the
        # first TLS record's end) are replaced as it streams, re-framed
        # chunked
        py = ("import os, random, sys, urllib.request\n"
              "ph = os.environ['TEST_KEY'].encode()\n"
              "base = random.Random(7).randbytes(5 << 20)\n"
              "data = ph + base[:16380] + ph + base[16380:3 << 20] + ph + base[3 << 20:] + ph\n"
              "req = urllib.request.Request(sys.argv[1], data=data, headers={'Authorization': "
              "'Bearer ' + os.environ['TEST_KEY'], 'Content-Type': 'application/octet-stream'})\n"
              "try:\n"
              "    print(urllib.request.urlopen(req, timeout=60).read().decode(), end='')\n"
              "except Exception as e:\n"
              "    print('failed', e); sys.exit(3)\n")
        base = random.Random(7).randbytes(5 << 20)
        for replace_in, path in (([], "/big1"), (["body"], "/big2")):
            project = "big-" + os.urandom(3).hex()
            c, secret = self.credential(project, replace_in=replace_in)
            sid = self.sandbox_in(project, template="debian")
            self.api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/post.py", py)
            _, ph, _ = self.sh(sid, "printf %s \"$TEST_KEY\"")
            ph = ph.encode()
            sent = ph + base[:16380] + ph + base[16380:3 << 20] + ph + base[3 << 20:] + ph
            want = sent.replace(ph, secret.encode()) if replace_in else sent
            code, out, err = self.sh(sid, f"python3 /tmp/post.py https://allowed.test{path}")
            self.assertEqual((code, out), (0, "posted %d\n" % len(want)), err)
            self.assertIn(f"len={len(want)} body=sha256:{hashlib.sha256(want).hexdigest()}",
                          self.posts_seen(path)[-1])
            head = [l for l in self.world_lines() if l.startswith(f"posthead path={path} ")][-1]
            self.assertIn(f"auth=Bearer {secret} ", head)
            self.assertIn("framing=chunked" if replace_in else "framing=length", head)

    def test_intercepted_tls_holds_no_worker(self):
        # once its request is upstream an intercepted connection is carried
        # by the TLS loop: 6 of them (the class's cap is 8) waiting for a slow answer hold no
        # worker thread, and each gets its answer
        project = "loop-" + os.urandom(3).hex()
        c, secret = self.credential(project)
        sid = self.sandbox_in(project, template="debian")
        py = ("import os, threading, urllib.request\n"
              "def one(i):\n"
              "    req = urllib.request.Request('https://allowed.test/slow%d' % i, headers={"
              "'Authorization': 'Bearer ' + os.environ['TEST_KEY']})\n"
              "    try:\n"
              "        print(urllib.request.urlopen(req, timeout=30).read().decode(), end='')\n"
              "    except Exception as e:\n"
              "        print('failed', e)\n"
              "ts = [threading.Thread(target=one, args=(i,)) for i in range(6)]\n"
              "[t.start() for t in ts]\n"
              "[t.join() for t in ts]\n")
        self.api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/slow.py", py)
        self.sh(sid, "(python3 /tmp/slow.py > /tmp/slow.out 2>&1; echo done >> /tmp/slow.out) "
                     ">/dev/null 2>&1 &")
        st = None
        for _ in range(200):
            st = self.gateway_stats()
            # (a worker that just handed its connection over is busy
            # for a moment longer)
            if st.get("intercepted", 0) >= 6 and st["workers"] == st["workers_idle"]:
                break
            time.sleep(0.05)
        self.assertEqual(st.get("intercepted"), 6, st)
        self.assertEqual(st["workers"] - st["workers_idle"], 0, st)
        for _ in range(200):
            _, out, _ = self.sh(sid, "cat /tmp/slow.out")
            if "done" in out:
                break
            time.sleep(0.1)
        self.assertEqual(out.count("hello from allowed.test"), 6, out)
        self.assertEqual(len([l for l in self.world_lines()
                              if l.startswith("req ") and " path=/slow" in l
                              and f"auth=Bearer {secret} " in l]), 6)
        for _ in range(50):
            if self.gateway_stats()["intercepted"] == 0:
                break
            time.sleep(0.1)
        self.assertEqual(self.gateway_stats()["intercepted"], 0)

    def test_intercepted_setup_holds_no_worker(self):
        # a connection the gateway intercepts is set up on an event loop
        # too: 3 that stop inside the TLS handshake (a ClientHello, then
        # nothing) and 3 that stop inside the request head hold no worker
        # thread (GET /stats: workers == workers_idle, the 6 counted as
        # "intercepting"), and meanwhile an intercepted and a plain request
        # of the same sandbox (cap 8) are served; when they close, they end
        project = "stall-" + os.urandom(3).hex()
        c, secret = self.credential(project)
        sid = self.sandbox_in(project, template="debian")
        py = ("import socket, ssl, time\n"
              "ctx = ssl.create_default_context()\n"
              "held = []\n"
              "for i in range(3):\n"
              "    s = socket.create_connection(('allowed.test', 443))\n"
              "    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()\n"
              "    o = ctx.wrap_bio(inc, out, server_hostname='allowed.test')\n"
              "    try:\n"
              "        o.do_handshake()\n"
              "    except ssl.SSLWantReadError:\n"
              "        pass\n"
              "    s.sendall(out.read())\n"
              "    held.append(s)\n"
              "for i in range(3):\n"
              "    s = ctx.wrap_socket(socket.create_connection(('allowed.test', 443)),\n"
              "                        server_hostname='allowed.test')\n"
              "    s.sendall(b'GET /stall HTTP/1.1\\r\\nHost: allowed.test\\r\\n')\n"
              "    held.append(s)\n"
              "open('/tmp/stall.out', 'w').write('stalled\\n')\n"
              "time.sleep(120)\n")
        get = ("import os, sys, urllib.request\n"
               "req = urllib.request.Request(sys.argv[1], headers={'Authorization': "
               "'Bearer ' + os.environ['TEST_KEY']})\n"
               "print(urllib.request.urlopen(req, timeout=20).read().decode(), end='')\n")
        self.api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/stall.py", py)
        self.api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/get.py", get)
        self.sh(sid, "(python3 /tmp/stall.py > /tmp/stall.log 2>&1 & echo $! > /tmp/stall.pid) "
                     ">/dev/null 2>&1")
        out = ""
        for _ in range(200):
            _, out, _ = self.sh(sid, "cat /tmp/stall.out /tmp/stall.log 2>/dev/null")
            if out:
                break
            time.sleep(0.1)
        self.assertEqual(out, "stalled\n")
        st = None
        for _ in range(100):
            st = self.gateway_stats()
            if st.get("intercepting") == 6 and st["workers"] == st["workers_idle"]:
                break
            time.sleep(0.05)
        self.assertEqual(st.get("intercepting"), 6, st)
        self.assertEqual(st["workers"] - st["workers_idle"], 0, st)
        # the others still go through: intercepted (injected) and plain
        code, out, err = self.sh(sid, "python3 /tmp/get.py https://allowed.test/unstalled")
        self.assertEqual((code, out), (0, "hello from allowed.test\n"), err)
        self.assertIn(f"auth=Bearer {secret}", self.requests_seen("/unstalled")[-1])
        code, out, err = self.sh(sid, "python3 -c \"import urllib.request; print(urllib.request"
                                      ".urlopen('http://other.allowed.test/', timeout=20).read()"
                                      ".decode(), end='')\"")
        self.assertEqual((code, out), (0, "hello from other.allowed.test\n"), err)
        st = self.gateway_stats()
        self.assertEqual(st["intercepting"], 6, st)
        self.assertEqual(st["workers"] - st["workers_idle"], 0, st)
        self.assertEqual(self.requests_seen("/stall"), [])
        # the stalled ones end with their client
        self.sh(sid, "kill $(cat /tmp/stall.pid)")
        for _ in range(100):
            if self.gateway_stats()["intercepting"] == 0:
                break
            time.sleep(0.1)
        self.assertEqual(self.gateway_stats()["intercepting"], 0)

    def test_credential_not_sent_to_a_fronted_host(self):
        # domain fronting: TLS to the bound host (SNI allowed.test, which
        # chose the credential) with a Host naming another origin on the
        # same address: 421 from the gateway, nothing injected, nothing sent
        project = "front-" + os.urandom(3).hex()
        c, secret = self.credential(project)
        sid = self.sandbox_in(project, template="debian")
        py = ("import http.client, os, sys\n"
              "conn = http.client.HTTPSConnection('allowed.test', timeout=10)\n"
              "conn.putrequest('GET', sys.argv[2], skip_host=True)\n"
              "conn.putheader('Host', sys.argv[1])\n"
              "conn.putheader('Authorization', 'Bearer ' + os.environ['TEST_KEY'])\n"
              "conn.endheaders()\n"
              "r = conn.getresponse()\n"
              "print(r.status, r.read().decode(errors='replace').strip())\n")
        self.api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/front.py", py)
        for host in ("denied.test", "other.allowed.test", "DENIED.test:443"):
            code, out, err = self.sh(sid, f"python3 /tmp/front.py {host} /front")
            self.assertEqual(code, 0, err)
            self.assertTrue(out.startswith("421 "), out)
        self.assertEqual(self.requests_seen("/front"), [])
        self.assertNotIn(secret, "\n".join(self.world_lines()))
        self.assertNotIn("injected", [a["decision"] for a in self.audit(c["id"])])
        # the same origin, however spelled, is still served and injected
        code, out, err = self.sh(sid, "python3 /tmp/front.py Allowed.Test:443 /front-ok")
        self.assertEqual((code, out), (0, "200 hello from Allowed.Test:443\n"), err)
        self.assertIn(f"auth=Bearer {secret}", self.requests_seen("/front-ok")[-1])

    def test_credential_not_sent_to_a_fronted_host_over_http(self):
        # the same over plain HTTP: the gateway checked the first Host; an
        # absolute target naming another origin (which a front routes by,
        # before Host) gets 421, a second Host field 400; nothing injected,
        # nothing sent on
        project = "fronth-" + os.urandom(3).hex()
        c, secret = self.credential(project, schemes=["http"])
        sid = self.sandbox_in(project)
        for req, want in (("GET http://denied.test/fronthttp HTTP/1.1\\r\\nHost: allowed.test", "421"),
                          ("GET /fronthttp HTTP/1.1\\r\\nHost: allowed.test\\r\\nHost: denied.test",
                           "400")):
            _, out, _ = self.sh(sid, f"printf '{req}\\r\\n\\r\\n' | timeout 10 nc allowed.test 80 "
                                     "| head -1")
            self.assertTrue(out.startswith(f"HTTP/1.1 {want} "), (req, out))
        self.assertFalse([l for l in self.world_lines() if "fronthttp" in l])
        self.assertNotIn("injected", [a["decision"] for a in self.audit(c["id"])])

    def assert_not_in_vm(self, sid, secret):
        """The guest's whole memory (a full snapshot's memory file, or its
        stream, holds every page of guest RAM) and its disk image, read
        from the host, hold the placeholder the guest used but never the
        secret. (Checked before anything of the test sends the secret into
        the guest.)"""
        code, ph, _ = self.sh(sid, "printf %s \"$TEST_KEY\"")
        self.assertTrue(ph.startswith("airlock-ph-"), ph)
        snap = self.api.call("POST", f"/v1/sandboxes/{sid}/snapshots",
                             {"kind": "full", "name": "memgrep"}, expect=(201,))
        pool = os.path.join(self.server.dir, "pool")
        state = os.path.join(pool, "snapshots", sid, snap["id"] + ".mem")
        if not os.path.exists(state):
            state = os.path.join(pool, "snapshots", sid, snap["id"] + ".vmstate")
        disk = os.path.join(pool, "sandboxes", sid, "rootfs.ext4")
        for path, what in ((state, "memory"), (disk, "disk")):
            with open(path, "rb") as f:
                data = f.read()
            self.assertGreater(len(data), 64 << 20, path)
            self.assertFalse(secret.encode() in data, f"the secret is in the guest's {what}")
            if what == "memory":
                # the grep can see what the guest holds: its placeholder
                self.assertTrue(ph.encode() in data, "the placeholder is not in the memory")
            del data
        self.api.call("DELETE", f"/v1/sandboxes/{sid}/snapshots/{snap['id']}")

    def test_network_after_rollback_fork_and_recovery(self):
        # every way a guest comes up again has its network: a fork child
        # (an address of its own; vm: the parent's memory, the same eth0,
        # translated to the child's address by its own namespace), a
        # rollback (vm full: memory restored; disk: a fresh boot) and crash
        # recovery (the jail killed)
        vm = harness.BACKEND == "vm"
        sid = self.sandbox({"allow": {"domains": ["allowed.test"]}})
        addr = self.addr(sid)

        def reaches(s, path):
            code, out, err = self.get(s, f"http://allowed.test/{path}")
            self.assertEqual((code, out), (0, "hello from allowed.test\n"), (path, err))
            self.assertTrue([e for e in self.log(s) if e["host"] == "allowed.test"
                             and e["decision"] == "allow"], self.log(s))
            self.assertNotEqual(self.get(s, "http://denied.test/")[0], 0)

        reaches(sid, "lc0")
        snap = self.api.call("POST", f"/v1/sandboxes/{sid}/snapshots",
                             {"kind": "full" if vm else "disk", "name": "lc"}, expect=(201,))
        kid = self.api.call("POST", f"/v1/sandboxes/{sid}/fork", {"from_snapshot": "lc"},
                            expect=(201,))["sandboxes"][0]["id"]
        self.addCleanup(self.api.delete, kid)
        kid_addr = self.addr(kid)
        self.assertNotEqual(kid_addr, addr)
        code, out, _ = self.sh(kid, "ip -4 addr show eth0")
        self.assertIn(f"inet {VM_GUEST_ADDR}/30" if vm else f"inet {kid_addr}/31", out)
        self.assertNotIn(f"inet {addr}/", out)
        reaches(kid, "lc-fork")
        reaches(sid, "lc1")     # the parent still has its own
        if vm:
            # every clone restores the template's MAC: harmless, as each
            # sandbox is an L2 segment of its own (its tap, in its namespace)
            macs = {self.sh(s, "cat /sys/class/net/eth0/address")[1] for s in (sid, kid)}
            self.assertEqual(len(macs), 1, macs)
        self.api.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": "lc"})
        reaches(sid, "lc-rollback")
        if vm:
            # a disk snapshot rolls a vm back by booting it afresh
            self.api.call("POST", f"/v1/sandboxes/{sid}/snapshots",
                          {"kind": "disk", "name": "lcd"}, expect=(201,))
            self.api.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": "lcd"})
            reaches(sid, "lc-boot")
        pid = self.jail_pid(sid)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 300
        while True:
            sb = self.api.call("GET", f"/v1/sandboxes/{sid}")
            if sb["state"] == "running" and sb["recovered_from"]:
                break
            self.assertLess(time.monotonic(), deadline, sb)
            time.sleep(0.1)
        self.assertEqual(self.addr(sid), addr)
        reaches(sid, "lc-recovered")

    def jail_pid(self, sid):
        ((pid,),) = self.db_rows("SELECT jail_pid FROM sandboxes WHERE id=?", sid)
        self.assertTrue(pid and pid > 1, pid)
        return pid

    def test_other_tenant_gets_404(self):
        sid = self.sandbox()
        _, other = self.new_tenant(f"net-other-{os.getpid()}")
        for method, path, body in (("GET", "network", None), ("GET", "network/log", None),
                                   ("PATCH", "network", "allow-all")):
            st, _, _ = other.raw(method, f"/v1/sandboxes/{sid}/{path}",
                                 json.dumps(body) if body else None)
            self.assertEqual(st, 404, (method, path))
        self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{sid}/network")["network"]["default"],
                         "allow")

    def test_bad_policies(self):
        for bad in ({"default": "maybe"}, {"allow": {"domains": ["bad name"]}},
                    {"deny": {"cidrs": ["10.0.0.0/33"]}}, {"allow": {"ports": [0]}},
                    {"allow": {"hosts": []}}, "allow-some", 7):
            st, body, _ = self.api.raw("POST", "/v1/sandboxes",
                                       {"template": "busybox", "network": bad})
            self.assertEqual(st, 400, body)
            self.assertIn(b'"error"', body)
        sid = self.sandbox()
        st, body, _ = self.api.raw("PATCH", f"/v1/sandboxes/{sid}/network",
                                   {"default": "maybe"})
        self.assertEqual(st, 400, body)
        st, body, _ = self.api.raw("PATCH", f"/v1/sandboxes/{sid}/network", "{not json")
        self.assertEqual(st, 400, body)

    def test_links_removed_with_sandbox(self):
        sb = self.api.create(template="busybox")
        sid = sb["id"]
        addr = self.addr(sid)
        a = addr.split(".")
        host_end = ".".join(a[:3] + [str(int(a[3]) - 1)])
        # the host end of its veth holds the other address of the /31
        mine = [l.split()[1] for l in run("ip", "-o", "-4", "addr").stdout.splitlines()
                if f" {host_end}/31 " in l]
        self.assertEqual(len(mine), 1, mine)
        self.assertTrue(mine[0].startswith(self.prefix), mine)
        links = run("ip", "-o", "link").stdout
        self.assertIn(mine[0] + "@", links)
        # no IPv6 on the host end
        self.assertNotIn(mine[0], run("ip", "-o", "-6", "addr").stdout)
        self.api.delete(sid)
        self.assertNotIn(mine[0] + "@", run("ip", "-o", "link").stdout)
        self.assertNotIn(f" {host_end}/31 ", run("ip", "-o", "-4", "addr").stdout)
        st, _, _ = self.api.raw("GET", f"/v1/sandboxes/{sid}/network/log")
        self.assertIn(st, (404, 409))

    def test_spoofed_source_dropped(self):
        # nftables drops what does not route back through the interface it
        # came in on: the table holds that rule for every sandbox interface
        rules = run("nft", "list", "table", "inet", self.table).stdout
        self.assertIn("fib saddr . iif oif missing drop", rules)
        if harness.BACKEND != "vm":
            # an ns sandbox cannot take another address (no CAP_NET_ADMIN)
            sid = self.sandbox()
            code, out, _ = self.sh(sid, "ip addr add 10.251.250.7/32 dev eth0")
            self.assertNotEqual(code, 0)
            return
        # a vm guest's root owns its kernel and may take any address, even
        # another sandbox's, to borrow that one's policy: nothing it sends
        # from it gets through
        sid = self.sandbox("deny-all")
        other = self.sandbox()          # allow-all (the test /24 is allowed)
        other_addr = self.addr(other)
        code, out, err = self.sh(sid, f"ip addr add {other_addr}/32 dev eth0")
        self.assertEqual(code, 0, err)
        before = len(self.world_lines())
        code, out, _ = self.sh(
            sid, f"printf 'GET /spoof HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n' | "
                 f"timeout 10 nc -s {other_addr} -w 3 {WORLD_IP} 80")
        self.assertNotIn("hello", out)
        self.assertFalse([l for l in self.world_lines()[before:] if "/spoof" in l])
        self.assertFalse([e for e in self.log(other) if e["ip"] == WORLD_IP], self.log(other))
        # the same request from its own address is the deny-all policy's
        code, out, _ = self.sh(
            sid, f"printf 'GET /own HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n' | "
                 f"timeout 10 nc -w 3 {WORLD_IP} 80")
        self.assertNotIn("hello", out)
        self.assertTrue([e for e in self.log(sid) if e["decision"] == "deny"], self.log(sid))


@unittest.skipUnless(harness.BACKEND == "vm", "vm_snapshots is a setting of the vm backend")
class VmColdBootNetworkTest(AirlockTestCase):
    """vm_snapshots = false: every vm boots cold (no template memory
    snapshot, no pool) and still gets its address from the clone reset.
    The gateway's DNS answering a name it was told proves the whole path:
    guest eth0 (the fixed vm address, set in the guest's own boot), tap,
    the namespace's translation, veth, nftables redirect, gateway."""
    extra_args = ("--set", "vm_snapshots=false", "--set", "gateway_hosts=cold.test=192.0.2.7",
                  "--set", "network_allow_private_cidrs=192.0.2.0/24")

    def test_cold_boot_has_network(self):
        sb = self.api.create(template="busybox")
        self.addCleanup(self.api.delete, sb["id"])
        addr = self.api.call("GET", f"/v1/sandboxes/{sb['id']}/network")["addr"]
        self.assertTrue(addr)
        code, out, _, _ = self.api.exec(sb["id"], ["sh", "-c", "ip -4 addr show eth0; ip route"])
        self.assertIn(f"inet {VM_GUEST_ADDR}/30".encode(), out)
        self.assertIn(f"default via {VM_GUEST_GW}".encode(), out)
        code, out, _, _ = self.api.exec(sb["id"], ["nslookup", "cold.test"])
        self.assertEqual(code, 0, out)
        self.assertIn(b"192.0.2.7", out)


class NetworkOffTest(AirlockTestCase):
    """`network = false`: no table, no gateway, sandboxes keep only lo."""
    extra_args = ("--set", "network=false")

    def test_no_network(self):
        h = fnv(self.server.dir)
        self.assertNotIn(f"airlock-{h:08x}", run("nft", "list", "tables").stdout)
        self.assertFalse(os.path.exists(os.path.join(self.server.dir, "run", "gateway.sock")))
        sb = self.api.create(template="busybox")
        self.addCleanup(self.api.delete, sb["id"])
        code, out, _, _ = self.api.exec(sb["id"], ["sh", "-c", "cat /proc/net/dev | tail -n +3 | cut -d: -f1"])
        if harness.BACKEND == "vm":
            # every QEMU has the NIC (a template's saved device state must
            # fit every clone) and every guest its fixed address, but nothing
            # is behind the tap: no veth, no route out of QEMU's namespace
            self.assertEqual(sorted(out.split()), [b"eth0", b"lo"])
            code, out, _, _ = self.api.exec(
                sb["id"], ["sh", "-c", f"echo x | nc -w 2 {VM_GUEST_GW} 53; "
                                       "echo x | nc -w 2 192.0.2.1 80"])
            self.assertNotEqual(code, 0)
        else:
            self.assertEqual(out.split(), [b"lo"])
        st, body, _ = self.api.raw("GET", f"/v1/sandboxes/{sb['id']}/network")
        self.assertEqual(st, 501, body)


if __name__ == "__main__":
    main()
