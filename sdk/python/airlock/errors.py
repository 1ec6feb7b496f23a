"""Typed exceptions of the Airlock SDK.

Every error answer of the API is ``{"error": {"code": ..., "message": ...}}``
with an HTTP status (docs/API.md, "Errors"). The SDK raises the class that
matches the status (and, for a few, the code); each carries ``status``,
``code`` and ``message`` as the server sent them, and ``body`` (the decoded
JSON answer, or ``None``)."""
import builtins
import json


class AirlockError(Exception):
    """Base class of every error the SDK raises.

    Attributes: ``status`` (HTTP status, ``None`` when no answer came),
    ``code`` (the API's snake_case error code, or an SDK code such as
    ``connection_error``), ``message`` (human text), ``body`` (the decoded
    answer object, if any)."""

    def __init__(self, message, status=None, code=None, body=None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.body = body

    def __str__(self):
        parts = []
        if self.status is not None:
            parts.append(str(self.status))
        if self.code:
            parts.append(self.code)
        head = " ".join(parts)
        return f"{head}: {self.message}" if head else self.message


class APIConnectionError(AirlockError):
    """The server could not be reached, or the connection broke before an
    answer came (after the SDK's retries, where a retry was safe)."""


class TimeoutError(AirlockError, builtins.TimeoutError):
    """A call took longer than its timeout: the client gave up waiting
    (``status`` None, code ``timeout``), or the server answered 408/504."""


class InvalidRequestError(AirlockError):
    """400, 413 or 422: the request was refused as it stands (bad field,
    unknown field, body too large, over capacity, limit exceeded...)."""


class QuotaExceededError(InvalidRequestError):
    """422 ``quota_exceeded``: a tenant quota or ``max_snapshots`` would be
    passed. Nothing was made."""


class AuthenticationError(AirlockError):
    """401 (no or a wrong API key) or 403 (an admin-only endpoint)."""


class NotFoundError(AirlockError):
    """404: no such sandbox (or one of another tenant), snapshot, file,
    process or template."""


class ConflictError(AirlockError):
    """409: the request does not fit the sandbox's state (``state`` holds the
    state the server reported, e.g. ``"paused"``), or a name is taken."""

    @property
    def state(self):
        """The sandbox state the server named beside the error, or None."""
        return (self.body or {}).get("state") if isinstance(self.body, dict) else None


class RateLimitError(AirlockError):
    """429: the key's rate limit, the tenant's in-flight cap or the client's
    connection cap. ``retry_after`` is the server's ``Retry-After`` (seconds)
    or None. Raised only once the SDK's retries are used up."""

    def __init__(self, message, status=None, code=None, body=None, retry_after=None):
        super().__init__(message, status, code, body)
        self.retry_after = retry_after


class NotSupportedError(AirlockError):
    """501: the backend or node cannot do this (e.g. a full snapshot on ns)."""


class ServerError(AirlockError):
    """Any other 5xx answer (internal, unavailable, busy, bad gateway)."""


class CommandExitError(AirlockError):
    """Raised by ``commands.run(..., check=True)`` (or ``handle.wait(check=True)``)
    when the command did not exit 0. ``result`` is the whole
    :class:`~airlock.commands.CommandResult`; ``exit_code``, ``signal``,
    ``stdout`` and ``stderr`` are copied from it."""

    def __init__(self, result):
        what = (f"signal {result.signal}" if result.signal else f"exit code {result.exit_code}")
        super().__init__(f"command {result.cmd!r} ended with {what}", code="command_exit")
        self.result = result
        self.exit_code = result.exit_code
        self.signal = result.signal
        self.stdout = result.stdout
        self.stderr = result.stderr


def _retry_after(headers):
    v = headers.get("Retry-After") if headers else None
    try:
        return max(0.0, float(v)) if v is not None else None
    except ValueError:
        return None


def error_from_response(status, data, headers=None):
    """The exception for an error answer: status, raw body bytes, headers."""
    body, code, message = None, None, None
    try:
        body = json.loads(data) if data else None
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            code, message = err.get("code"), err.get("message")
    except (ValueError, UnicodeDecodeError):
        body = None
    if message is None:
        message = (data or b"").decode("utf-8", "replace")[:300] or f"HTTP {status}"
    if status == 429:
        return RateLimitError(message, status, code, body, _retry_after(headers))
    if status in (401, 403):
        cls = AuthenticationError
    elif status == 404:
        cls = NotFoundError
    elif status == 409:
        cls = ConflictError
    elif status == 422 and code == "quota_exceeded":
        cls = QuotaExceededError
    elif status in (400, 413, 422) or (400 <= status < 500 and status != 408):
        cls = InvalidRequestError
    elif status in (408, 504):
        cls = TimeoutError
    elif status == 501:
        cls = NotSupportedError
    else:
        cls = ServerError
    return cls(message, status, code, body)
