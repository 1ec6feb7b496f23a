"""The desktop (docs/API.md, "Desktop"): the built-in `desktop` template,
built on first use in this instance (Debian bookworm with Xvfb, xfce4,
xdotool, scrot, x11vnc, noVNC); the native calls through the real daemons
(a screenshot is a PNG of the screen's size; a click and typing into an
xterm make it run a command whose file we read back; the pointer lands where
it was sent; bad bodies are 400; another tenant 404; a sandbox without the
tools 409; the stream's URL opens noVNC with its token and not without);
then the unmodified @e2b/desktop 2.4.0 (tests/e2b/desktop.mjs) through the
E2B layer, whose stream URL (https://6080-<id>.<ports_domain>/vnc.html)
loads in Debian's headless chromium through a TLS relay on loopback (a
certificate from tests/e2e/testpki.py) and shows the desktop: a screenshot
of that page goes to <build>/test-artifacts/desktop/. ns backend."""
import base64
import http.client
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time

import harness
from harness import AirlockTestCase, main
from testpki import make_ca, make_cert

DOMAIN = "sbx.test"
E2B_DIR = os.path.join(harness.SRC, "tests", "e2b")
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = os.path.abspath(os.path.join(harness.BIN, "..", "test-artifacts", "desktop"))


def png_size(data):
    """(width, height) from a PNG's IHDR; fails on anything else."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


class TlsRelay:
    """TLS on 127.0.0.1:<port> (a certificate for *.DOMAIN from a test CA),
    bytes relayed to the api's plain listener: the https:// of the stream
    URL the SDK makes, on loopback only. Threads end with the sockets."""

    def __init__(self, pki, target):
        ca_key, self.ca = make_ca(pki, "desktop-ca")
        key, crt = make_cert(pki, "relay", ca_key, self.ca, f"DNS:*.{DOMAIN},DNS:localhost")
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(crt, key)
        self.target = target
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        try:
            c.settimeout(30)
            t = self.ctx.wrap_socket(c, server_side=True)
            t.settimeout(None)
            host, port = self.target.rsplit(":", 1)
            u = socket.create_connection((host, int(port)))
        except (OSError, ssl.SSLError):
            c.close()
            return

        def pump(a, b):
            try:
                while True:
                    d = a.recv(65536)
                    if not d:
                        break
                    b.sendall(d)
            except OSError:
                pass
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        th = threading.Thread(target=pump, args=(u, t), daemon=True)
        th.start()
        pump(t, u)
        th.join(60)
        t.close()
        u.close()

    def close(self):
        self.stop = True
        self.sock.close()


class DesktopTest(AirlockTestCase):
    extra_args = ("--set", f"ports_domain={DOMAIN}")

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(os.path.join(E2B_DIR, "node_modules", "@e2b", "desktop")):
            subprocess.run(["sh", os.path.join(E2B_DIR, "setup.sh")], check=True)
        super().setUpClass()
        cls.tenant, cls.a = cls.new_tenant(cls, "desk-a")
        _, cls.b = cls.new_tenant(cls, "desk-b")
        t0 = time.time()
        # the first create of `desktop` builds the template (on demand)
        cls.sid = cls.a.call("POST", "/v1/sandboxes",
                             {"template": "desktop", "backend": "ns"})["id"]
        print(f"desktop template built and sandbox created in {time.time() - t0:.1f} s")
        tpl = [t for t in cls.api.call("GET", "/v1/templates")["templates"]
               if t["name"] == "desktop"]
        print("desktop template:", json.dumps(tpl))

    def exec(self, client, sid, cmd, env=None):
        body = {"cmd": cmd}
        if env:
            body["env"] = env
        st, data, _ = client.raw("POST", f"/v1/sandboxes/{sid}/exec", body)
        self.assertEqual(st, 200, data)
        out, code = b"", None
        for line in data.splitlines():
            ev = json.loads(line)
            if ev.get("type") == "stdout":
                out += base64.b64decode(ev["data"])
            if ev.get("type") == "exit":
                code = ev.get("exit_code")
        return code, out

    def desk(self, client, what, body=None, sid=None):
        sid = sid or self.sid
        return client.raw("POST", f"/v1/sandboxes/{sid}/desktop/{what}", body)

    def test_1_native(self):
        a, sid = self.a, self.sid
        t0 = time.time()
        st, shot1, r = self.desk(a, "screenshot")
        self.assertEqual(st, 200, shot1[:300])
        print(f"first screenshot (desktop started) in {time.time() - t0:.1f} s")
        self.assertEqual(r.getheader("Content-Type"), "image/png")
        self.assertEqual(png_size(shot1), (1024, 768))
        t0 = time.time()
        st, _, _ = self.desk(a, "screenshot", {})
        self.assertEqual(st, 200)
        print(f"second screenshot in {time.time() - t0:.2f} s")
        # the desktop is the sandbox's own processes
        code, out = self.exec(a, sid, ["sh", "-c", "pgrep -x Xvfb && pgrep -x xfwm4"])
        self.assertEqual(code, 0, out)

        # the pointer goes where it is sent
        st, data, _ = self.desk(a, "mouse", {"action": "move", "x": 500, "y": 400})
        self.assertEqual(st, 204, data)
        code, out = self.exec(a, sid, ["xdotool", "getmouselocation"], {"DISPLAY": ":0"})
        self.assertIn(b"x:500 y:400", out)

        # an xterm at the top left; click into it, type a command, Return
        code, out = self.exec(a, sid, ["sh", "-c",
                                       "setsid xterm -geometry 80x24+0+0 -e /bin/bash --norc"
                                       " </dev/null >/dev/null 2>&1 &"], {"DISPLAY": ":0"})
        self.assertEqual(code, 0, out)
        deadline = time.time() + 60
        while time.time() < deadline:
            code, out = self.exec(a, sid, ["xdotool", "search", "--onlyvisible", "--class",
                                           "xterm"], {"DISPLAY": ":0"})
            if code == 0 and out.strip():
                break
            time.sleep(0.3)
        self.assertTrue(out.strip(), "the xterm window did not appear")
        time.sleep(1)
        st, data, _ = self.desk(a, "mouse", {"action": "click", "x": 150, "y": 150})
        self.assertEqual(st, 204, data)
        st, data, _ = self.desk(a, "keyboard", {"type": "echo typed-by-airlock >/tmp/typed.txt"})
        self.assertEqual(st, 204, data)
        st, data, _ = self.desk(a, "keyboard", {"keys": "Return"})
        self.assertEqual(st, 204, data)
        got = None
        deadline = time.time() + 30
        while time.time() < deadline:
            st, got, _ = a.raw("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/typed.txt")
            if st == 200:
                break
            time.sleep(0.3)
        self.assertEqual((st, got), (200, b"typed-by-airlock\n"))
        st, shot2, _ = self.desk(a, "screenshot")
        self.assertEqual(st, 200)
        self.assertNotEqual(shot1, shot2, "the screen shows the xterm now")
        os.makedirs(ARTIFACTS, exist_ok=True)
        with open(os.path.join(ARTIFACTS, "native-screenshot.png"), "wb") as f:
            f.write(shot2)

        # the other actions run (xdotool exits 0)
        for body in ({"action": "double_click", "x": 150, "y": 150},
                     {"action": "scroll", "direction": "down", "amount": 3},
                     {"action": "scroll", "direction": "up", "x": 100, "y": 100},
                     {"action": "drag", "x": 600, "y": 600, "to_x": 700, "to_y": 650},
                     {"action": "middle_click"},
                     {"action": "click", "button": "right", "x": 800, "y": 600},
                     {"action": "right_click"}):
            st, data, _ = self.desk(a, "mouse", body)
            self.assertEqual(st, 204, (body, data))
        st, data, _ = self.desk(a, "keyboard", {"keys": "Escape"})
        self.assertEqual(st, 204, data)
        st, data, _ = self.desk(a, "keyboard", {"keys": "ctrl+a BackSpace", })
        self.assertEqual(st, 204, data)
        code, out = self.exec(a, sid, ["xdotool", "getmouselocation"], {"DISPLAY": ":0"})
        self.assertIn(b"x:800 y:600", out)

    def test_1b_cli(self):
        """`airlock desktop ...` as the owner (after test_1: its xterm is up)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        d = tempfile.mkdtemp(prefix="airlock-desktop-cli-")
        self.addCleanup(shutil.rmtree, d, True)
        env.update(AIRLOCK_URL=f"http://{self.server.addr}", AIRLOCK_API_KEY=self.a.key,
                   AIRLOCK_CONFIG="", HOME=d)

        def cli(*args, check=True):
            r = subprocess.run([harness.CLI] + list(args), capture_output=True, env=env,
                               timeout=120)
            if check and r.returncode != 0:
                self.fail(f"airlock {args} -> {r.returncode}: {r.stderr.decode()}")
            return r

        out = os.path.join(d, "shot.png")
        r = cli("desktop", "screenshot", self.sid, out)
        self.assertEqual(r.stdout.decode().strip(), out)
        with open(out, "rb") as f:
            self.assertEqual(png_size(f.read()), (1024, 768))
        cli("desktop", "click", self.sid, "150", "150")
        cli("desktop", "key", self.sid, "ctrl+u")
        cli("desktop", "type", self.sid, "echo from-the-cli >/tmp/cli.txt")
        cli("desktop", "key", self.sid, "Return")
        deadline = time.time() + 30
        while time.time() < deadline:
            st, got, _ = self.a.raw("GET", f"/v1/sandboxes/{self.sid}/files?path=/tmp/cli.txt")
            if st == 200:
                break
            time.sleep(0.3)
        self.assertEqual((st, got), (200, b"from-the-cli\n"))
        cli("desktop", "move", self.sid, "40", "50")
        code, out = self.exec(self.a, self.sid, ["xdotool", "getmouselocation"], {"DISPLAY": ":0"})
        self.assertIn(b"x:40 y:50", out)
        url = cli("desktop", "stream", self.sid).stdout.decode().strip()
        self.assertTrue(url.startswith(f"http://6080-{self.sid}.{DOMAIN}:"), url)
        self.assertIn("airlock_token=alp_", url)
        # bad input: refused by the CLI (usage) or the server (400)
        self.assertNotEqual(cli("desktop", "click", self.sid, "1", check=False).returncode, 0)
        r = cli("desktop", "key", self.sid, "ctrl+c;id", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"invalid_field", r.stderr)

    def test_2_bad_input_and_other_tenant(self):
        a, b, sid = self.a, self.b, self.sid
        bad_mouse = [{}, {"action": "jump"}, {"action": "move"}, {"action": "move", "x": 1},
                     {"action": "move", "x": -1, "y": 0}, {"action": "move", "x": 1, "y": 99999},
                     {"action": "move", "x": "1", "y": 2}, {"action": "click", "button": "4"},
                     {"action": "click", "x": 1.5, "y": 2}, {"action": "drag", "x": 1, "y": 1},
                     {"action": "move", "x": 1, "y": 1, "to_x": 2, "to_y": 2},
                     {"action": "scroll", "amount": 0}, {"action": "scroll", "amount": 101},
                     {"action": "scroll", "direction": "sideways"},
                     {"action": "click", "amount": 2}, {"action": "move", "x": 1, "y": 1, "z": 1}]
        for body in bad_mouse:
            st, data, _ = self.desk(a, "mouse", body)
            self.assertEqual(st, 400, (body, data))
            self.assertIn(json.loads(data)["error"]["code"], ("invalid_field", "unknown_field"))
        bad_kbd = [{}, {"type": ""}, {"type": "a", "keys": "b"}, {"type": "x\x01y"},
                   {"type": "a" * 4097}, {"type": 5}, {"keys": "ctrl+c; rm -rf /"},
                   {"keys": "-x"}, {"keys": "a+"}, {"keys": "$(id)"}, {"keys": "a  b"},
                   {"keys": "Return", "delay_ms": 5}, {"type": "a", "delay_ms": 5000},
                   {"keys": "x" * 33}, {"keys": " ".join(["a"] * 17)}]
        for body in bad_kbd:
            st, data, _ = self.desk(a, "keyboard", body)
            self.assertEqual(st, 400, (body, data))
        st, data, _ = a.raw("POST", f"/v1/sandboxes/{sid}/desktop/mouse", b"not json",
                            {"Content-Type": "application/json"})
        self.assertEqual(st, 400)
        st, _, _ = self.desk(a, "screenshot", {"format": "jpeg"})
        self.assertEqual(st, 400)
        st, _, _ = a.raw("GET", f"/v1/sandboxes/{sid}/desktop/screenshot")
        self.assertEqual(st, 405)
        # another tenant: 404 for everything, nothing runs
        for what, body in (("screenshot", None), ("mouse", {"action": "click"}),
                           ("keyboard", {"keys": "Return"})):
            st, data, _ = self.desk(b, what, body)
            self.assertEqual(st, 404, (what, data))
        st, _, _ = b.raw("GET", f"/v1/sandboxes/{sid}/desktop/stream")
        self.assertEqual(st, 404)
        # a sandbox without the tools
        other = a.call("POST", "/v1/sandboxes", {"template": "busybox", "backend": "ns"})["id"]
        try:
            st, data, _ = self.desk(a, "screenshot", sid=other)
            self.assertEqual(st, 409, data)
            self.assertEqual(json.loads(data)["error"]["code"], "desktop_unavailable")
        finally:
            a.call("DELETE", f"/v1/sandboxes/{other}")

    def test_3_stream(self):
        a, sid = self.a, self.sid
        st, data, _ = a.raw("GET", f"/v1/sandboxes/{sid}/desktop/stream")
        self.assertEqual(st, 200, data)
        s = json.loads(data)
        self.assertEqual(s["port"], 6080)
        host = f"6080-{sid}.{DOMAIN}"
        self.assertTrue(s["url"].startswith(f"http://{host}:{self.server.port}/vnc.html?"), s)
        self.assertIn("airlock_token=" + s["token"], s["url"])
        # a second call finds it running and gives another token
        st, data, _ = a.raw("GET", f"/v1/sandboxes/{sid}/desktop/stream")
        self.assertEqual(st, 200, data)
        # the port URL: 401 without the token; the token trades for a cookie
        path = s["url"].split(host + f":{self.server.port}", 1)[1]
        c = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        c.request("GET", "/vnc.html", headers={"Host": host})
        r = c.getresponse()
        r.read()
        self.assertEqual(r.status, 401)
        c.request("GET", path, headers={"Host": host})
        r = c.getresponse()
        r.read()
        self.assertEqual(r.status, 302)
        cookie = r.getheader("Set-Cookie").split(";")[0]
        c.close()
        c = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        c.request("GET", r.getheader("Location"), headers={"Host": host, "Cookie": cookie})
        r = c.getresponse()
        page = r.read()
        c.close()
        self.assertEqual(r.status, 200)
        self.assertIn(b"noVNC", page)
        # noVNC's WebSocket through the same URL and cookie: the VNC server's
        # banner arrives in the first binary frame
        sk = socket.create_connection(("127.0.0.1", self.server.port), timeout=60)
        try:
            sk.sendall((f"GET /websockify HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n"
                        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: binary\r\n\r\n"
                        ).encode())
            got = b""
            while b"\r\n\r\n" not in got:
                d = sk.recv(4096)
                self.assertTrue(d, got)
                got += d
            head, rest = got.split(b"\r\n\r\n", 1)
            self.assertTrue(head.startswith(b"HTTP/1.1 101"), head)
            while len(rest) < 14:
                d = sk.recv(4096)
                self.assertTrue(d, rest)
                rest += d
            self.assertEqual(rest[0], 0x82, rest[:16])      # FIN, binary
            self.assertEqual(rest[2:9], b"RFB 003", rest[:16])
        finally:
            sk.close()
        # x11vnc and websockify listen on the sandbox's loopback only
        code, out = self.exec(a, sid, ["netstat", "-tln"])
        for line in out.decode().splitlines():
            if ":5900 " in line or ":6080 " in line:
                self.assertTrue(line.split()[3].startswith(("127.0.0.1:", "::1:")), line)

    def test_4_e2b_desktop_sdk(self):
        if not os.path.exists(CHROMIUM):
            subprocess.run(["sh", os.path.join(harness.SRC, "scripts/setup-deps.sh")])
        self.assertTrue(os.path.exists(CHROMIUM), "chromium is needed for the stream check")
        subprocess.run(["sh", os.path.join(harness.SRC, "scripts/console-setup.sh")], check=True)
        pki = tempfile.mkdtemp(prefix="airlock-desktop-")
        relay = TlsRelay(pki, self.server.addr)
        os.makedirs(ARTIFACTS, exist_ok=True)
        try:
            base = f"http://{self.server.addr}"
            env = dict(os.environ, E2B_API_URL=base + "/e2b", E2B_SANDBOX_URL=base + "/e2b/envd",
                       E2B_API_KEY=self.a.key, E2B_DOMAIN=DOMAIN,
                       AIRLOCK_TEST_API_ADDR=self.server.addr,
                       AIRLOCK_TEST_TLS_PORT=str(relay.port), AIRLOCK_TEST_ARTIFACTS=ARTIFACTS,
                       AIRLOCK_TEST_PLAYWRIGHT=os.path.join(harness.SRC, "console", "package.json"))
            r = subprocess.run(["node", os.path.join(E2B_DIR, "desktop.mjs")], env=env,
                               capture_output=True, text=True, timeout=600)
            sys.stdout.write(r.stdout)
            sys.stderr.write(r.stderr)
            self.assertEqual(r.returncode, 0, "tests/e2b/desktop.mjs failed (output above)")
        finally:
            relay.close()
            shutil.rmtree(pki, ignore_errors=True)

    def test_5_delete(self):
        self.a.call("DELETE", f"/v1/sandboxes/{self.sid}")


if __name__ == "__main__":
    main()
