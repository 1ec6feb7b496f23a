"""The Sandbox class and its parts: files, snapshots, network."""
import io
import threading
import urllib.parse
import uuid

from . import errors
from ._transport import Transport, DEFAULT_TIMEOUT, DEFAULT_RETRIES, resolve_settings
from .commands import Commands, Pty, _Broken, _close, _ndjson
from . import code as _code


_shared = {}
_shared_lock = threading.Lock()


def _transport(api_url=None, api_key=None, request_timeout=None, max_retries=None):
    """The Transport for these settings, shared by every Sandbox made with
    them, so that calls reuse the keep-alive connections (one per thread)
    instead of opening one per sandbox."""
    url, key = resolve_settings(api_url, api_key)
    rt = DEFAULT_TIMEOUT if request_timeout is None else request_timeout
    mr = DEFAULT_RETRIES if max_retries is None else max_retries
    k = (url, key, rt, mr)
    with _shared_lock:
        t = _shared.get(k)
        if t is None:
            if len(_shared) >= 64:      # settings that change a lot: keep it bounded
                _shared.clear()
            t = _shared[k] = Transport(url, key, rt, mr)
        return t


def _ref(x):
    """An id from a str or an object/dict with one."""
    if isinstance(x, str):
        return x
    if isinstance(x, dict):
        return x["id"]
    return x.id


def _pages(t, path, key, query=None, limit=None):
    """Every item of a paged list, following ``next_token``."""
    q = dict(query or {})
    if limit:
        q["limit"] = limit
    while True:
        page = t.call("GET", path, query=q)
        for item in page.get(key) or []:
            yield item
        tok = page.get("next_token")
        if not tok:
            return
        q["next_token"] = tok


class Sandbox:
    """One Airlock sandbox.

    Make one with :meth:`create`, find one with :meth:`connect` or
    :meth:`list`. Used in a ``with`` block, it is deleted when the block
    ends. ``id`` is its id; ``data`` the last sandbox object the API
    answered (``info()`` refreshes it); ``commands``, ``pty``, ``files``,
    ``snapshots`` and ``network`` are its parts.

    Connection settings, on every class method: ``api_url`` and ``api_key``,
    else the environment (``AIRLOCK_API_URL``, ``AIRLOCK_API_KEY``), else the
    CLI's settings (``AIRLOCK_URL``; the file ``$AIRLOCK_CONFIG`` or
    ``/var/lib/airlock/cli.json`` with keys ``url`` and ``api_key``), else
    ``http://127.0.0.1:7070``. ``request_timeout`` (seconds, default 60)
    bounds connecting and each read; ``max_retries`` (default 3) bounds
    retries of calls that can be repeated safely."""

    def __init__(self, data, transport):
        self._t = transport
        self.data = data
        self.id = data["id"]
        self.commands = Commands(self)
        self.pty = Pty(self)
        self.files = Files(self)
        self.snapshots = Snapshots(self)
        self.network = Network(self)

    # ---- class methods ---------------------------------------------------

    @classmethod
    def create(cls, template=None, backend=None, env=None, metadata=None, timeout=None,
               network=None, *, limits=None, api_url=None, api_key=None, request_timeout=None,
               max_retries=None, idempotency_key=None, **fields):
        """Create a sandbox and return it once its guest is ready.

        ``template`` (default: the server's, "debian"), ``backend`` ("ns" or
        "vm"; default: the node's), ``env`` (default env of every command),
        ``metadata`` (str -> str, filterable in :meth:`list`), ``timeout``
        (seconds of running time before ``on_timeout`` applies; 0 = none),
        ``network`` (a policy: "allow-all", "deny-all" or a dict),
        ``limits`` ({"memory_mb", "cpus", "pids", "disk_mb"}); any other
        field of the create body (``on_timeout``, ``idle_timeout_s``,
        ``snapshots``, ``node``) as a keyword.

        The request carries an ``Idempotency-Key`` made once per call (or
        ``idempotency_key``), so a retry after a broken connection or a 5xx
        never makes a second sandbox."""
        t = _transport(api_url, api_key, request_timeout, max_retries)
        body = dict(fields)
        for k, v in (("template", template), ("backend", backend), ("env", env),
                     ("metadata", metadata), ("timeout_s", timeout), ("network", network),
                     ("limits", limits)):
            if v is not None:
                body[k] = v
        key = idempotency_key or str(uuid.uuid4())
        # A create may wait for a template build: no read timeout shorter
        # than 10 minutes.
        rt = max(t.request_timeout or 0, 600.0)
        data = t.call("POST", "/v1/sandboxes", json_body=body, retry=True, timeout=rt,
                      headers={"Idempotency-Key": key})
        return cls(data, t)

    @classmethod
    def connect(cls, sandbox_id, *, api_url=None, api_key=None, request_timeout=None,
                max_retries=None):
        """The sandbox with this id, ready to use: a paused one is resumed,
        a suspended one restored (``POST .../connect``). 404
        :class:`~airlock.errors.NotFoundError` for an unknown id."""
        t = _transport(api_url, api_key, request_timeout, max_retries)
        sid = urllib.parse.quote(str(sandbox_id), safe="")   # one path segment, whatever it holds
        return cls(t.call("POST", f"/v1/sandboxes/{sid}/connect", retry=True), t)

    @classmethod
    def list(cls, state=None, template=None, metadata=None, *, page_size=None, api_url=None,
             api_key=None, request_timeout=None, max_retries=None):
        """Iterate over every sandbox of the key's tenant (all pages, oldest
        first), as :class:`Sandbox` objects (no extra request each).
        Filters: ``state`` ("running", "paused", ...), ``template``,
        ``metadata`` (a dict: every pair must match). ``page_size``: items per
        request (1..1000, server default 100)."""
        t = _transport(api_url, api_key, request_timeout, max_retries)
        q = {"state": state, "template": template}
        for k, v in (metadata or {}).items():
            q["metadata." + k] = v
        for item in _pages(t, "/v1/sandboxes", "sandboxes", q, page_size):
            yield cls(item, t)

    # ---- with -----------------------------------------------------------

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        return False

    def __repr__(self):
        return f"Sandbox(id={self.id!r}, state={self.state!r})"

    # ---- lifecycle -------------------------------------------------------

    @property
    def state(self):
        """The state in the last answer (``info()`` refreshes it)."""
        return self.data.get("state")

    def _post(self, action, body=None, retry=False):
        kw = {"json_body": body} if body is not None else {}
        self.data = self._t.call("POST", f"/v1/sandboxes/{self.id}/{action}", retry=retry, **kw)
        return self

    def info(self):
        """Fetch the sandbox object (``GET /v1/sandboxes/{id}``); it is also
        kept in ``data``. Returns the dict."""
        self.data = self._t.call("GET", f"/v1/sandboxes/{self.id}")
        return self.data

    def refresh(self):
        """Same as :meth:`info`, returning self."""
        self.info()
        return self

    def delete(self):
        """Delete the sandbox (and its snapshots). Raises
        :class:`~airlock.errors.NotFoundError` if it is not there."""
        self._t.request("DELETE", f"/v1/sandboxes/{self.id}")

    def kill(self):
        """Delete the sandbox, like :meth:`delete`, but answer False instead
        of raising when the API does not know the id (404). Deleting a
        sandbox already deleted is fine for the API (204): True."""
        try:
            self.delete()
            return True
        except errors.NotFoundError:
            return False

    def pause(self):
        """Freeze everything in it, memory kept (409 unless running)."""
        return self._post("pause")

    def resume(self):
        """Resume a paused sandbox, or restore a suspended one (409 unless so)."""
        return self._post("resume")

    def suspend(self):
        """Move it to the object store: nothing is left on the node (ns keeps
        the files, processes end; vm keeps memory). 501 if the backend cannot."""
        return self._post("suspend")

    def restore(self, node=None):
        """Bring a suspended sandbox back (to ``node`` in a cluster)."""
        return self._post("restore", {"node": node} if node else None)

    def rollback(self, snapshot):
        """Roll the sandbox back to a snapshot (a snapshot dict, its id or
        name). Processes of before end (disk snapshot) or carry on from the
        snapshot (full, vm)."""
        return self._post("rollback", {"snapshot": _ref(snapshot)})

    def fork(self, count=1, from_snapshot=None):
        """``count`` (1..16) new sandboxes from this one (from a snapshot
        taken now, or ``from_snapshot``); returns them as a list of
        :class:`Sandbox`."""
        body = {"count": int(count)}
        if from_snapshot is not None:
            body["from_snapshot"] = _ref(from_snapshot)
        got = self._t.call("POST", f"/v1/sandboxes/{self.id}/fork", json_body=body,
                           timeout=max(self._t.request_timeout or 0, 600.0))
        return [Sandbox(s, self._t) for s in got["sandboxes"]]

    def events(self):
        """The sandbox's lifecycle log (every transition), oldest first."""
        return list(_pages(self._t, f"/v1/sandboxes/{self.id}/events", "events"))

    def metrics(self):
        """What the sandbox uses now: a dict with ``cpu_seconds``,
        ``memory_bytes``, ``memory_peak_bytes``, ``disk_used_bytes`` and
        ``network`` (``bytes_in``/``bytes_out`` through the gateway, or None)."""
        return self._t.call("GET", f"/v1/sandboxes/{self.id}/metrics")

    def _pages(self, path, key):
        return _pages(self._t, path, key)

    # ---- code interpreter (a code-interpreter sandbox) --------------------

    def run_code(self, code, language=None, context=None, envs=None, timeout=None,
                 on_stdout=None, on_stderr=None, on_result=None, on_error=None):
        """Run a cell in the sandbox's code interpreter and return its
        :class:`~airlock.code.Execution` (``results``, ``logs.stdout``/
        ``logs.stderr``, ``error``, ``execution_count``). The kernel keeps
        its state between cells.

        ``language`` ("python", the default, "javascript", "bash"...) picks
        that language's default context; ``context`` (a
        :class:`~airlock.code.Context` or its id) a context of
        :meth:`create_code_context`; not both. ``envs``: env vars of this
        cell only; ``timeout``: seconds, after which the kernel is
        interrupted (its state kept). The callbacks get each chunk of
        stdout/stderr text, each :class:`~airlock.code.Result` and the
        :class:`~airlock.code.ExecutionError` as they come. An error of the
        cell is in ``error``, not raised."""
        return _code.run_code(self, code, language, context, envs, timeout, on_stdout,
                              on_stderr, on_result, on_error)

    def create_code_context(self, language=None, cwd=None):
        """A new context (its own kernel) for ``language`` (default python)
        in ``cwd``; returns a :class:`~airlock.code.Context`."""
        return _code.CodeContexts(self).create(language, cwd)

    def list_code_contexts(self):
        """The contexts of the code interpreter, as :class:`~airlock.code.Context`."""
        return _code.CodeContexts(self).list()

    def restart_code_context(self, context):
        """Restart a context's kernel (its state is lost)."""
        _code.CodeContexts(self).restart(context)

    def remove_code_context(self, context):
        """Remove a context and end its kernel."""
        _code.CodeContexts(self).remove(context)

    # ---- ports ----------------------------------------------------------

    def get_url(self, port, path=""):
        """The URL of ``port`` in the sandbox through the API's proxy,
        ``{api_url}/v1/sandboxes/{id}/ports/{port}/`` (plus ``path``). It
        needs the API key (``Authorization: Bearer``); for a URL without it
        see :meth:`port_token`."""
        return (f"{self._t.api_url}/v1/sandboxes/{self.id}/ports/{int(port)}/"
                f"{path.lstrip('/')}")

    def port_token(self, port, ttl_s=None):
        """A token that opens only this port of this sandbox until it
        expires (``ttl_s``, default 3600): a dict with ``token``, ``port``,
        ``expires_at`` and ``host`` (the host-routed name, or None when the
        server has no ``ports_domain``). Send it as ``X-Airlock-Port-Token``."""
        body = {"port": int(port)}
        if ttl_s is not None:
            body["ttl_s"] = int(ttl_s)
        return self._t.call("POST", f"/v1/sandboxes/{self.id}/port-tokens", json_body=body)


class Files:
    """``sb.files``: the sandbox's filesystem (paths are absolute)."""

    def __init__(self, sandbox):
        self._sb = sandbox

    def _p(self, sub=""):
        return f"/v1/sandboxes/{self._sb.id}/files{sub}"

    def read(self, path, format="text"):
        """The file's contents: str (UTF-8) with ``format="text"``, bytes
        with ``format="bytes"``."""
        data = self._sb._t.request("GET", self._p(), query={"path": path}).data
        return data if format == "bytes" else data.decode("utf-8", "replace")

    def write(self, path, data, mode=None):
        """Write a file whole (str, bytes or a binary file object; up to
        16 MiB), atomically; parent directories are made. ``mode``: e.g.
        0o755 or "0755"."""
        if isinstance(data, str):
            data = data.encode()
        elif hasattr(data, "read"):
            data = data.read()
        if isinstance(mode, int):
            mode = "%04o" % mode
        self._sb._t.request("PUT", self._p(), query={"path": path, "mode": mode},
                            body=bytes(data),
                            headers={"Content-Type": "application/octet-stream"})

    def list(self, path):
        """The entries of a directory: dicts with ``name``, ``path``,
        ``type`` ("file", "dir", "symlink", "other"), ``size``, ``mode``,
        ``mtime``."""
        got = self._sb._t.call("GET", self._p("/list"), query={"path": path})
        base = path.rstrip("/")
        for e in got["entries"]:
            e.setdefault("path", f"{base}/{e['name']}")
        return got["entries"]

    def stat(self, path):
        """``{"path","type","size","mode","mtime"}``; NotFoundError if absent."""
        return self._sb._t.call("GET", self._p("/stat"), query={"path": path})

    def exists(self, path):
        """True when something is at ``path``."""
        try:
            self.stat(path)
            return True
        except errors.NotFoundError:
            return False

    def remove(self, path, recursive=False):
        """Remove a file (or a directory; a non-empty one needs ``recursive``)."""
        self._sb._t.request("DELETE", self._p(),
                            query={"path": path, "recursive": 1 if recursive else None})

    def rename(self, old_path, new_path):
        """Rename (move) ``old_path`` to ``new_path``."""
        self._sb._t.request("POST", self._p("/rename"),
                            json_body={"from": old_path, "to": new_path})

    def make_dir(self, path, parents=True):
        """Make a directory (and its parents unless ``parents=False``)."""
        self._sb._t.request("POST", self._p("/mkdir"), json_body={"path": path, "parents": parents})

    def watch(self, path, recursive=False, on_event=None, max_queue=None):
        """Watch a directory: returns a :class:`WatchHandle` once the watch
        is set (changes after this call are reported). Iterate over it for
        event dicts (``type``: create, write, rename, remove, overflow;
        ``path``, ``dir``, ``from``), or pass ``on_event`` to get them on a
        background thread. ``stop()`` ends it."""
        q = {"path": path, "recursive": "true" if recursive else None, "max_queue": max_queue}
        # No read timeout: a watch may see no change for hours; stop() ends
        # the read by closing the socket.
        conn, resp = self._sb._t.open_stream("GET", self._p("/watch"), query=q,
                                             read_timeout=None)
        h = WatchHandle(conn, resp)
        first = h._next_raw()
        if first is None or first.get("type") != "start":
            h.stop()
            raise errors.ServerError(f"watch stream did not start: {first!r}", code="bad_stream")
        if on_event is not None:
            h._thread = threading.Thread(target=h._run, args=(on_event,), daemon=True,
                                         name="airlock-watch")
            h._thread.start()
        return h


class WatchHandle:
    """A file watch: an iterator over event dicts; ``stop()`` ends it (the
    iteration then ends), and so does the end of the sandbox. A broken
    stream also ends it (a watch cannot be resumed without missing changes;
    ``broken`` is then True)."""

    def __init__(self, conn, resp):
        self._conn, self._resp = conn, resp
        self._it = _ndjson(resp)
        self._stopped = False
        self._thread = None
        self.broken = False

    def _next_raw(self):
        try:
            return next(self._it)
        except _Broken as b:
            # A clean end (the sandbox went) is not a break.
            if not self._stopped and not b.clean:
                self.broken = True
            return None
        except StopIteration:
            return None

    def __iter__(self):
        return self

    def __next__(self):
        ev = None if self._stopped else self._next_raw()
        if ev is None:
            self.stop()
            raise StopIteration
        return ev

    def _run(self, cb):
        for ev in self:
            cb(ev)

    def stop(self):
        """End the watch (closes its connection)."""
        self._stopped = True
        _close(self._conn)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


class Snapshots:
    """``sb.snapshots``: point-in-time copies of the sandbox."""

    def __init__(self, sandbox):
        self._sb = sandbox

    def create(self, name=None, kind=None):
        """Take a snapshot (``kind``: "disk", the default, or "full" on vm);
        returns its dict (``id``, ``name``, ``kind``, ``size_bytes``...)."""
        body = {}
        if name is not None:
            body["name"] = name
        if kind is not None:
            body["kind"] = kind
        return self._sb._t.call("POST", f"/v1/sandboxes/{self._sb.id}/snapshots", json_body=body)

    def list(self):
        """Every snapshot of the sandbox, oldest first."""
        return list(self._sb._pages(f"/v1/sandboxes/{self._sb.id}/snapshots", "snapshots"))

    def delete(self, snapshot):
        """Delete a snapshot (dict, id or name)."""
        ref = urllib.parse.quote(_ref(snapshot), safe="")
        self._sb._t.request("DELETE", f"/v1/sandboxes/{self._sb.id}/snapshots/{ref}")


class Network:
    """``sb.network``: the sandbox's egress policy."""

    def __init__(self, sandbox):
        self._sb = sandbox

    def get(self):
        """``{"network": <policy>, "addr": "10.x.y.z"}``."""
        return self._sb._t.call("GET", f"/v1/sandboxes/{self._sb.id}/network")

    def set(self, policy):
        """Replace the policy ("allow-all", "deny-all" or a dict); in force
        for every new connection. Returns the answer as :meth:`get`."""
        return self._sb._t.call("PATCH", f"/v1/sandboxes/{self._sb.id}/network",
                                json_body={"network": policy})

    def log(self):
        """The last 1000 decisions of the egress gateway, oldest first."""
        return self._sb._t.call("GET", f"/v1/sandboxes/{self._sb.id}/network/log")["entries"]
