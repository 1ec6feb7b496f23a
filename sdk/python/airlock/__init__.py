"""Airlock Python SDK (standard library only).

    from airlock import Sandbox
    with Sandbox.create(template="debian") as sb:
        print(sb.commands.run("echo hi").stdout)

See README.md in this directory for every feature."""
from .errors import (AirlockError, APIConnectionError, AuthenticationError, CommandExitError,
                     ConflictError, InvalidRequestError, NotFoundError, NotSupportedError,
                     QuotaExceededError, RateLimitError, ServerError, TimeoutError)
from .commands import CommandHandle, CommandResult, PtyHandle
from .sandbox import Sandbox, WatchHandle
from .code import Context, Execution, ExecutionError, Logs, Result
from ._transport import Transport

__version__ = "0.1.0"
__all__ = ["Sandbox", "CommandHandle", "CommandResult", "PtyHandle", "WatchHandle", "Transport",
           "Context", "Execution", "ExecutionError", "Logs", "Result",
           "AirlockError", "APIConnectionError", "AuthenticationError", "CommandExitError",
           "ConflictError", "InvalidRequestError", "NotFoundError", "NotSupportedError",
           "QuotaExceededError", "RateLimitError", "ServerError", "TimeoutError"]
