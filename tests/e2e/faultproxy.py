"""Fault-injecting proxies on 127.0.0.1 for the resource chaos cases
(chaos_resource.py): the test's own tools at the outer boundaries, between
Airlock and a real server the test started.

StoreProxy: an HTTP/1.1 proxy in front of the S3-compatible test server
(tests/s3). Requests pass unchanged (their Signature V4 still holds: the
Host header is the one the client signed) until a rule says otherwise:

    p.rule(mode, kinds=("part",), start=0, count=None, delay=0, status=503)

  mode   "error"  answer `status` with an S3 <Error> (the body is drained)
         "slow"   wait `delay` seconds, then pass
         "reset"  a request body (put, part): read `start` bytes of it, then
                  RST; a response (get): send its head and `start` bytes of
                  its body, then RST
         "down"   RST every connection, new and open ("connection refused"
                  from the client's point of view, mid-request for the rest)
  kinds  which requests: put (one PUT of a whole object), part (a part of a
         multipart upload), initiate, complete, abort, head, get, list,
         delete, manifest (a PUT of a manifest.json); None: every request
  count  how many matching requests the rule hits (None: until cleared)

p.clear() lets everything pass again; p.hits counts the requests hit,
p.seen the requests by kind.

TcpProxy: bytes both ways between a client and a TCP server (PostgreSQL);
cut() resets every connection and refuses new ones until heal()."""
import http.client
import socket
import struct
import threading
import time

KINDS = ("put", "part", "initiate", "complete", "abort", "head", "get", "list", "delete",
         "manifest")


def _rst(sock):
    """Close with a TCP RST (SO_LINGER 0), not a FIN. shutdown() first: a
    close() alone does not end a connection another thread is blocked in
    recv() on (the kernel keeps the socket until that call returns), and
    the peer (PostgreSQL) would keep the session, and its locks, forever."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Listener:
    """A loopback listener on a fixed port that can be shut and reopened."""

    def __init__(self, handler):
        self.handler = handler
        self.port = None
        self.lsock = None
        self.conns = set()
        self.mu = threading.Lock()
        self.up = False
        self.stopped = False
        self.open()

    def open(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port or 0))
        s.listen(128)
        self.port = s.getsockname()[1]
        with self.mu:
            self.lsock, self.up = s, True
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, lsock):
        while True:
            try:
                c, _ = lsock.accept()
            except OSError:
                return
            with self.mu:
                if not self.up:
                    _rst(c)
                    continue
                self.conns.add(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            self.handler(c)
        except OSError:
            pass
        finally:
            with self.mu:
                self.conns.discard(c)
            _rst(c)

    def shut(self):
        """Refuse new connections and reset the open ones."""
        with self.mu:
            self.up = False
            lsock, conns = self.lsock, list(self.conns)
            self.lsock = None
        if lsock:
            # shutdown wakes the accept thread; the port is closed
            try:
                lsock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            lsock.close()
        for c in conns:
            _rst(c)

    def close(self):
        self.stopped = True
        self.shut()


class StoreProxy:
    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.mu = threading.Lock()
        self.rules = []
        self.hits = 0
        self.seen = {}
        self.listener = _Listener(self._conn)
        self.port = self.listener.port
        self.down = False

    # ---- control -----------------------------------------------------------

    def rule(self, mode, kinds=None, start=0, count=None, delay=0.0, status=503):
        assert mode in ("error", "slow", "reset"), mode
        assert kinds is None or set(kinds) <= set(KINDS), kinds
        with self.mu:
            self.rules.append({"mode": mode, "kinds": set(kinds) if kinds else None,
                               "start": start, "count": count, "delay": delay,
                               "status": status})

    def go_down(self):
        self.down = True
        self.listener.shut()

    def come_up(self):
        if self.down:
            self.down = False
            self.listener.open()

    def clear(self):
        with self.mu:
            self.rules = []
            self.hits = 0
            self.seen = {}
        self.come_up()

    def close(self):
        self.listener.close()

    def url(self):
        return (f"s3://airlock?endpoint=http://127.0.0.1:{self.port}&region=us-east-1"
                "&path_style=1")

    # ---- requests ----------------------------------------------------------

    @staticmethod
    def kind(method, target):
        path, _, query = target.partition("?")
        q = dict(p.partition("=")[::2] for p in query.split("&") if p)
        if method == "PUT":
            if "partNumber" in q:
                return "part"
            return "manifest" if path.endswith("/manifest.json") else "put"
        if method == "POST":
            return "initiate" if "uploads" in q else "complete"
        if method == "DELETE":
            return "abort" if "uploadId" in q else "delete"
        if method == "HEAD":
            return "head"
        if method == "GET":
            return "list" if ("list-type" in q or "prefix" in q or path.count("/") <= 1) \
                else "get"
        return "other"

    def _match(self, kind):
        with self.mu:
            self.seen[kind] = self.seen.get(kind, 0) + 1
            for r in self.rules:
                if r["count"] == 0:
                    continue
                if r["kinds"] is None or kind in r["kinds"]:
                    if r["count"] is not None:
                        r["count"] -= 1
                    self.hits += 1
                    return dict(r)
        return None

    @staticmethod
    def _read_head(c, buf):
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return None, b""
            buf += d
        head, _, rest = buf.partition(b"\r\n\r\n")
        return head.decode("latin-1"), rest

    @staticmethod
    def _read_n(c, buf, n):
        while len(buf) < n:
            d = c.recv(min(1 << 20, n - len(buf)))
            if not d:
                raise OSError("client closed mid-body")
            buf += d
        return buf[:n], buf[n:]

    def _conn(self, c):
        buf = b""
        while True:
            head, buf = self._read_head(c, buf)
            if head is None:
                return
            lines = head.split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = []
            for l in lines[1:]:
                k, _, v = l.partition(":")
                headers.append((k.strip(), v.strip()))
            hmap = {k.lower(): v for k, v in headers}
            length = int(hmap.get("content-length", "0") or 0)
            kind = self.kind(method, target)
            r = self._match(kind)
            if r and r["mode"] == "reset" and length and r["start"] < length:
                self._read_n(c, buf, r["start"])
                return   # _serve resets it
            body, buf = self._read_n(c, buf, length)
            if self.down:
                return
            if r and r["mode"] == "error":
                msg = (f"<?xml version=\"1.0\"?><Error><Code>{'SlowDown' if r['status'] == 503 else 'InternalError'}"
                       f"</Code><Message>injected by the test</Message></Error>").encode()
                c.sendall(f"HTTP/1.1 {r['status']} Injected\r\nContent-Type: application/xml\r\n"
                          f"Content-Length: {len(msg)}\r\n\r\n".encode() +
                          (b"" if method == "HEAD" else msg))
                continue
            if r and r["mode"] == "slow":
                time.sleep(r["delay"])
            up = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=120)
            try:
                up.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                for k, v in headers:
                    up.putheader(k, v)
                up.endheaders(body if body else None)
                resp = up.getresponse()
                data = resp.read()
                out = [f"HTTP/1.1 {resp.status} {resp.reason}"]
                for k, v in resp.getheaders():
                    if k.lower() in ("transfer-encoding", "connection", "content-length"):
                        continue
                    out.append(f"{k}: {v}")
                if method == "HEAD":
                    out.append(f"Content-Length: {resp.getheader('content-length', '0')}")
                else:
                    out.append(f"Content-Length: {len(data)}")
            finally:
                up.close()
            wire = ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")
            if self.down:
                return
            if r and r["mode"] == "reset" and method != "HEAD":
                c.sendall(wire + data[:r["start"]])
                return
            c.sendall(wire + (b"" if method == "HEAD" else data))


class TcpProxy:
    """127.0.0.1:port → 127.0.0.1:upstream, both ways; cut() / heal()."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.listener = _Listener(self._conn)
        self.port = self.listener.port

    def _conn(self, c):
        u = socket.create_connection(("127.0.0.1", self.upstream), timeout=10)
        u.settimeout(None)
        with self.listener.mu:
            self.listener.conns.add(u)
        done = threading.Event()

        def pump(a, b):
            try:
                while True:
                    d = a.recv(65536)
                    if not d:
                        break
                    b.sendall(d)
            except OSError:
                pass
            # one side closed (PostgreSQL restarted, the client went): the
            # other sees it too, as it would on a direct connection,
            # instead of waiting for an answer that never comes
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            done.set()

        threading.Thread(target=pump, args=(u, c), daemon=True).start()
        pump(c, u)
        done.wait(1)
        with self.listener.mu:
            self.listener.conns.discard(u)
        _rst(u)

    def cut(self):
        self.listener.shut()

    def heal(self):
        if not self.listener.up:
            self.listener.open()

    def close(self):
        self.listener.close()
