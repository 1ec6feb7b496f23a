"""Port forwarding into a sandbox, through the guest agent's channel: the HTTP
reverse proxy (GET, POST, streamed large answers), a WebSocket upgrade, the raw
TCP tunnel through `airlock port-forward`, host-routed URLs with access tokens,
tenancy, a service's cookies kept on its own host (no Domain), and the
errors for a closed port and for an answer that is no HTTP/1.x.

The services inside the sandbox come from the busybox template: `httpd` (with a
CGI script that echoes the request), `nc -ll -e cat` as a TCP echo, and a
WebSocket endpoint made of `nc -e` and a shell script that does the real
handshake (Sec-WebSocket-Accept = base64(sha1(key + GUID))) and then echoes
bytes, so frames sent by the client come back unchanged."""
import base64
import hashlib
import json
import os
import re
import socket
import subprocess
import threading
import time

from harness import AirlockTestCase, CLI, main

DOMAIN = "ports.test"
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

CGI = r"""#!/bin/sh
echo "Content-Type: text/plain"
echo ""
echo "method=$REQUEST_METHOD"
echo "uri=$REQUEST_URI"
echo "query=$QUERY_STRING"
echo "host=$HTTP_HOST"
if [ -n "$CONTENT_LENGTH" ]; then echo "body=$(head -c "$CONTENT_LENGTH")"; fi
"""

CAPTURE = r"""#!/bin/sh
# One request on stdin (run by nc -e): keep its head in /tmp/req.txt, answer ok.
: > /tmp/req.txt
while IFS= read -r line; do
  line=$(printf '%s' "$line" | tr -d '\r')
  [ -z "$line" ] && break
  printf '%s\n' "$line" >> /tmp/req.txt
done
printf 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive, X-Svc-Hop\r\nX-Svc-Hop: 1\r\nX-Svc: kept\r\n\r\nok'
"""

COOKIES = r"""#!/bin/sh
echo "Content-Type: text/plain"
echo "Set-Cookie: x=1; Domain=ports.test; Path=/"
echo "Set-Cookie: y=2; domain=.PORTS.TEST; HttpOnly"
echo "Set-Cookie: airlock_port_token=planted; Path=/"
echo ""
echo "cookies"
"""

LENIENT = r"""#!/bin/sh
# One request on stdin (run by nc -e): read its head, answer with a head that
# a browser would still read (lowercase "http/") but is no HTTP/1.x to us.
while IFS= read -r line; do
  line=$(printf '%s' "$line" | tr -d '\r')
  [ -z "$line" ] && break
done
printf 'http/1.1 200 OK\r\nSet-Cookie: z=1; Domain=ports.test\r\n\r\nhi'
"""

WS = r"""#!/bin/sh
# One WebSocket connection on stdin/stdout (run by nc -e): the handshake, then echo.
key=""
while IFS= read -r line; do
  line=$(printf '%s' "$line" | tr -d '\r')
  [ -z "$line" ] && break
  case "$line" in
    [Ss]ec-[Ww]eb[Ss]ocket-[Kk]ey:*) key=$(printf '%s' "${line#*:}" | tr -d ' ') ;;
  esac
done
accept=$(printf '%s' "${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11" | sha1sum | cut -d' ' -f1 | xxd -r -p | base64)
printf 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n' "$accept"
exec cat
"""


def recv_until_closed(s):
    out = bytearray()
    while True:
        d = s.recv(65536)
        if not d:
            return bytes(out)
        out += d


def http_raw(addr, head, body=b""):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=120)
    try:
        s.sendall(head + body)
        return recv_until_closed(s)
    finally:
        s.close()


def split_response(data):
    # busybox httpd passes a CGI script's own "\n" line ends on.
    head, body = re.split(rb"\r?\n\r?\n", data, maxsplit=1) if re.search(rb"\r?\n\r?\n", data) \
        else (data, b"")
    lines = head.decode("latin-1").replace("\r", "").split("\n")
    status = int(lines[0].split()[1])
    headers = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, body


class PortsTest(AirlockTestCase):
    extra_args = ("--set", f"ports_domain={DOMAIN}")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        api = cls.api
        cls.sid = api.create()["id"]
        sid = cls.sid
        api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/www/cgi-bin/echo&mode=0755", CGI)
        api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/www/index.html", "hello from the sandbox\n")
        api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/ws.sh&mode=0755", WS)
        api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/capture.sh&mode=0755", CAPTURE)
        api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/www/cgi-bin/cookies&mode=0755", COOKIES)
        api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/lenient.sh&mode=0755", LENIENT)
        code, _, err, _ = api.exec(sid, ["sh", "-c", "head -c 20971520 /dev/urandom > /www/big"])
        assert code == 0, err
        code, out, _, _ = api.exec(sid, ["sha256sum", "/www/big"])
        cls.big_sha = out.split()[0].decode()
        # Long-running services: their exec streams are left after "start".
        for cmd in (["busybox", "httpd", "-f", "-p", "8080", "-h", "/www"],
                    ["busybox", "nc", "-ll", "-p", "9000", "-e", "/bin/cat"],
                    ["busybox", "nc", "-ll", "-p", "9001", "-e", "/ws.sh"],
                    ["busybox", "nc", "-ll", "-p", "9002", "-e", "/capture.sh"],
                    ["busybox", "nc", "-ll", "-p", "9003", "-e", "/bin/true"],
                    ["busybox", "nc", "-ll", "-p", "9004", "-e", "/lenient.sh"]):
            for ev in api.stream("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd}):
                assert ev["type"] == "start", ev
                break
        # Ready when the proxy stops answering 502 (nothing listens yet).
        deadline = time.time() + 120
        while True:
            status, _, _ = api.raw("GET", f"/v1/sandboxes/{sid}/ports/8080/index.html")
            if status == 200:
                break
            assert status == 502 and time.time() < deadline, status
            time.sleep(0.1)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.api.delete(cls.sid)
        finally:
            super().tearDownClass()

    def test_http_get_post(self):
        sid = self.sid
        status, data, r = self.api.raw("GET", f"/v1/sandboxes/{sid}/ports/8080/index.html")
        self.assertEqual(status, 200)
        self.assertEqual(data, b"hello from the sandbox\n")
        status, data, _ = self.api.raw("GET", f"/v1/sandboxes/{sid}/ports/8080/cgi-bin/echo?a=1&b=two")
        self.assertEqual(status, 200, data)
        lines = data.decode()
        self.assertIn("method=GET", lines)
        self.assertIn("query=a=1&b=two", lines)
        self.assertIn("host=localhost:8080", lines)       # Host rewritten
        status, data, _ = self.api.raw("POST", f"/v1/sandboxes/{sid}/ports/8080/cgi-bin/echo",
                                       b"posted-body", {"Content-Type": "text/plain"})
        self.assertEqual(status, 200, data)
        self.assertIn("method=POST", data.decode())
        self.assertIn("body=posted-body", data.decode())
        status, _, _ = self.api.raw("GET", f"/v1/sandboxes/{sid}/ports/8080/missing")
        self.assertEqual(status, 404)

    def test_request_as_the_service_sees_it(self):
        sid = self.sid
        status, data, r = self.api.raw(
            "GET", f"/v1/sandboxes/{sid}/ports/9002/a/b?c=d",
            headers={"X-Custom": "kept", "Keep-Alive": "timeout=5", "Connection": "X-Hop",
                     "X-Hop": "dropped", "X-Airlock-Tenant": "someone-else"})
        self.assertEqual((status, data), (200, b"ok"))
        # The answer's hop-by-hop headers are the service's hop, not ours.
        self.assertEqual(r.getheader("X-Svc"), "kept")
        self.assertIsNone(r.getheader("Keep-Alive"))
        self.assertIsNone(r.getheader("X-Svc-Hop"))
        self.assertEqual(r.getheader("Connection"), "close")
        head = self.api.call("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/req.txt").decode()
        lines = head.splitlines()
        self.assertEqual(lines[0], "GET /a/b?c=d HTTP/1.1")
        low = head.lower()
        self.assertIn("host: localhost:9002", low)
        self.assertIn("x-custom: kept", low)
        self.assertIn(f"x-forwarded-prefix: /v1/sandboxes/{sid}/ports/9002", low)
        self.assertIn("x-forwarded-for: 127.0.0.1", low)
        self.assertIn("connection: close", low)
        # Hop-by-hop headers, our identity headers and the API key stay out.
        self.assertNotIn("x-hop", low)
        self.assertNotIn("keep-alive", low)
        self.assertNotIn("x-airlock", low)
        self.assertNotIn("authorization", low)
        self.assertNotIn(self.server.admin_key, head)

    def test_paused_sandbox_is_resumed(self):
        sid = self.sid
        self.api.call("POST", f"/v1/sandboxes/{sid}/pause")
        self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{sid}")["state"], "paused")
        status, data, _ = self.api.raw("GET", f"/v1/sandboxes/{sid}/ports/8080/index.html")
        self.assertEqual((status, data), (200, b"hello from the sandbox\n"))
        self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{sid}")["state"], "running")

    def test_large_download_intact(self):
        # 20 MiB through a window of 512 KiB: only flow control lets it
        # arrive whole while the client reads at its own pace.
        status, data, _ = self.api.raw("GET", f"/v1/sandboxes/{self.sid}/ports/8080/big")
        self.assertEqual(status, 200)
        self.assertEqual(len(data), 20 << 20)
        self.assertEqual(hashlib.sha256(data).hexdigest(), self.big_sha)

    def test_closed_port_is_502(self):
        status, data, _ = self.api.raw("GET", f"/v1/sandboxes/{self.sid}/ports/8099/")
        self.assertEqual(status, 502)
        err = json.loads(data)["error"]
        self.assertEqual(err["code"], "bad_gateway")
        self.assertIn("8099", err["message"])
        # Something listens, but closes without answering: 502 too.
        status, data, _ = self.api.raw("GET", f"/v1/sandboxes/{self.sid}/ports/9003/")
        self.assertEqual(status, 502, data)
        self.assertEqual(json.loads(data)["error"]["code"], "bad_gateway")
        status, data, _ = self.api.raw("GET", f"/v1/sandboxes/{self.sid}/ports/0/")
        self.assertEqual(status, 400)
        status, data, _ = self.api.raw("GET", f"/v1/sandboxes/{self.sid}/ports/70000/")
        self.assertEqual(status, 400)

    def test_no_second_request_behind_a_relay(self):
        # After an answer relayed from the node, nothing else the client
        # sends on that connection may reach the node unchecked (it would
        # carry identity headers of the client's choosing).
        _, other = self.new_tenant("ports-smuggler")
        first = (f"GET /v1/sandboxes/{self.sid}/ports/8099/ HTTP/1.1\r\nHost: x\r\n"
                 f"Authorization: Bearer {other.key}\r\nConnection: keep-alive\r\n\r\n")
        second = (f"GET /v1/sandboxes/{self.sid} HTTP/1.1\r\nHost: x\r\n"
                  "X-Airlock-Tenant: admin\r\nX-Airlock-Admin: 1\r\n\r\n")
        data = http_raw(self.server.addr, (first + second).encode())
        self.assertEqual(data.count(b"HTTP/1.1 "), 1, data)
        self.assertTrue(data.startswith(b"HTTP/1.1 404"), data)
        self.assertNotIn(self.sid.encode() + b'","tenant"', data)

    def test_other_tenant_gets_404(self):
        _, other = self.new_tenant("ports-other")
        for path in (f"/v1/sandboxes/{self.sid}/ports/8080/index.html",
                     f"/v1/sandboxes/{self.sid}/tunnel/9000"):
            status, data, _ = other.raw("GET", path, headers={"Connection": "Upgrade",
                                                                "Upgrade": "airlock-tcp"})
            self.assertEqual(status, 404, data)
        status, _, _ = other.raw("POST", f"/v1/sandboxes/{self.sid}/port-tokens", {"port": 8080})
        self.assertEqual(status, 404)
        # Unauthenticated: 401, as every API path.
        status, _, _ = other.raw("GET", f"/v1/sandboxes/{self.sid}/ports/8080/", auth=False)
        self.assertEqual(status, 401)

    def _ws_handshake(self, addr, path, extra=b""):
        host, port = addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=120)
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall((f"GET {path} HTTP/1.1\r\nHost: {addr}\r\n"
                   "Connection: Upgrade\r\nUpgrade: websocket\r\n"
                   f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n").encode()
                  + extra + b"\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(4096)
            self.assertTrue(d, buf)
            buf += d
        head, _, rest = buf.partition(b"\r\n\r\n")
        status, headers, _ = split_response(head + b"\r\n\r\n")
        return s, key, status, headers, rest

    def test_websocket_echo(self):
        s, key, status, headers, rest = self._ws_handshake(
            self.server.addr, f"/v1/sandboxes/{self.sid}/ports/9001/chat",
            f"Authorization: Bearer {self.server.admin_key}\r\n".encode())
        try:
            self.assertEqual(status, 101)
            self.assertEqual(headers["upgrade"].lower(), "websocket")
            want = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
            self.assertEqual(headers["sec-websocket-accept"], want)
            payload = b"hello over websocket"
            mask = os.urandom(4)
            frame = bytes([0x81, 0x80 | len(payload)]) + mask + \
                bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            s.sendall(frame)
            got = rest
            while len(got) < len(frame):
                d = s.recv(4096)
                self.assertTrue(d)
                got += d
            # The echo returns the frame as sent: decode it as a server would.
            self.assertEqual(got[0], 0x81)
            n = got[1] & 0x7f
            m = got[2:6]
            self.assertEqual(bytes(b ^ m[i % 4] for i, b in enumerate(got[6:6 + n])), payload)
        finally:
            s.close()

    def _port_forward(self, remote, local=0):
        p = subprocess.Popen([CLI, "--config", os.path.join(self.server.dir, "cli.json"),
                              "port-forward", self.sid, f"{local}:{remote}"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = p.stdout.readline().decode()
        if not line.startswith("Forwarding 127.0.0.1:"):
            self._stop(p)
            self.fail(f"port-forward did not start: {line!r}")
        lport = int(line.split()[1].rsplit(":", 1)[1])
        return p, lport

    def _stop(self, p):
        p.stdout.close()
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def test_tcp_tunnel_echo_large(self):
        p, lport = self._port_forward(9000)
        try:
            data = os.urandom(20 << 20)
            s = socket.create_connection(("127.0.0.1", lport), timeout=120)
            # Send everything, then half-close; the echo ends when cat sees
            # EOF. Reading happens in parallel so neither side can block.
            t = threading.Thread(target=lambda: (s.sendall(data), s.shutdown(socket.SHUT_WR)))
            t.start()
            got = recv_until_closed(s)
            t.join()
            s.close()
            self.assertEqual(len(got), len(data))
            self.assertEqual(hashlib.sha256(got).digest(), hashlib.sha256(data).digest())
            # A second connection through the same forwarder.
            s = socket.create_connection(("127.0.0.1", lport), timeout=120)
            s.sendall(b"ping\n")
            s.shutdown(socket.SHUT_WR)
            self.assertEqual(recv_until_closed(s), b"ping\n")
            s.close()
        finally:
            self._stop(p)

    def test_tunnel_needs_upgrade(self):
        status, data, _ = self.api.raw("GET", f"/v1/sandboxes/{self.sid}/tunnel/9000")
        self.assertEqual(status, 400, data)

    def test_host_routed_url_with_token(self):
        sid, addr = self.sid, self.server.addr
        host = f"8080-{sid}.{DOMAIN}"
        # Without a token: 401.
        status, _, body = split_response(http_raw(
            addr, f"GET /index.html HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()))
        self.assertEqual(status, 401, body)
        tok = self.api.call("POST", f"/v1/sandboxes/{sid}/port-tokens", {"port": 8080})
        self.assertEqual(tok["host"], host)
        t = tok["token"]
        # As a header.
        status, _, body = split_response(http_raw(
            addr, (f"GET /index.html HTTP/1.1\r\nHost: {host}\r\nX-Airlock-Port-Token: {t}\r\n"
                   "Connection: close\r\n\r\n").encode()))
        self.assertEqual((status, body), (200, b"hello from the sandbox\n"))
        # Once in the URL: a redirect without it, and a cookie for the host.
        status, headers, _ = split_response(http_raw(
            addr, f"GET /cgi-bin/echo?x=1&airlock_token={t} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()))
        self.assertEqual(status, 302)
        self.assertEqual(headers["location"], "/cgi-bin/echo?x=1")
        cookie = headers["set-cookie"].split(";")[0]
        status, _, body = split_response(http_raw(
            addr, (f"GET /cgi-bin/echo?x=1 HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n"
                   "Connection: close\r\n\r\n").encode()))
        self.assertEqual(status, 200, body)
        self.assertIn(b"query=x=1", body)
        self.assertIn(b"uri=/cgi-bin/echo?x=1", body)
        # The token opens only its own port and sandbox.
        other_port = f"9001-{sid}.{DOMAIN}"
        status, _, _ = split_response(http_raw(
            addr, (f"GET / HTTP/1.1\r\nHost: {other_port}\r\nX-Airlock-Port-Token: {t}\r\n"
                   "Connection: close\r\n\r\n").encode()))
        self.assertEqual(status, 401)
        other_sid = self.api.create()["id"]
        try:
            status, _, _ = split_response(http_raw(
                addr, (f"GET / HTTP/1.1\r\nHost: 8080-{other_sid}.{DOMAIN}\r\n"
                       f"X-Airlock-Port-Token: {t}\r\nConnection: close\r\n\r\n").encode()))
            self.assertEqual(status, 401)
        finally:
            self.api.delete(other_sid)
        # The token is not an API key.
        status, _, _ = self.api.raw("GET", "/v1/sandboxes", headers={"Authorization": f"Bearer {t}"},
                                    auth=False)
        self.assertEqual(status, 401)
        # A wrong token.
        status, _, _ = split_response(http_raw(
            addr, (f"GET / HTTP/1.1\r\nHost: {host}\r\nX-Airlock-Port-Token: alp_{'0' * 40}\r\n"
                   "Connection: close\r\n\r\n").encode()))
        self.assertEqual(status, 401)

    def test_host_routed_token_cookie_planted_before_the_real_one(self):
        # Another sandbox's page can set an airlock_port_token cookie for the
        # whole ports domain with script; the browser may send it before the
        # visitor's own. The real token further along the header still lets
        # the visitor in (each cookie tried, a few at most), and a request
        # with only planted ones is 401.
        sid, addr = self.sid, self.server.addr
        host = f"9002-{sid}.{DOMAIN}"
        t = self.api.call("POST", f"/v1/sandboxes/{sid}/port-tokens", {"port": 9002})["token"]
        wrong = "alp_" + "0" * 40

        def get(cookie):
            status, _, _ = split_response(http_raw(addr, (
                f"GET /seen HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n"
                "Connection: close\r\n\r\n").encode()))
            return status

        self.assertEqual(get(f"airlock_port_token=planted; airlock_port_token={wrong}; "
                             f"a=1; airlock_port_token={t}"), 200)
        self.assertEqual(get(f"airlock_port_token={wrong}; airlock_port_token=planted"), 401)

    def test_host_routed_api_key_never_reaches_service(self):
        # The owner's API key authenticates a host-routed request however
        # the scheme and the space after it are spelled; it must never be
        # forwarded to the service, nor the token cookie or header, nor our
        # identity headers. (A tab is not accepted as a key by the api, so
        # that request also carries a token; its key still stays out.)
        sid, addr, key = self.sid, self.server.addr, self.server.admin_key
        host = f"9002-{sid}.{DOMAIN}"
        t = self.api.call("POST", f"/v1/sandboxes/{sid}/port-tokens", {"port": 9002})["token"]
        spellings = [f"Bearer {key}", f"Bearer  {key}", f"bearer {key}", f"BEARER {key}",
                     f"Bearer {key} ", f"Bearer\t{key}", f"Bearer \t {key}"]
        for auth in spellings:
            extra = f"X-Airlock-Port-Token: {t}\r\n" if "\t" in auth else ""
            self.api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/req.txt", "")
            status, _, body = split_response(http_raw(addr, (
                f"GET /seen HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth}\r\n{extra}"
                f"Cookie: a=1; airlock_port_token={t}; b=2\r\n"
                "X-Airlock-Tenant: someone-else\r\nForwarded: for=1.2.3.4\r\n"
                "Connection: close\r\n\r\n").encode()))
            self.assertEqual((status, body), (200, b"ok"), repr(auth))
            head = self.api.call("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/req.txt").decode()
            self.assertIn("GET /seen HTTP/1.1", head, repr(auth))
            self.assertNotIn(key, head, repr(auth))
            self.assertNotIn(key[3:], head, repr(auth))
            self.assertNotIn(t, head, repr(auth))
            low = head.lower()
            self.assertNotIn("authorization", low, repr(auth))
            self.assertNotIn("x-airlock", low, repr(auth))
            self.assertIn("cookie: a=1; b=2", low, repr(auth))
        # A client's Forwarded would contradict the X-Forwarded-* we set.
        self.assertNotIn("forwarded: ", low)
        # The service's own credentials still pass (basic auth, its bearer).
        for auth in ("Basic dXNlcjpwYXNz", "Bearer service-token"):
            status, _, _ = split_response(http_raw(addr, (
                f"GET /svc HTTP/1.1\r\nHost: {host}\r\nX-Airlock-Port-Token: {t}\r\n"
                f"Authorization: {auth}\r\nConnection: close\r\n\r\n").encode()))
            self.assertEqual(status, 200)
            head = self.api.call("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/req.txt").decode()
            self.assertIn(f"Authorization: {auth}", head)

    def test_host_routed_redirect_stays_on_host(self):
        # The redirect that takes ?airlock_token= out of the URL goes to a
        # path of the same host, never to another site named by the target.
        sid, addr = self.sid, self.server.addr
        host = f"8080-{sid}.{DOMAIN}"
        t = self.api.call("POST", f"/v1/sandboxes/{sid}/port-tokens",
                          {"port": 8080, "ttl_s": 600})["token"]
        for target in ("//evil.example", "//evil.example/x", "/\\evil.example/x",
                       "/\\/evil.example", "///evil.example/"):
            status, headers, _ = split_response(http_raw(addr, (
                f"GET {target}?airlock_token={t} HTTP/1.1\r\nHost: {host}\r\n"
                "Connection: close\r\n\r\n").encode()))
            self.assertEqual(status, 302, target)
            loc = headers["location"]
            self.assertEqual(loc, "/", target)
        status, headers, _ = split_response(http_raw(addr, (
            f"GET /a/b?x=1&airlock_token={t} HTTP/1.1\r\nHost: {host}\r\n"
            "Connection: close\r\n\r\n").encode()))
        self.assertEqual((status, headers["location"]), (302, "/a/b?x=1"))
        # The cookie: this host only (no Domain), the narrowest attributes,
        # until the token expires; Secure once a TLS front says https.
        attrs = [a.strip() for a in headers["set-cookie"].split(";")]
        self.assertEqual(attrs[0], f"airlock_port_token={t}")
        self.assertEqual(set(attrs[1:]) - {a for a in attrs if a.startswith("Max-Age=")},
                         {"Path=/", "HttpOnly", "SameSite=Lax"})
        max_age = int([a for a in attrs if a.startswith("Max-Age=")][0].split("=")[1])
        self.assertTrue(550 <= max_age <= 600, max_age)
        status, headers, _ = split_response(http_raw(addr, (
            f"GET /?airlock_token={t} HTTP/1.1\r\nHost: {host}\r\n"
            "X-Forwarded-Proto: https\r\nConnection: close\r\n\r\n").encode()))
        self.assertIn("Secure", [a.strip() for a in headers["set-cookie"].split(";")])

    def test_service_cookies_stay_on_its_host(self):
        # A service's Set-Cookie for the whole ports domain would reach every
        # other sandbox's host-routed URL: the node makes it host-only (no
        # Domain), and drops a cookie named as the proxy's token.
        sid, addr = self.sid, self.server.addr
        host = f"8080-{sid}.{DOMAIN}"
        t = self.api.call("POST", f"/v1/sandboxes/{sid}/port-tokens", {"port": 8080})["token"]
        data = http_raw(addr, (f"GET /cgi-bin/cookies HTTP/1.1\r\nHost: {host}\r\n"
                               f"X-Airlock-Port-Token: {t}\r\nConnection: close\r\n\r\n").encode())
        head = re.split(rb"\r?\n\r?\n", data, maxsplit=1)[0].decode("latin-1")
        cookies = [l.split(":", 1)[1].strip() for l in head.replace("\r", "").split("\n")[1:]
                   if l.lower().startswith("set-cookie")]
        self.assertTrue(head.startswith("HTTP/1.") and " 200 " in head.split("\n")[0], head)
        self.assertEqual(cookies, ["x=1; Path=/", "y=2; HttpOnly"], head)
        self.assertNotIn("domain", head.lower())
        # The same under the API path.
        status, data, r = self.api.raw("GET", f"/v1/sandboxes/{sid}/ports/8080/cgi-bin/cookies")
        self.assertEqual(status, 200)
        self.assertEqual(r.headers.get_all("Set-Cookie"), ["x=1; Path=/", "y=2; HttpOnly"])

    def test_answer_head_no_http_is_502(self):
        # A head a browser would read ("http/1.1") but we cannot rewrite is
        # not passed on: its Set-Cookie would keep its Domain.
        sid, addr = self.sid, self.server.addr
        host = f"9004-{sid}.{DOMAIN}"
        t = self.api.call("POST", f"/v1/sandboxes/{sid}/port-tokens", {"port": 9004})["token"]
        data = http_raw(addr, (f"GET / HTTP/1.1\r\nHost: {host}\r\nX-Airlock-Port-Token: {t}\r\n"
                               "Connection: close\r\n\r\n").encode())
        status, headers, body = split_response(data)
        self.assertEqual(status, 502, data)
        self.assertNotIn("set-cookie", headers)
        self.assertIn(b"bad_gateway", body)

    def test_doctor_checks_ports_domain(self):
        # The server's doctor says whether ports_domain is a site apart
        # from the API's host (here an address, so only the name is judged).
        rep = self.api.call("GET", "/v1/node/doctor")
        checks = [c for c in rep["checks"] if c["name"] == "ports_domain"]
        self.assertEqual(len(checks), 1, rep)
        self.assertEqual(checks[0]["status"], "ok", checks)
        self.assertIn(DOMAIN, checks[0]["detail"])

    def test_delete_ends_open_tunnel(self):
        # A tunnel that stays open must not keep its sandbox from going away.
        sid = self.api.create()["id"]
        for ev in self.api.stream("POST", f"/v1/sandboxes/{sid}/exec",
                                  {"cmd": ["busybox", "nc", "-ll", "-p", "9000", "-e", "/bin/cat"]}):
            break
        host, port = self.server.addr.rsplit(":", 1)
        deadline = time.time() + 120
        while True:
            s = socket.create_connection((host, int(port)), timeout=120)
            s.sendall((f"GET /v1/sandboxes/{sid}/tunnel/9000 HTTP/1.1\r\nHost: x\r\n"
                       f"Authorization: Bearer {self.server.admin_key}\r\n"
                       "Connection: Upgrade\r\nUpgrade: airlock-tcp\r\n\r\n").encode())
            head = s.recv(4096)
            if head.startswith(b"HTTP/1.1 101"):
                break
            s.close()
            self.assertIn(b" 502 ", head)
            self.assertLess(time.time(), deadline)
            time.sleep(0.1)
        s.sendall(b"x")
        got = head.partition(b"\r\n\r\n")[2]
        while not got:
            got += s.recv(10)
        self.assertEqual(got, b"x")
        self.api.delete(sid)
        self.assertEqual(recv_until_closed(s), b"")
        s.close()


if __name__ == "__main__":
    main()
