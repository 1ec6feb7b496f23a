#!/usr/bin/python3
"""airlock-code: the code interpreter service inside a `code-interpreter`
sandbox. It speaks E2B's code-interpreter HTTP protocol on 127.0.0.1:49999
(loopback only: the node reaches it through the guest agent's port channel,
src/node/ports.c; nothing listens on the sandbox's network address).

  GET    /health                   "OK"
  POST   /execute                  {code, context_id?, language?, env_vars?,
                                    timeout_ms?} -> NDJSON, one object a line
  POST   /contexts                 {language?, cwd?} -> {id, language, cwd}
  GET    /contexts                 [{id, language, cwd}, ...]
  DELETE /contexts/{id}            204
  POST   /contexts/{id}/restart    204

Each context is its own interpreter with its own cwd: Python is an ipykernel
driven through jupyter_client; JavaScript and bash are small stateful
runners of ours (runner.js, a persistent bash), which need no Jupyter kernel
that Debian does not package. One cell runs at a time per context; others
wait their turn.

It runs as the sandbox's user (uid 1000 `user`, started by
/etc/airlock/start), inside the sandbox and under its egress policy: it is
the tenant's own program, so nothing here is trusted by the host. The node
relays its bytes unparsed in bounded chunks; the output cap below is for the
client's sake (a cell printing 1 GB ends with a note instead of a flood).

Only the standard library and Debian's python3-jupyter-client are used.
"""
import json
import os
import queue
import re
import select
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(os.environ.get("AIRLOCK_CODE_PORT", "49999"))
HOME = os.environ.get("HOME", "/home/user")
DEFAULT_CWD = HOME if os.path.isdir(HOME) else "/"
OUTPUT_CAP = int(os.environ.get("AIRLOCK_CODE_OUTPUT_CAP", str(16 << 20)))
MAX_BODY = 8 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
RUNNER_JS = os.path.join(HERE, "runner.js")
LANGS = {"python": "python", "python3": "python", "javascript": "javascript",
         "js": "javascript", "bash": "bash", "sh": "bash"}
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")
MIME = [("text/plain", "text"), ("text/html", "html"), ("text/markdown", "markdown"),
        ("image/svg+xml", "svg"), ("image/png", "png"), ("image/jpeg", "jpeg"),
        ("application/pdf", "pdf"), ("text/latex", "latex"), ("application/json", "json"),
        ("application/javascript", "javascript")]


def now_iso():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def log(msg):
    """A line of the service's own log (stderr: /tmp/airlock-code.log)."""
    sys.stderr.write("%s airlock-code: %s\n" % (now_iso(), msg))
    sys.stderr.flush()


class Gone(Exception):
    """The client went away (or its timeout ended the call)."""


class Sink:
    """Where one execution's lines go: the HTTP client, bounded."""

    def __init__(self, handler, deadline):
        self.h = handler
        self.sent = 0
        self.capped = False
        self.deadline = deadline

    def expired(self):
        return self.deadline is not None and time.monotonic() > self.deadline

    def client_gone(self):
        try:
            r, _, _ = select.select([self.h.connection], [], [], 0)
            if r:
                return self.h.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True
        return False

    def line(self, obj, force=False):
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        if not force and obj.get("type") in ("stdout", "stderr", "result"):
            if self.capped:
                return
            if self.sent + len(data) > OUTPUT_CAP:
                self.capped = True
                room = OUTPUT_CAP - self.sent - 256
                head = b""
                if obj["type"] != "result" and room > 0:
                    # what fits of this chunk, then the note
                    cut = dict(obj, text=obj["text"][:room])
                    head = (json.dumps(cut, separators=(",", ":")) + "\n").encode()
                data = head + (json.dumps({"type": "stderr", "timestamp": now_iso(),
                                    "text": "[airlock: this cell's output passed %d bytes; "
                                            "the rest is dropped and the cell interrupted]\n"
                                            % OUTPUT_CAP}) + "\n").encode()
        self.sent += len(data)
        try:
            self.h.wfile.write(data)
            self.h.wfile.flush()
        except OSError:
            raise Gone()


# ---- Python: an ipykernel through jupyter_client ---------------------------

def kernel_spec():
    """The kernelspec of our Python kernel (kernel.py), written once."""
    import tempfile
    d = tempfile.mkdtemp(prefix="airlock-code-kernels-")
    os.makedirs(os.path.join(d, "airlock-python"))
    with open(os.path.join(d, "airlock-python", "kernel.json"), "w") as f:
        # History in memory: In, Out, _N and %history work within the
        # kernel's life; no SQLite file written after every cell (bench/code: the
        # cell round trip 7.8 and 7.5 -> 6.4 and 6.0 ms p50 in two A/B pairs).
        json.dump({"argv": [sys.executable, os.path.join(HERE, "kernel.py"), "-f",
                            "{connection_file}", "--HistoryManager.hist_file=:memory:"],
                   "display_name": "Python 3", "language": "python",
                   "interrupt_mode": "signal"}, f)
    return d


KERNEL_DIR = None


class PyKernel:
    def __init__(self, cwd):
        global KERNEL_DIR
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager
        import airlock_loopback
        airlock_loopback.apply()
        if KERNEL_DIR is None:
            KERNEL_DIR = kernel_spec()
        env = dict(os.environ)
        # Figures come back as PNG results (matplotlib-inline), whatever
        # MPLBACKEND the image sets for scripts (Agg).
        env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
        env.pop("AIRLOCK_CODE_PORT", None)
        env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
        t0 = time.monotonic()
        self.km = KernelManager(kernel_name="airlock-python", kernel_spec_manager=KernelSpecManager(
            kernel_dirs=[KERNEL_DIR]))
        self.km.start_kernel(cwd=cwd, env=env)
        log("kernel %s started in %.0f ms" % (self.km.kernel_id, (time.monotonic() - t0) * 1e3))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        log("kernel %s ready in %.0f ms" % (self.km.kernel_id, (time.monotonic() - t0) * 1e3))

    def alive(self):
        return self.km.is_alive()

    def interrupt(self):
        try:
            self.km.interrupt_kernel()
        except Exception:
            pass

    def restart(self):
        self.kc.stop_channels()
        self.km.restart_kernel(now=True)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def shutdown(self):
        try:
            self.kc.stop_channels()
            self.km.shutdown_kernel(now=True)
        except Exception:
            pass

    def drain(self):
        """Drop what earlier cells left: their iopub tail and their
        execute_reply messages (we follow a cell on iopub only)."""
        for get in (self.kc.get_iopub_msg, self.kc.get_shell_msg):
            while True:
                try:
                    get(timeout=0)
                except queue.Empty:
                    break

    def execute(self, code, env_vars, sink):
        kc = self.kc
        self.drain()
        if env_vars:
            # Per call: set before, put back after (the same kernel runs
            # the next cell without them).
            setup = ("import os as _al_os\n_al_saved = {k: _al_os.environ.get(k) for k in %r}\n"
                     "_al_os.environ.update(%r)\n" % (list(env_vars), env_vars))
            kc.execute(setup, silent=True, store_history=False)
        mid = kc.execute(code, store_history=True, allow_stdin=False)
        interrupted = False
        gone = False
        while True:
            if not gone and sink.client_gone():
                gone = True
                self.interrupt()
                interrupted = True
            if (sink.capped or sink.expired()) and not interrupted:
                self.interrupt()
                interrupted = True
            try:
                msg = kc.get_iopub_msg(timeout=0.05)
            except queue.Empty:
                if not self.alive():
                    if not gone:
                        sink.line({"type": "unexpected_end_of_execution"}, force=True)
                    self.restart()
                    return
                continue
            if msg.get("parent_header", {}).get("msg_id") != mid:
                continue
            t, c = msg["msg_type"], msg["content"]
            if t == "status" and c.get("execution_state") == "idle":
                break
            try:
                if gone:
                    pass
                elif t == "stream":
                    sink.line({"type": "stdout" if c.get("name") == "stdout" else "stderr",
                               "text": c.get("text", ""), "timestamp": now_iso()})
                elif t in ("execute_result", "display_data"):
                    out = {"type": "result"}
                    data = c.get("data", {})
                    extra = {}
                    for mime, key in MIME:
                        if mime in data:
                            out[key] = data[mime]
                    for k, v in data.items():
                        if k not in dict(MIME):
                            extra[k] = v
                    if extra:
                        out["extra"] = extra
                    out["is_main_result"] = t == "execute_result"
                    sink.line(out)
                elif t == "error":
                    sink.line({"type": "error", "name": c.get("ename", ""),
                               "value": c.get("evalue", ""),
                               "traceback": "\n".join(c.get("traceback", []))}, force=True)
                elif t == "execute_input":
                    sink.line({"type": "number_of_executions",
                               "execution_count": c.get("execution_count")}, force=True)
            except Gone:
                gone = True
                self.interrupt()
                interrupted = True
        if env_vars:
            kc.execute("for _k, _v in _al_saved.items():\n"
                       "    _al_os.environ.pop(_k, None) if _v is None else "
                       "_al_os.environ.__setitem__(_k, _v)\n", silent=True, store_history=False)
        if not gone:
            sink.line({"type": "end_of_execution"}, force=True)


# ---- JavaScript and bash: runners of ours over pipes -----------------------

class PipeRunner:
    """A persistent interpreter: cells go in on stdin, its stdout and stderr
    are the cell's, and a control line on fd 3 ends each cell."""

    def __init__(self, lang, cwd):
        self.lang = lang
        self.cwd = cwd
        self.count = 0
        self.start()

    def start(self):
        r, w = os.pipe()
        if self.lang == "javascript":
            argv = ["node", RUNNER_JS]
        else:
            argv = ["bash", "--noprofile", "--norc"]
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, pass_fds=(w,), cwd=self.cwd,
                                  env=dict(os.environ, AIRLOCK_CTL_FD=str(w)),
                                  start_new_session=True)
        os.close(w)
        self.ctl_fd = w
        self.ctl = r
        self.ctlbuf = b""

    def alive(self):
        return self.p.poll() is None

    def interrupt(self):
        try:
            if self.lang == "javascript":
                self.p.send_signal(signal.SIGINT)
            else:
                os.killpg(self.p.pid, signal.SIGKILL)
        except OSError:
            pass

    def restart(self):
        self.shutdown()
        self.start()

    def shutdown(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.p.wait(5)
        except Exception:
            pass
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            try:
                f.close()
            except OSError:
                pass
        try:
            os.close(self.ctl)
        except OSError:
            pass

    def _send(self, code, env_vars):
        if self.lang == "javascript":
            msg = json.dumps({"code": code, "env": env_vars or {}}) + "\n"
        else:
            # The cell from a file, its stdin /dev/null (it must not read
            # our command pipe); env vars set for the cell and put back.
            path = "/tmp/.airlock-cell-%d-%s.sh" % (os.getpid(), uuid.uuid4().hex[:8])
            with open(path, "w") as f:
                f.write(code + "\n")
            pre, post = [], []
            for i, (k, v) in enumerate((env_vars or {}).items()):
                q = "'" + v.replace("'", "'\\''") + "'"
                pre.append('if [ "${%s+x}" ]; then __al_o%d=$%s; __al_s%d=1; else __al_s%d=; fi; '
                           'export %s=%s' % (k, i, k, i, i, k, q))
                post.append('if [ "$__al_s%d" ]; then export %s="$__al_o%d"; else unset %s; fi'
                            % (i, k, i, k))
            msg = "\n".join(pre) + "\nsource %s </dev/null\n__al_rc=$?\nrm -f %s\n%s\n" \
                  "printf '{\"done\":true,\"rc\":%%d}\\n' $__al_rc >&%d\n" % (
                      path, path, "\n".join(post), self.ctl_fd)
        self.p.stdin.write(msg.encode())
        self.p.stdin.flush()

    def execute(self, code, env_vars, sink):
        self.count += 1
        sink.line({"type": "number_of_executions", "execution_count": self.count}, force=True)
        try:
            self._send(code, env_vars)
        except OSError:
            sink.line({"type": "unexpected_end_of_execution"}, force=True)
            self.restart()
            return
        fds = {self.p.stdout.fileno(): "stdout", self.p.stderr.fileno(): "stderr",
               self.ctl: "ctl"}
        done = None
        gone = False
        interrupted = False
        while done is None:
            if not gone and sink.client_gone():
                gone = True
            if (gone or sink.capped or sink.expired()) and not interrupted:
                interrupted = True
                self.interrupt()
            r, _, _ = select.select(list(fds), [], [], 0.05)
            for fd in r:
                data = os.read(fd, 65536)
                kind = fds[fd]
                if not data:
                    if kind == "ctl" or not self.alive():
                        done = {"dead": True}
                    continue
                if kind == "ctl":
                    self.ctlbuf += data
                    while b"\n" in self.ctlbuf:
                        ln, self.ctlbuf = self.ctlbuf.split(b"\n", 1)
                        try:
                            m = json.loads(ln)
                        except ValueError:
                            continue
                        if m.get("done"):
                            done = m
                        elif not gone:
                            try:
                                sink.line(m, force=m.get("type") == "error")
                            except Gone:
                                gone = True
                elif not gone:
                    try:
                        sink.line({"type": kind, "text": data.decode("utf-8", "replace"),
                                   "timestamp": now_iso()})
                    except Gone:
                        gone = True
            if not r and not self.alive():
                done = {"dead": True}
        # What the cell wrote before its end line is in the pipes already.
        for fd, kind in list(fds.items()):
            if kind == "ctl":
                continue
            while select.select([fd], [], [], 0)[0]:
                data = os.read(fd, 65536)
                if not data:
                    break
                if not gone:
                    try:
                        sink.line({"type": kind, "text": data.decode("utf-8", "replace"),
                                   "timestamp": now_iso()})
                    except Gone:
                        gone = True
        if done.get("dead"):
            if not gone:
                if interrupted:
                    sink.line({"type": "error", "name": "Interrupted",
                               "value": "the cell was interrupted; this %s context was "
                                        "restarted (its state is lost)" % self.lang,
                               "traceback": ""}, force=True)
                else:
                    sink.line({"type": "unexpected_end_of_execution"}, force=True)
            self.restart()
        elif self.lang == "bash" and done.get("rc"):
            if not gone:
                sink.line({"type": "error", "name": "ExitCode",
                           "value": str(done["rc"]), "traceback": ""}, force=True)
        if not gone:
            sink.line({"type": "end_of_execution"}, force=True)


# ---- contexts --------------------------------------------------------------

class Context:
    def __init__(self, lang, cwd):
        self.id = str(uuid.uuid4())
        self.language = lang
        self.cwd = cwd
        self.lock = threading.Lock()
        self.impl = PyKernel(cwd) if lang == "python" else PipeRunner(lang, cwd)

    def info(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}


class Contexts:
    def __init__(self):
        self.mu = threading.Lock()
        self.by_id = {}
        self.default = {}
        self.making = {}

    def create(self, lang, cwd):
        c = Context(lang, cwd)
        with self.mu:
            self.by_id[c.id] = c
        return c

    def default_for(self, lang):
        # One default per language; a request that comes while it starts
        # (the first cell right after boot) waits for that start.
        with self.mu:
            lk = self.making.setdefault(lang, threading.Lock())
        with lk:
            with self.mu:
                c = self.default.get(lang)
                if c and c.id in self.by_id:
                    return c
            c = self.create(lang, DEFAULT_CWD)
            with self.mu:
                self.default[lang] = c
            return c

    def get(self, cid):
        with self.mu:
            return self.by_id.get(cid)

    def remove(self, cid):
        with self.mu:
            c = self.by_id.pop(cid, None)
        if c:
            c.impl.shutdown()
        return c is not None

    def list(self):
        with self.mu:
            return [c.info() for c in self.by_id.values()]


CTX = Contexts()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "airlock-code/1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, obj=None):
        body = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(status)
        if obj is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def error(self, status, code, msg):
        self.reply(status, {"error": {"code": code, "message": msg}})

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n < 0 or n > MAX_BODY:
            raise ValueError("request body over %d bytes" % MAX_BODY)
        raw = self.rfile.read(n) if n else b""
        if not raw.strip():
            return {}
        v = json.loads(raw)
        if not isinstance(v, dict):
            raise ValueError("the body must be a JSON object")
        return v

    def path_only(self):
        return self.path.split("?", 1)[0]

    def do_GET(self):
        p = self.path_only()
        if p == "/health":
            body = b"OK"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "2")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True
        elif p == "/contexts":
            self.reply(200, CTX.list())
        else:
            self.error(404, "not_found", "no such endpoint")

    def do_DELETE(self):
        m = re.fullmatch(r"/contexts/([0-9a-f-]{1,64})", self.path_only())
        if not m:
            return self.error(404, "not_found", "no such endpoint")
        if not CTX.remove(m.group(1)):
            return self.error(404, "not_found", "no context `%s`" % m.group(1))
        self.reply(204)

    def do_POST(self):
        p = self.path_only()
        try:
            body = self.body()
        except ValueError as e:
            return self.error(400, "invalid_body", str(e))
        if p == "/execute":
            return self.execute(body)
        if p == "/contexts":
            return self.create_context(body)
        m = re.fullmatch(r"/contexts/([0-9a-f-]{1,64})/restart", p)
        if m:
            c = CTX.get(m.group(1))
            if not c:
                return self.error(404, "not_found", "no context `%s`" % m.group(1))
            with c.lock:
                c.impl.restart()
            return self.reply(204)
        self.error(404, "not_found", "no such endpoint")

    def lang_of(self, v):
        if v is None:
            return "python"
        if not isinstance(v, str) or v.lower() not in LANGS:
            raise ValueError("`language` must be one of python, javascript, bash")
        return LANGS[v.lower()]

    def create_context(self, body):
        try:
            lang = self.lang_of(body.get("language"))
            cwd = body.get("cwd") or DEFAULT_CWD
            if not isinstance(cwd, str) or not cwd.startswith("/"):
                raise ValueError("`cwd` must be an absolute path")
        except ValueError as e:
            return self.error(400, "invalid_field", str(e))
        if not os.path.isdir(cwd):
            try:
                os.makedirs(cwd, exist_ok=True)
            except OSError as e:
                return self.error(400, "invalid_field", "cwd %s: %s" % (cwd, e.strerror))
        try:
            c = CTX.create(lang, cwd)
        except Exception as e:
            return self.error(500, "internal", "cannot start a %s context: %s" % (lang, e))
        self.reply(201, c.info())

    def execute(self, body):
        code = body.get("code")
        cid = body.get("context_id")
        env = body.get("env_vars") or {}
        tmo = body.get("timeout_ms")
        try:
            if not isinstance(code, str):
                raise ValueError("`code` (a string) is required")
            if cid is not None and body.get("language") is not None:
                raise ValueError("give `context_id` or `language`, not both")
            if cid is not None and not isinstance(cid, str):
                raise ValueError("`context_id` must be a string")
            lang = self.lang_of(body.get("language"))
            if not isinstance(env, dict) or len(env) > 1024 or not all(
                    isinstance(k, str) and ENV_KEY.match(k) and isinstance(v, str)
                    for k, v in env.items()):
                raise ValueError("`env_vars` must map names ([A-Za-z_][A-Za-z0-9_]*) to strings")
            if tmo is not None and (not isinstance(tmo, int) or isinstance(tmo, bool) or
                                    tmo < 0 or tmo > 86400000):
                raise ValueError("`timeout_ms` must be 0..86400000")
        except ValueError as e:
            return self.error(400, "invalid_field", str(e))
        if cid is not None:
            c = CTX.get(cid)
            if not c:
                return self.error(404, "not_found", "no context `%s`" % cid)
        else:
            try:
                c = CTX.default_for(lang)
            except Exception as e:
                return self.error(500, "internal", "cannot start a %s context: %s" % (lang, e))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        deadline = time.monotonic() + tmo / 1000.0 if tmo else None
        sink = Sink(self, deadline)
        try:
            with c.lock:
                c.impl.execute(code, env, sink)
        except Gone:
            pass


def warm_default():
    """Start the default Python context now; say so in AIRLOCK_CODE_READY
    (a file /etc/airlock/start waits for)."""
    for attempt in range(600):
        try:
            CTX.default_for("python")
            break
        except Exception as e:
            import traceback
            log("default context, attempt %d: %s\n%s" % (attempt, e, traceback.format_exc()))
            time.sleep(0.5)
    ready = os.environ.get("AIRLOCK_CODE_READY")
    if ready:
        try:
            open(ready, "w").close()
        except OSError:
            pass


class Server(ThreadingHTTPServer):
    def server_bind(self):
        # HTTPServer's own looks up the address's name (getfqdn): with no
        # /etc/hosts entry that is a DNS query, which in an ns warm jail the
        # gateway does not answer until the jail is taken (a 10 s wait
        # before we listen). We know our name.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "localhost"
        self.server_port = self.server_address[1]


def main():
    os.chdir(DEFAULT_CWD)
    srv = Server(("127.0.0.1", PORT), Handler)
    srv.daemon_threads = True
    # The default Python context, warm before the first cell asks.
    threading.Thread(target=warm_default, daemon=True).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
