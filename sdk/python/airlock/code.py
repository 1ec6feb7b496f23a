"""The code interpreter of a ``code-interpreter`` sandbox: ``sb.run_code()``
and code contexts (docs/API.md, "Code interpreter").

``POST /v1/sandboxes/{id}/code`` answers NDJSON lines in the shape of E2B's
code-interpreter service; :class:`Execution` collects them the way
``@e2b/code-interpreter`` does, and the ``on_*`` callbacks see each one as it
comes."""
import base64
import urllib.parse

from . import errors
from .commands import _Broken, _close, _ndjson

# Result keys that are formats (the rest go to ``extra``), as E2B's SDK has it.
_FORMATS = ("text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json",
            "javascript", "data", "chart")


class Result:
    """One rich result of a cell (an ``IPython.display`` output or the
    cell's value). ``text``, ``html``, ``markdown``, ``svg``, ``latex``:
    str; ``png``, ``jpeg``, ``pdf``: base64 str (:meth:`png_bytes` decodes);
    ``json``, ``data``, ``chart``: decoded values; ``is_main_result``: the
    cell's value (the last expression) rather than a display; ``extra``:
    formats this SDK does not name; ``raw``: the whole line."""

    def __init__(self, line):
        data = {k: v for k, v in line.items() if k not in ("type", "is_main_result")}
        self.raw = data
        self.is_main_result = bool(line.get("is_main_result"))
        for k in _FORMATS:
            setattr(self, k, data.get(k))
        self.extra = {k: v for k, v in data.items() if k not in _FORMATS}

    def formats(self):
        """The formats present, e.g. ``["html", "png"]`` (``text`` not listed)."""
        return [k for k in _FORMATS[1:] if getattr(self, k)] + list(self.extra)

    def _bytes(self, what):
        v = getattr(self, what)
        return base64.b64decode(v) if v else None

    def png_bytes(self):
        """The PNG decoded, or None."""
        return self._bytes("png")

    def jpeg_bytes(self):
        """The JPEG decoded, or None."""
        return self._bytes("jpeg")

    def __str__(self):
        return self.text or ""

    def __repr__(self):
        return f"Result({', '.join(['text'] + self.formats() if self.text else self.formats())})"


class ExecutionError:
    """The error a cell raised: ``name`` (e.g. ``ZeroDivisionError``),
    ``value`` (its message) and ``traceback`` (text)."""

    def __init__(self, name, value, traceback):
        self.name, self.value = name or "", value or ""
        if isinstance(traceback, list):
            traceback = "\n".join(str(x) for x in traceback)
        self.traceback = traceback or ""

    def __repr__(self):
        return f"ExecutionError({self.name}: {self.value})"


class Logs:
    """``stdout`` and ``stderr``: the chunks of text printed, in order."""

    def __init__(self):
        self.stdout, self.stderr = [], []

    def __repr__(self):
        return f"Logs(stdout={self.stdout!r}, stderr={self.stderr!r})"


class Execution:
    """What a cell left: ``results`` (:class:`Result`), ``logs``
    (:class:`Logs`), ``error`` (:class:`ExecutionError` or None) and
    ``execution_count``. ``text``: the main result's text."""

    def __init__(self):
        self.results, self.logs = [], Logs()
        self.error = None
        self.execution_count = None

    @property
    def text(self):
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

    def __repr__(self):
        return (f"Execution(results={self.results!r}, logs={self.logs!r}, error={self.error!r},"
                f" execution_count={self.execution_count})")


class Context:
    """A code context: its own kernel and working directory (``id``,
    ``language``, ``cwd``)."""

    def __init__(self, data):
        self.id = data["id"]
        self.language = data.get("language")
        self.cwd = data.get("cwd")
        self.data = data

    def __repr__(self):
        return f"Context(id={self.id!r}, language={self.language!r}, cwd={self.cwd!r})"


def _cid(context):
    if context is None:
        return None
    if isinstance(context, str):
        return context
    if isinstance(context, dict):
        return context["id"]
    return context.id


def run_code(sb, code, language=None, context=None, envs=None, timeout=None, on_stdout=None,
             on_stderr=None, on_result=None, on_error=None):
    """sb.run_code: see :meth:`airlock.Sandbox.run_code`."""
    if language is not None and context is not None:
        raise errors.InvalidRequestError("give language or context, not both",
                                         code="invalid_argument")
    body = {"code": code}
    if language is not None:
        body["language"] = language
    if context is not None:
        body["context_id"] = _cid(context)
    if envs:
        body["env_vars"] = dict(envs)
    if timeout is not None:
        body["timeout_ms"] = int(timeout * 1000)
    # A cell may print nothing for a long while: no read timeout shorter
    # than its own timeout (none without one).
    rt = None if timeout is None else timeout + 30.0
    conn, resp = sb._t.open_stream("POST", f"/v1/sandboxes/{sb.id}/code", json_body=body,
                                   retry=False, read_timeout=rt)
    ex = Execution()
    ended = False
    try:
        for line in _ndjson(resp):
            t = line.get("type")
            if t == "stdout" or t == "stderr":
                text = line.get("text", "")
                getattr(ex.logs, t).append(text)
                cb = on_stdout if t == "stdout" else on_stderr
                if cb is not None:
                    cb(text)
            elif t == "result":
                r = Result(line)
                ex.results.append(r)
                if on_result is not None:
                    on_result(r)
            elif t == "error" and isinstance(line.get("error"), dict):
                # Airlock's own error line, not the cell's
                e = line["error"]
                raise errors.ServerError(e.get("message", "the cell failed"),
                                         code=e.get("code", "internal"))
            elif t == "error":
                ex.error = ExecutionError(line.get("name"), line.get("value"),
                                          line.get("traceback"))
                if on_error is not None:
                    on_error(ex.error)
            elif t == "number_of_executions":
                ex.execution_count = line.get("execution_count")
            elif t == "end_of_execution":
                ended = True
                break
            elif t == "unexpected_end_of_execution":
                raise errors.ServerError("the code service ended the cell unexpectedly",
                                         code="unexpected_end_of_execution")
    except _Broken as b:
        if b.quiet:
            raise errors.TimeoutError("no output from the cell within the timeout",
                                      code="timeout") from None
        raise errors.APIConnectionError(f"the code stream broke: {b}",
                                        code="connection_error") from None
    finally:
        _close(conn)
    if not ended:
        raise errors.APIConnectionError("the code stream ended before the cell did",
                                        code="connection_error")
    return ex


class CodeContexts:
    """The context calls, as methods of :class:`~airlock.Sandbox`."""

    def __init__(self, sb):
        self._sb = sb

    def _p(self, sub=""):
        return f"/v1/sandboxes/{self._sb.id}/code/contexts{sub}"

    def create(self, language=None, cwd=None):
        body = {}
        if language is not None:
            body["language"] = language
        if cwd is not None:
            body["cwd"] = cwd
        return Context(self._sb._t.call("POST", self._p(), json_body=body))

    def list(self):
        got = self._sb._t.call("GET", self._p())
        items = got.get("contexts", []) if isinstance(got, dict) else (got or [])
        return [Context(c) for c in items]

    def restart(self, context):
        cid = urllib.parse.quote(_cid(context), safe="")
        self._sb._t.request("POST", self._p(f"/{cid}/restart"))

    def remove(self, context):
        cid = urllib.parse.quote(_cid(context), safe="")
        self._sb._t.request("DELETE", self._p(f"/{cid}"))
