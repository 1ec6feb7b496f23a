"""HTTP transport: connection settings, keep-alive, timeouts, retries.

Standard library only (http.client). Plain calls reuse one keep-alive
connection per thread; streams (exec output, file watch) get a connection of
their own, closed when the stream ends."""
import http.client
import json
import os
import random
import select
import socket
import ssl
import threading
import time
import urllib.parse

from . import errors

DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_CONFIG = "/var/lib/airlock/cli.json"
DEFAULT_TIMEOUT = 60.0
DEFAULT_RETRIES = 3
# The api closes a keep-alive connection after 120 s without a request
# (HTTP_IDLE_TIMEOUT_MS); drop ours well before, so a request never goes out
# on a connection the server is closing.
_POOL_IDLE_S = 50.0
_MAX_RETRY_AFTER_S = 30.0
_IDEMPOTENT = frozenset(("GET", "HEAD", "PUT", "DELETE", "OPTIONS"))
# Errors on a request whose bytes may not have reached the server whole:
# connection-level failures.
_CONN_ERRORS = (ConnectionError, http.client.HTTPException, socket.gaierror, ssl.SSLError,
                OSError)
_NO_BODY = object()


def resolve_settings(api_url=None, api_key=None):
    """(url, key): the arguments, else AIRLOCK_API_URL / AIRLOCK_API_KEY,
    else the CLI's own settings (AIRLOCK_URL, then the config file
    $AIRLOCK_CONFIG or /var/lib/airlock/cli.json, keys "url" and "api_key"),
    else http://127.0.0.1:7070 and no key."""
    url = api_url or os.environ.get("AIRLOCK_API_URL") or None
    key = api_key or os.environ.get("AIRLOCK_API_KEY") or None
    if not url:
        url = os.environ.get("AIRLOCK_URL") or None
    if not url or not key:
        path = os.environ.get("AIRLOCK_CONFIG") or DEFAULT_CONFIG
        try:
            with open(path, encoding="utf-8") as f:
                cfg = json.load(f)
        except (OSError, ValueError):
            cfg = {}
        if isinstance(cfg, dict):
            url = url or cfg.get("url")
            key = key or cfg.get("api_key")
    url = (url or DEFAULT_URL).rstrip("/")
    if key and ("\r" in key or "\n" in key):
        raise errors.InvalidRequestError("the API key contains a line break", code="bad_config")
    return url, key


class Response:
    """A whole answer: status, headers (an http.client.HTTPMessage), body bytes."""

    __slots__ = ("status", "headers", "data")

    def __init__(self, status, headers, data):
        self.status, self.headers, self.data = status, headers, data

    def json(self):
        """The body decoded as JSON (None when empty)."""
        return json.loads(self.data) if self.data else None


def _nodelay(sock):
    # http.client writes a request's head and body in two sends: without
    # TCP_NODELAY the body can wait for the ACK of the head (delayed ACK).
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass


class _HTTPConnection(http.client.HTTPConnection):
    def connect(self):
        super().connect()
        _nodelay(self.sock)


class _HTTPSConnection(http.client.HTTPSConnection):
    def connect(self):
        super().connect()
        _nodelay(self.sock)


class _Slot:
    """A thread's keep-alive connection; closed when the thread's locals go."""

    __slots__ = ("conn", "used")

    def __init__(self, conn):
        self.conn, self.used = conn, time.monotonic()

    def close(self):
        self.conn.close()

    def dropped(self):
        """Has the server closed it (or sent bytes nobody asked for)? An
        idle keep-alive socket that polls readable is one not to reuse: a
        request sent on it would fail without our knowing whether the
        server saw it."""
        sock = self.conn.sock
        if sock is None:
            return True
        try:
            return bool(select.select([sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def __del__(self):
        self.conn.close()


class Transport:
    """Talks to one Airlock API. Thread-safe: each thread has its own
    keep-alive connection.

    ``request_timeout``: seconds for connecting and for each read of a plain
    call (streams reconnect instead of failing on a quiet socket).
    ``max_retries``: extra attempts for a call that may be repeated safely."""

    def __init__(self, api_url=None, api_key=None, request_timeout=DEFAULT_TIMEOUT,
                 max_retries=DEFAULT_RETRIES):
        self.api_url, self.api_key = resolve_settings(api_url, api_key)
        u = urllib.parse.urlsplit(self.api_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise errors.InvalidRequestError(f"api_url {self.api_url!r} is not an http(s) URL",
                                             code="bad_config")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self.request_timeout = request_timeout
        self.max_retries = max_retries
        self._local = threading.local()
        self._headers = {"User-Agent": "airlock-python/0.1"}
        if self.api_key:
            self._headers["Authorization"] = "Bearer " + self.api_key

    # ---- connections ----------------------------------------------------

    def new_connection(self, timeout):
        """A fresh connection (not pooled)."""
        if self.scheme == "https":
            return _HTTPSConnection(self.host, self.port, timeout=timeout,
                                    context=ssl.create_default_context())
        return _HTTPConnection(self.host, self.port, timeout=timeout)

    def _pooled(self, timeout):
        loc = self._local
        slot = getattr(loc, "slot", None)
        if slot is not None and (time.monotonic() - slot.used > _POOL_IDLE_S or slot.dropped()):
            slot.close()
            slot = None
        if slot is None:
            slot = loc.slot = _Slot(self.new_connection(timeout))
            loc.reused = False
        else:
            loc.reused = True
            if slot.conn.sock is not None:
                slot.conn.sock.settimeout(timeout)
        slot.conn.timeout = timeout
        return slot

    def _drop_pooled(self):
        slot = getattr(self._local, "slot", None)
        if slot is not None:
            slot.close()
            self._local.slot = None

    def close(self):
        """Close this thread's keep-alive connection."""
        self._drop_pooled()

    def path(self, path, query=None):
        """The request target for an API path and a dict of query parameters
        (None values left out)."""
        target = self.prefix + path
        if query:
            q = [(k, v) for k, v in query.items() if v is not None]
            if q:
                target += "?" + urllib.parse.urlencode(q, doseq=True)
        return target

    def _head(self, extra, has_json):
        h = dict(self._headers)
        if has_json:
            h["Content-Type"] = "application/json"
        if extra:
            h.update(extra)
        return h

    # ---- plain calls ----------------------------------------------------

    def request(self, method, path, *, query=None, json_body=_NO_BODY, body=None, headers=None,
                retry=None, timeout=None, ok=(200, 201, 204)):
        """Send one request and read the whole answer; retry where safe.

        ``retry``: may the request be repeated after a connection error or a
        502/503/504 (default: for GET, PUT, DELETE)? Any request is retried
        on 429 and 503 ``busy``, which the api answers before doing
        anything. Returns a :class:`Response`; an answer outside ``ok``
        raises the matching :class:`~airlock.errors.AirlockError`."""
        if json_body is not _NO_BODY:
            body = json.dumps(json_body).encode()
        if retry is None:
            retry = method in _IDEMPOTENT
        timeout = self.request_timeout if timeout is None else timeout
        target = self.path(path, query)
        hdrs = self._head(headers, json_body is not _NO_BODY)
        attempt = 0
        while True:
            slot = self._pooled(timeout)
            conn = slot.conn
            try:
                if hasattr(body, "seek") and attempt:
                    body.seek(0)
                conn.request(method, target, body=body, headers=hdrs)
                r = conn.getresponse()
                data = r.read()
                if r.will_close:
                    self._drop_pooled()
                else:
                    slot.used = time.monotonic()
            except _CONN_ERRORS as e:
                reused = self._local.reused
                self._drop_pooled()
                err = self._conn_error(e)
                # Refused: nothing reached the server, any request may go
                # again. Otherwise only one that may be repeated (a reused
                # connection was checked for a close before the send, see
                # _Slot.dropped, so this is a real failure, not a stale one).
                refused = isinstance(e, ConnectionRefusedError)
                if (retry or refused) and attempt < self.max_retries:
                    # a reused connection that broke: at once on a fresh one
                    if not (reused and attempt == 0):
                        self._sleep_backoff(attempt)
                    attempt += 1
                    continue
                raise err from e
            if r.status in ok:
                return Response(r.status, r.headers, data)
            err = errors.error_from_response(r.status, data, r.headers)
            if attempt < self.max_retries and self._retryable_status(r.status, err, retry):
                self._sleep_for(err, attempt)
                attempt += 1
                continue
            raise err

    def call(self, method, path, **kw):
        """request() and the body decoded as JSON (None for an empty body)."""
        return self.request(method, path, **kw).json()

    # ---- streams --------------------------------------------------------

    def open_stream(self, method, path, *, query=None, json_body=_NO_BODY, retry=None,
                    timeout=None, read_timeout=_NO_BODY):
        """Send a request whose 200 answer is a stream; return (conn, response)
        with the head read. The caller reads and closes. ``timeout`` bounds
        connecting and the answer's head; ``read_timeout`` each read of the
        stream after it (default: the same; None: wait as long as it takes)."""
        body = json.dumps(json_body).encode() if json_body is not _NO_BODY else None
        if retry is None:
            retry = method in _IDEMPOTENT
        timeout = self.request_timeout if timeout is None else timeout
        target = self.path(path, query)
        hdrs = self._head(None, json_body is not _NO_BODY)
        attempt = 0
        while True:
            conn = self.new_connection(timeout)
            try:
                conn.request(method, target, body=body, headers=hdrs)
                r = conn.getresponse()
            except _CONN_ERRORS as e:
                conn.close()
                if (retry or isinstance(e, ConnectionRefusedError)) and \
                        attempt < self.max_retries:
                    self._sleep_backoff(attempt)
                    attempt += 1
                    continue
                raise self._conn_error(e) from e
            if r.status == 200:
                if read_timeout is not _NO_BODY and conn.sock is not None:
                    conn.sock.settimeout(read_timeout)
                return conn, r
            try:
                data = r.read()
            except _CONN_ERRORS:
                data = b""
            conn.close()
            err = errors.error_from_response(r.status, data, r.headers)
            if attempt < self.max_retries and self._retryable_status(r.status, err, retry):
                self._sleep_for(err, attempt)
                attempt += 1
                continue
            raise err

    # ---- retry policy ---------------------------------------------------

    @staticmethod
    def _retryable_status(status, err, retry):
        if status == 429:   # answered before any work: safe for every method
            return True
        if status == 503 and err.code == "busy":
            return True
        return retry and status in (502, 503, 504)

    def _sleep_for(self, err, attempt):
        ra = getattr(err, "retry_after", None)
        if ra is not None:
            time.sleep(min(ra, _MAX_RETRY_AFTER_S))
        else:
            self._sleep_backoff(attempt)

    @staticmethod
    def _sleep_backoff(attempt):
        """Exponential backoff with jitter: ~0.2 s, 0.4 s, 0.8 s... at most 5 s."""
        d = min(5.0, 0.2 * (2 ** attempt))
        time.sleep(d * (0.5 + random.random() / 2))

    def _conn_error(self, e):
        if isinstance(e, (socket.timeout, TimeoutError)):
            return errors.TimeoutError(f"no answer from {self.api_url} within the timeout",
                                       code="timeout")
        return errors.APIConnectionError(f"cannot reach {self.api_url}: {e!r}",
                                         code="connection_error")

