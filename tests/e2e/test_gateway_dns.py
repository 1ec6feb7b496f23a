"""The gateway's own name resolution: asynchronous (c-ares), cached by TTL,
with a cap of lookups waiting per sandbox.

A test "world" (its own network namespace, joined to the host by a veth
with test addresses) runs a tiny DNS server and a plain HTTP server. The
gateway is pointed at that DNS server (gateway_dns_servers), so no query
leaves the machine. The DNS server answers from a JSON file the test
rewrites: {"name": {"a": ["ip", ...], "ttl": s}} or {"name": "hang"} (never
answered), and notes every query it gets. The operator allows the world's
/24 as a private range. busybox's wget cannot resolve names (no NSS in the
template), so sandboxes name the test hosts in /etc/hosts; the gateway still
resolves the Host header itself, through the world's DNS server."""
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
from harness import AirlockTestCase, main

SUB = 100 + (os.getpid() + 37) % 100
NET = f"10.250.{SUB}"
HOST_IP, WORLD_IP, WORLD_IP2 = f"{NET}.1", f"{NET}.2", f"{NET}.3"
NET6 = f"fd00:a1:{SUB}::"
HOST_IP6, WORLD_IP6 = f"{NET6}1", f"{NET6}2"
NS = f"aldn-{os.getpid()}"
VETH = f"aldn{os.getpid() % 100000}"
MAX_PENDING = 2

WORLD = r'''
import http.server, json, socket, socketserver, struct, sys, threading
ips, cfgpath, logpath = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
lock = threading.Lock()
def note(line):
    with lock, open(logpath, "a") as f:
        f.write(line + "\n")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from " + (self.headers.get("Host") or "?").encode() + b"\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
def qname(data):
    labels, i = [], 12
    while data[i]:
        labels.append(data[i + 1:i + 1 + data[i]].decode())
        i += 1 + data[i]
    qtype = struct.unpack(">H", data[i + 1:i + 3])[0]
    return ".".join(labels).lower(), qtype, i + 5
def dns():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ips[0], 53))
    while True:
        data, peer = s.recvfrom(2048)
        try:
            name, qtype, end = qname(data)
        except Exception:
            continue
        note("query %s %d" % (name, qtype))
        with open(cfgpath) as f:
            cfg = json.load(f)
        e = cfg.get(name)
        if e == "hang":
            continue
        rcode, answers = 3, []          # NXDOMAIN unless named
        if isinstance(e, dict):
            rcode = 0
            if qtype == 1:
                for ip in e.get("a", []):
                    answers.append(b"\xc0\x0c\x00\x01\x00\x01" + struct.pack(">IH", e["ttl"], 4)
                                   + socket.inet_aton(ip))
            if qtype == 28:
                for ip in e.get("aaaa", []):
                    answers.append(b"\xc0\x0c\x00\x1c\x00\x01" + struct.pack(">IH", e["ttl"], 16)
                                   + socket.inet_pton(socket.AF_INET6, ip))
        resp = data[:2] + struct.pack(">HHHHH", 0x8180 | rcode, 1, len(answers), 0, 0)
        resp += data[12:end] + b"".join(answers)
        s.sendto(resp, peer)
servers = []
for ip in ips:
    fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
    cls = type("S%d" % len(servers), (S,), {"address_family": fam})
    servers.append(cls((ip, 80), H))
for fn in [dns] + [srv.serve_forever for srv in servers]:
    threading.Thread(target=fn, daemon=True).start()
note("ready")
threading.Event().wait()
'''


def run(*cmd, check=True):
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


class GatewayDnsTest(AirlockTestCase):
    extra_args = ("--set", f"network_allow_private_cidrs={NET}.0/24,{NET6}/64",
                  "--set", f"gateway_dns_servers={WORLD_IP}:53",
                  "--set", f"gateway_dns_max_pending={MAX_PENDING}")

    @classmethod
    def setUpClass(cls):
        cls.world = None
        cls.tmp = tempfile.mkdtemp(prefix="airlock-dns-")
        cls.world_log = os.path.join(cls.tmp, "world.log")
        cls.dns_cfg = os.path.join(cls.tmp, "dns.json")
        try:
            cls.make_world()
            super().setUpClass()
        except Exception:
            cls.destroy_world()
            raise

    @classmethod
    def make_world(cls):
        cls.set_dns({})
        run("ip", "netns", "add", NS)
        run("ip", "link", "add", VETH, "type", "veth", "peer", "name", "w0", "netns", NS)
        run("ip", "addr", "add", f"{HOST_IP}/24", "dev", VETH)
        run("ip", "-6", "addr", "add", f"{HOST_IP6}/64", "dev", VETH, "nodad")
        run("ip", "link", "set", VETH, "up")
        run("ip", "netns", "exec", NS, "ip", "-6", "addr", "add", f"{WORLD_IP6}/64", "dev", "w0",
            "nodad")
        for ip in (WORLD_IP, WORLD_IP2):
            run("ip", "netns", "exec", NS, "ip", "addr", "add", f"{ip}/24", "dev", "w0")
        run("ip", "netns", "exec", NS, "ip", "link", "set", "w0", "up")
        run("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
        with open(f"{cls.tmp}/world.py", "w") as f:
            f.write(WORLD)
        cls.world = harness.start_world(
            NS, [sys.executable, f"{cls.tmp}/world.py",
                 f"{WORLD_IP},{WORLD_IP2},{WORLD_IP6}", cls.dns_cfg, cls.world_log], cls.world_log)

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
        finally:
            cls.destroy_world()

    # ---- helpers ----

    @classmethod
    def set_dns(cls, cfg):
        tmp = cls.dns_cfg + ".tmp"
        with open(tmp, "w") as f:
            json.dump(cfg, f)
        os.replace(tmp, cls.dns_cfg)

    def queries(self, name, qtype=1):
        with open(self.world_log) as f:
            return sum(1 for l in f if l.strip() == f"query {name} {qtype}")

    def sandbox(self, names=()):
        sb = self.api.create(template="busybox")
        self.addCleanup(self.api.delete, sb["id"])
        if names:
            hosts = "".join(f"{WORLD_IP} {n}\n" for n in names)
            self.sh(sb["id"], f"printf '{hosts}' >> /etc/hosts")
        return sb["id"]

    def sh(self, sid, script):
        code, out, err, _ = self.api.exec(sid, ["sh", "-c", script])
        return code, out.decode(errors="replace"), err.decode(errors="replace")

    def timed(self, sid, script):
        t0 = time.monotonic()
        r = self.sh(sid, script)
        return r, time.monotonic() - t0

    def lookup(self, sid, name):
        """The addresses the gateway answers the sandbox for name."""
        code, out, _ = self.sh(sid, f"nslookup {name}")
        tail = out.split("Name:", 1)[-1] if "Name:" in out else ""
        return code, re.findall(r"Address:\s*(\d+\.\d+\.\d+\.\d+)", tail), out

    def log(self, sid):
        return self.api.call("GET", f"/v1/sandboxes/{sid}/network/log")["entries"]

    def wait_for(self, pred, timeout=10):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():
                return True
            time.sleep(0.05)
        return False

    # ---- tests ----

    def test_ttl_honoured(self):
        sid = self.sandbox()
        self.set_dns({"ttl.test": {"a": [WORLD_IP], "ttl": 3}})
        code, addrs, out = self.lookup(sid, "ttl.test")
        t_first = time.monotonic()
        self.assertEqual((code, addrs), (0, [WORLD_IP]), out)
        self.assertEqual(self.queries("ttl.test"), 1)
        # the answer changes upstream; within the TTL the cached one stays
        self.set_dns({"ttl.test": {"a": [WORLD_IP2], "ttl": 3}})
        code, addrs, out = self.lookup(sid, "ttl.test")
        self.assertLess(time.monotonic() - t_first, 2.5, "too slow to test within the TTL")
        self.assertEqual((code, addrs), (0, [WORLD_IP]), out)
        self.assertEqual(self.queries("ttl.test"), 1, "asked upstream again within the TTL")
        # a proxied connection by name uses the same cache (no new query)
        sid2 = self.sandbox(["ttl.test"])
        code, out, _ = self.sh(sid2, "timeout 10 wget -q -O - http://ttl.test/")
        self.assertEqual(code, 0, out)
        self.assertEqual(self.queries("ttl.test"), 1)
        # after the TTL: the new answer
        time.sleep(max(0, t_first + 3.3 - time.monotonic()))
        code, addrs, out = self.lookup(sid, "ttl.test")
        self.assertEqual((code, addrs), (0, [WORLD_IP2]), out)
        self.assertEqual(self.queries("ttl.test"), 2)

    def test_hanging_server_blocks_nobody(self):
        self.set_dns({"hang.test": "hang", "fast.test": {"a": [WORLD_IP], "ttl": 60},
                      "cached.test": {"a": [WORLD_IP], "ttl": 60}})
        slow = self.sandbox(["hang.test"])
        other = self.sandbox(["cached.test"])
        self.assertEqual(self.lookup(other, "cached.test")[:2], (0, [WORLD_IP]))
        # the slow sandbox's lookups hang upstream (a query and a connection)
        self.sh(slow, "(nslookup -type=a hang.test >/dev/null 2>&1 &); "
                      "(wget -q -O /dev/null http://hang.test/ >/dev/null 2>&1 &)")
        self.assertTrue(self.wait_for(lambda: self.queries("hang.test") >= 1),
                        "the hanging lookup never reached the server")
        # meanwhile another sandbox's lookups and connections go on at once
        (code, out, _), dt1 = self.timed(other, "nslookup fast.test")
        self.assertEqual(code, 0, out)
        self.assertLess(dt1, 1.0, f"an uncached lookup took {dt1:.2f}s while another hangs")
        (code, out, _), dt2 = self.timed(other, "timeout 5 wget -q -O - http://cached.test/")
        self.assertEqual((code, out), (0, "hello from cached.test\n"))
        self.assertLess(dt2, 1.0, f"a connection by cached name took {dt2:.2f}s")
        (code, out, _), dt3 = self.timed(other, f"timeout 5 wget -q -O - http://{WORLD_IP}/")
        self.assertEqual(code, 0, out)
        self.assertLess(dt3, 1.0, f"a connection to a literal address took {dt3:.2f}s")
        print(f"\n  while a lookup hangs, another sandbox's exec of: nslookup (uncached) "
              f"{dt1:.3f}s, wget by cached name {dt2:.3f}s, wget to a literal {dt3:.3f}s",
              file=sys.stderr)
        # the hanging lookup ends (c-ares gives up): the connection is denied
        self.assertTrue(self.wait_for(lambda: [e for e in self.log(slow)
                                               if e["host"] == "hang.test"
                                               and e["proto"] == "http"
                                               and e["rule"] == "unresolved"], 20),
                        self.log(slow))

    def test_pending_cap(self):
        names = [f"hang{i}.test" for i in range(MAX_PENDING + 1)]
        self.set_dns({**{n: "hang" for n in names}, "free.test": {"a": [WORLD_IP], "ttl": 60}})
        sid = self.sandbox(names)
        for n in names[:MAX_PENDING]:
            self.sh(sid, f"(wget -q -O /dev/null http://{n}/ >/dev/null 2>&1 &)")
        self.assertTrue(self.wait_for(lambda: all(self.queries(n) for n in names[:MAX_PENDING])))
        # one more is refused at once, and the log says why
        (code, out, err), dt = self.timed(sid, f"timeout 5 wget -q -O - http://{names[-1]}/")
        self.assertNotEqual(code, 0)
        self.assertLess(dt, 1.0)
        self.assertIn("403", err)
        self.assertEqual(self.queries(names[-1]), 0, "a lookup over the cap was sent")
        self.assertTrue([e for e in self.log(sid) if e["host"] == names[-1]
                         and e["decision"] == "deny" and e["rule"] == "dns lookup limit"],
                        self.log(sid))
        # a DNS query over the cap: REFUSED at once
        (code, out, _), dt = self.timed(sid, f"nslookup {names[-1]}")
        self.assertNotEqual(code, 0)
        self.assertIn("REFUSED", out)
        self.assertLess(dt, 1.0)
        # the cap is per sandbox: another one resolves meanwhile
        other = self.sandbox()
        self.assertEqual(self.lookup(other, "free.test")[:2], (0, [WORLD_IP]))
        # and once the lookups end, the sandbox may resolve again
        self.assertTrue(self.wait_for(lambda: self.lookup(sid, "free.test")[:2]
                                      == (0, [WORLD_IP]), 20))

    def test_ipv6_upstream(self):
        """A name with only IPv6 addresses is dialled over IPv6 (the world's
        ULA, which the operator allows); IPv6 loopback and an address the
        operator did not allow are denied, and the log names the address."""
        self.set_dns({"v6only.test": {"aaaa": [WORLD_IP6], "ttl": 60},
                      "v6loop.test": {"aaaa": ["::1"], "ttl": 60},
                      "v6other.test": {"aaaa": ["fd00:a1:ffff::2"], "ttl": 60}})
        sid = self.sandbox(["v6only.test", "v6loop.test", "v6other.test"])
        code, out, err = self.sh(sid, "timeout 10 wget -q -O - http://v6only.test/")
        if code != 0:
            print(self.log(sid), self.server.log()[-6000:], file=sys.stderr)
        self.assertEqual((code, out), (0, "hello from v6only.test\n"), err)
        log = self.log(sid)
        self.assertTrue([e for e in log if e["host"] == "v6only.test" and e["proto"] == "http"
                         and e["ip"] == WORLD_IP6 and e["decision"] == "allow"], log)
        for name, rule in (("v6loop.test", "host"), ("v6other.test", "private")):
            code, _, err = self.sh(sid, f"timeout 10 wget -q -O - http://{name}/")
            self.assertNotEqual(code, 0)
            self.assertIn("403", err)
            log = self.log(sid)
            self.assertTrue([e for e in log if e["host"] == name and e["decision"] == "deny"
                             and e["rule"] == rule and ":" in (e["ip"] or "")], log)
        # default deny: an IPv6 destination is reached through allow.domains only
        self.api.call("PATCH", f"/v1/sandboxes/{sid}/network",
                      {"network": {"default": "deny", "allow": {"domains": ["v6only.test"]}}})
        code, out, _ = self.sh(sid, "timeout 10 wget -q -O - http://v6only.test/")
        self.assertEqual((code, out), (0, "hello from v6only.test\n"))

    def test_ipv6_only_name_by_dns(self):
        """Sandboxes have no IPv6 route: a name with only IPv6 addresses
        that the policy allows is answered with the stand-in 192.0.0.8, and
        a connection to it by name reaches the host over IPv6 (no
        /etc/hosts entry here); a name whose IPv6 addresses are refused gets
        no address, and the stand-in by itself is refused."""
        self.set_dns({"v6name.test": {"aaaa": [WORLD_IP6], "ttl": 60},
                      "v6deny.test": {"aaaa": ["fd00:a1:ffff::2"], "ttl": 60}})
        sid = self.sandbox()
        code, addrs, out = self.lookup(sid, "v6name.test")
        self.assertEqual((code, addrs), (0, ["192.0.0.8"]), out)
        code, out, err = self.sh(sid, "timeout 10 wget -q -O - http://v6name.test/")
        self.assertEqual((code, out), (0, "hello from v6name.test\n"), err)
        log = self.log(sid)
        self.assertTrue([e for e in log if e["host"] == "v6name.test" and e["proto"] == "http"
                         and e["ip"] == WORLD_IP6 and e["decision"] == "allow"], log)
        self.assertEqual(self.lookup(sid, "v6deny.test")[1], [])
        code, _, err = self.sh(sid, "timeout 10 wget -q -O - http://192.0.0.8/")
        self.assertNotEqual(code, 0)
        self.assertIn("403", err)


if __name__ == "__main__":
    main()
