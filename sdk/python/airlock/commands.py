"""Processes in a sandbox: ``sb.commands`` and ``sb.pty``.

A process outlives the HTTP connection that started it, and the node keeps
the last 1 MiB of each of its streams. So when a stream breaks (a proxy, a
network blip, a quiet socket past the read timeout) the SDK asks for the rest
with ``GET .../processes/{pid}/output?offset=N&stderr_offset=M`` and drops
any byte it already has: the output a caller sees is whole and has no byte
twice (unless the node's buffer itself dropped bytes, which the result lists
in ``dropped``)."""
import base64
import codecs
import http.client
import json
import math
import socket
import threading
import time

from . import errors

_STREAMS = ("stdout", "stderr")
# The longest NDJSON line of a stream (a code cell's image is the largest).
_MAX_LINE = 64 << 20


class _Broken(Exception):
    """The stream ended (for an exec stream: before its exit line).
    ``quiet``: a read timeout; ``clean``: the server ended the answer
    properly (the last chunk came)."""

    def __init__(self, why, quiet=False, clean=False):
        super().__init__(why)
        self.quiet = quiet
        self.clean = clean


def _ndjson(resp):
    """Yield the JSON lines of a streamed answer; raise _Broken when it breaks
    (end of stream, connection error, cut line)."""
    while True:
        try:
            # bounded: a line longer than this is a broken stream ("cut line")
            line = resp.readline(_MAX_LINE)
        except (socket.timeout, TimeoutError) as e:
            raise _Broken(e, quiet=True)
        except (http.client.HTTPException, OSError, ValueError, AttributeError) as e:
            # AttributeError/ValueError: http.client after its socket was closed
            # under it (a stop() from another thread).
            raise _Broken(e)
        if not line:
            raise _Broken("end of stream", clean=True)
        if not line.endswith(b"\n"):
            raise _Broken("cut line")
        line = line.strip()
        if not line:
            continue
        try:
            yield json.loads(line)
        except ValueError:
            raise _Broken("bad line")


def _close(conn):
    if conn is None:
        return
    try:
        if conn.sock is not None:
            conn.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    conn.close()


def argv_of(cmd):
    """A command as the API wants it: a str runs through ``sh -c``, a list as is."""
    if isinstance(cmd, str):
        return ["sh", "-c", cmd]
    argv = [str(a) for a in cmd]
    if not argv:
        raise ValueError("cmd is empty")
    return argv


class CommandResult:
    """What a finished process left.

    ``stdout``/``stderr``: the output decoded as UTF-8 (invalid bytes as
    U+FFFD); ``stdout_bytes``/``stderr_bytes``: the raw bytes;
    ``exit_code``: the exit status, or 128+N when signal N ended it (as a
    shell reports it); ``signal``: N or None; ``reason``: the server's reason
    when the process ended because the sandbox did (rolled back, deleted...);
    ``pid``, ``cmd``; ``dropped``: ``[(stream, from, to)]`` ranges the node's
    1 MiB buffer no longer held when they were asked for."""

    def __init__(self, cmd, pid, out, err, exit_code, signal, reason, dropped):
        self.cmd, self.pid = cmd, pid
        self.stdout_bytes, self.stderr_bytes = bytes(out), bytes(err)
        self.stdout = self.stdout_bytes.decode("utf-8", "replace")
        self.stderr = self.stderr_bytes.decode("utf-8", "replace")
        self.signal = signal
        self.exit_code = 128 + signal if signal else exit_code
        self.reason = reason
        self.dropped = dropped

    @property
    def ok(self):
        """True when the process exited 0."""
        return self.exit_code == 0

    def check(self):
        """Raise :class:`~airlock.errors.CommandExitError` unless it exited 0;
        return self otherwise."""
        if self.exit_code != 0:
            raise errors.CommandExitError(self)
        return self

    def __repr__(self):
        return (f"CommandResult(pid={self.pid}, exit_code={self.exit_code}, signal={self.signal},"
                f" stdout={self.stdout[:60]!r}, stderr={self.stderr[:60]!r})")


class CommandHandle:
    """A process started by ``commands.run(..., background=True)`` (or found
    again with ``commands.connect(pid)``).

    Its output is read by a background thread and handed to the callbacks
    as it comes; ``stdout``/``stderr`` hold what came so far. ``pid`` is the
    process id in the sandbox."""

    def __init__(self, sandbox, pid, cmd, conn=None, resp=None, on_stdout=None, on_stderr=None,
                 raw=False):
        self._sb = sandbox
        self.pid = pid
        self.cmd = cmd
        self._conn, self._resp = conn, resp
        self._off = [0, 0]
        self._buf = [bytearray(), bytearray()]
        self._cbs = [on_stdout, on_stderr]
        self._raw = raw
        self._dec = [codecs.getincrementaldecoder("utf-8")("replace") for _ in _STREAMS]
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._result = None
        self._error = None
        self._thread = None
        self._stopped = False
        self.dropped = []
        self.reconnects = 0

    # ---- reading --------------------------------------------------------

    def _feed(self, s, off, data):
        have = self._off[s]
        if off + len(data) <= have:
            return                      # all of it came before the break
        if off < have:
            data = data[have - off:]    # the part we have not seen yet
        elif off > have:
            self.dropped.append((_STREAMS[s], have, off))
        self._off[s] = off + len(data)
        with self._lock:
            self._buf[s] += data
        cb = self._cbs[s]
        if cb is not None:
            if self._raw:
                cb(bytes(data))
            else:
                text = self._dec[s].decode(data)
                if text:
                    cb(text)

    def _event(self, ev):
        t = ev.get("type")
        if t in _STREAMS:
            self._feed(_STREAMS.index(t), int(ev.get("offset", 0)),
                       base64.b64decode(ev.get("data", "")))
        elif t == "dropped":
            s = _STREAMS.index(ev["stream"]) if ev.get("stream") in _STREAMS else 0
            if ev.get("to", 0) > self._off[s]:
                self.dropped.append((_STREAMS[s], self._off[s], ev["to"]))
                self._off[s] = ev["to"]
        elif t == "exit":
            if not self._raw:
                for s in range(2):
                    cb, rest = self._cbs[s], self._dec[s].decode(b"", final=True)
                    if cb is not None and rest:
                        cb(rest)
            with self._lock:
                self._result = CommandResult(self.cmd, self.pid, self._buf[0], self._buf[1],
                                             ev.get("exit_code"), ev.get("signal"),
                                             ev.get("reason"), list(self.dropped))
            return True
        return False

    def _reopen(self):
        sid = self._sb.id
        self._conn, self._resp = self._sb._t.open_stream(
            "GET", f"/v1/sandboxes/{sid}/processes/{self.pid}/output",
            query={"offset": self._off[0], "stderr_offset": self._off[1], "follow": 1},
            retry=True)

    def _pump(self):
        """Read until the exit line, reconnecting by offset when the stream
        breaks. Runs on the background thread, or inline for a foreground run."""
        failures = 0
        limit = max(5, self._sb._t.max_retries + 2)
        try:
            while True:
                if self._resp is None:
                    self._reopen()
                before = tuple(self._off)
                try:
                    for ev in _ndjson(self._resp):
                        if self._event(ev):
                            return
                    raise _Broken("end of stream")  # not reached: _ndjson raises
                except _Broken as b:
                    _close(self._conn)
                    self._conn = self._resp = None
                    if self._stopped:
                        return
                    self.reconnects += 1
                    if b.quiet or tuple(self._off) != before:
                        failures = 0
                    else:
                        failures += 1
                        if failures > limit:
                            raise errors.APIConnectionError(
                                f"the output stream of process {self.pid} broke {failures} times"
                                f" in a row without progress: {b}", code="connection_error")
                        time.sleep(min(2.0, 0.1 * failures))
        except BaseException as e:  # handed to wait()
            self._error = e
        finally:
            if self._conn is not None:
                self._conn.close()
            self._conn = self._resp = None
            self._done.set()

    def _start(self):
        self._thread = threading.Thread(target=self._pump, name=f"airlock-proc-{self.pid}",
                                        daemon=True)
        self._thread.start()
        return self

    # ---- public ---------------------------------------------------------

    @property
    def stdout(self):
        """The stdout received so far, decoded."""
        with self._lock:
            return bytes(self._buf[0]).decode("utf-8", "replace")

    @property
    def stderr(self):
        """The stderr received so far, decoded."""
        with self._lock:
            return bytes(self._buf[1]).decode("utf-8", "replace")

    @property
    def exit_code(self):
        """The exit code once the process ended, else None."""
        return self._result.exit_code if self._result else None

    def wait(self, timeout=None, check=False):
        """Wait for the process to end and return its :class:`CommandResult`.

        ``timeout``: seconds to wait (None: as long as it runs); past it
        :class:`~airlock.errors.TimeoutError` (the process keeps running).
        ``check``: raise :class:`~airlock.errors.CommandExitError` on a
        non-zero exit."""
        if self._thread is None and not self._done.is_set():
            self._pump()
        elif not self._done.wait(timeout):
            raise errors.TimeoutError(f"process {self.pid} still runs after {timeout} s",
                                      code="timeout")
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise errors.APIConnectionError(f"stopped following process {self.pid}",
                                            code="disconnected")
        return self._result.check() if check else self._result

    def signal(self, sig="TERM"):
        """Send a signal (a number, or a name: TERM, KILL, INT, HUP, QUIT,
        USR1, USR2). Returns False when the process had already ended."""
        try:
            self._sb._t.request("POST", f"/v1/sandboxes/{self._sb.id}/processes/{self.pid}/signal",
                                json_body={"signal": sig})
            return True
        except (errors.NotFoundError, errors.ConflictError):
            return False

    def kill(self):
        """SIGKILL the process. Returns False when it had already ended."""
        return self.signal("KILL")

    def send_stdin(self, data, eof=False):
        """Write ``data`` (str or bytes) to the process's stdin; ``eof=True``
        closes it afterwards. The process must have been started with
        ``stdin=True`` (or be a PTY)."""
        if isinstance(data, str):
            data = data.encode()
        body = {"data": base64.b64encode(data).decode()}
        if eof:
            body["eof"] = True
        self._sb._t.request("POST", f"/v1/sandboxes/{self._sb.id}/processes/{self.pid}/stdin",
                            json_body=body)

    def close_stdin(self):
        """Close the process's stdin (it reads end of file)."""
        self.send_stdin(b"", eof=True)

    def disconnect(self):
        """Stop following the output; the process keeps running (find it
        again with ``commands.connect(pid)``)."""
        self._stopped = True
        _close(self._conn)
        if self._thread is not None:
            self._thread.join(5)

    def __repr__(self):
        return f"CommandHandle(pid={self.pid}, cmd={self.cmd!r}, done={self._done.is_set()})"


class Commands:
    """``sb.commands``: run processes in the sandbox."""

    def __init__(self, sandbox):
        self._sb = sandbox

    def _start(self, argv, cwd, env, user, timeout, stdin, pty):
        body = {"cmd": argv}
        if env:
            body["env"] = {str(k): str(v) for k, v in env.items()}
        if cwd:
            body["cwd"] = cwd
        if isinstance(user, int) and not isinstance(user, bool):
            body["uid"] = user
        elif user:
            body["user"] = user
        if pty:
            body["pty"] = pty
        if stdin:
            body["stdin"] = True
        if timeout:
            body["timeout_s"] = int(math.ceil(timeout))
        # Not retried on a broken connection: the process may have started.
        conn, resp = self._sb._t.open_stream("POST", f"/v1/sandboxes/{self._sb.id}/exec",
                                             json_body=body, retry=False)
        try:
            ev = next(_ndjson(resp))
        except _Broken as e:
            _close(conn)
            raise errors.APIConnectionError(
                f"the exec stream broke before the process's pid came: {e}",
                code="connection_error")
        if ev.get("type") != "start" or "pid" not in ev:
            _close(conn)
            raise errors.ServerError(f"unexpected first line of an exec stream: {ev!r}",
                                     code="bad_stream")
        return conn, resp, ev["pid"]

    def run(self, cmd, cwd=None, env=None, user=None, timeout=None, on_stdout=None,
            on_stderr=None, background=False, stdin=False, check=False):
        """Run a command; return its :class:`CommandResult` once it ended, or
        with ``background=True`` a :class:`CommandHandle` at once.

        ``cmd``: a str (run with ``sh -c``) or a list (argv, no shell).
        ``cwd``, ``env`` (added to the sandbox's env), ``user`` (a name, or
        a uid as int), ``timeout``: seconds after which the sandbox kills the
        process (it then ends with signal 9; None = no limit).
        ``on_stdout``/``on_stderr``: called with each piece of output (str)
        as it arrives. ``stdin=True`` keeps stdin open for
        ``handle.send_stdin()``.

        A non-zero exit does **not** raise: read ``result.exit_code``; pass
        ``check=True`` to get :class:`~airlock.errors.CommandExitError`
        instead (for a background run, ``handle.wait(check=True)``)."""
        argv = argv_of(cmd)
        conn, resp, pid = self._start(argv, cwd, env, user, timeout, stdin, None)
        h = CommandHandle(self._sb, pid, argv, conn, resp, on_stdout, on_stderr)
        if background:
            return h._start()
        return h.wait(check=check)

    def connect(self, pid, on_stdout=None, on_stderr=None):
        """Follow a process already started (by pid): a :class:`CommandHandle`
        that replays its buffered output from the start, then follows it."""
        return CommandHandle(self._sb, int(pid), None, on_stdout=on_stdout,
                             on_stderr=on_stderr)._start()

    def list(self):
        """Every process the node knows in this sandbox (running or ended):
        dicts with ``pid``, ``cmd``, ``running``, ``exit_code``, ``signal``,
        ``started_at``, ``pty``."""
        return list(self._sb._pages(f"/v1/sandboxes/{self._sb.id}/processes", "processes"))

    def kill(self, pid, signal="KILL"):
        """Send ``signal`` (default KILL) to process ``pid``. False when it
        had already ended."""
        return CommandHandle(self._sb, int(pid), None).signal(signal)

    def send_stdin(self, pid, data, eof=False):
        """Write to the stdin of process ``pid`` (started with ``stdin=True``)."""
        CommandHandle(self._sb, int(pid), None).send_stdin(data, eof)


class PtyHandle(CommandHandle):
    """A process on a pseudo-terminal (``sb.pty.create``). ``on_data`` gets
    the terminal's output as bytes; ``send_input`` types into it."""

    def send_input(self, data):
        """Send keystrokes (str or bytes) to the terminal."""
        self.send_stdin(data)

    def resize(self, rows, cols):
        """Change the terminal size (the process gets SIGWINCH)."""
        self._sb._t.request("POST", f"/v1/sandboxes/{self._sb.id}/processes/{self.pid}/resize",
                            json_body={"rows": int(rows), "cols": int(cols)})


class Pty:
    """``sb.pty``: interactive terminals."""

    def __init__(self, sandbox):
        self._sb = sandbox

    def create(self, rows=24, cols=80, on_data=None, cmd=None, cwd=None, env=None, user=None,
               timeout=None):
        """Start ``cmd`` (default ``/bin/sh``, interactive since its stdin is
        a terminal) on a PTY of ``rows`` x ``cols``; return a
        :class:`PtyHandle` whose output goes to ``on_data(bytes)``."""
        argv = argv_of(cmd) if cmd is not None else ["/bin/sh"]
        conn, resp, pid = self._sb.commands._start(argv, cwd, env, user, timeout, True,
                                                   {"rows": int(rows), "cols": int(cols)})
        return PtyHandle(self._sb, pid, argv, conn, resp, on_data, None, raw=True)._start()
