/**
 * Typed errors, mapped from the API's answers
 * (`{"error":{"code","message"}}` with an HTTP status; docs/API.md, "Errors").
 *
 * Every error the SDK throws is an {@link AirlockError}; catch a subclass to
 * handle one case:
 *
 * | status | class |
 * |---|---|
 * | 400, 413, 422 `invalid_argument` | {@link InvalidRequestError} |
 * | 401, 403 | {@link AuthenticationError} |
 * | 404 | {@link NotFoundError} |
 * | 408, 504, a client-side timeout | {@link TimeoutError} |
 * | 409 | {@link ConflictError} (with the sandbox's `state`) |
 * | 422 `quota_exceeded`, `over_capacity`, `limit_exceeded` | {@link QuotaExceededError} |
 * | 429 | {@link RateLimitError} (with `retryAfter` seconds) |
 * | 501 | {@link NotSupportedError} |
 * | other 5xx | {@link ServerError} |
 * | no answer (connection refused, reset) | {@link ConnectionError} |
 *
 * @packageDocumentation
 */

/** What the API said, as far as it said it. */
export interface ErrorDetails {
  /** HTTP status; 0 when there was no answer. */
  status?: number;
  /** The API's error code (`not_found`, `conflict`, `rate_limited`, ...). */
  code?: string;
  /** The whole parsed answer body, when it was JSON. */
  body?: unknown;
  /** Seconds to wait, from `Retry-After` (429, 503 `busy`). */
  retryAfter?: number;
  /** The error that caused this one (network errors, aborts). */
  cause?: unknown;
}

/** Base class of every error the SDK throws. */
export class AirlockError extends Error {
  /** HTTP status of the answer; 0 when there was none. */
  readonly status: number;
  /** The API's error code, e.g. `not_found`; `""` when there was none. */
  readonly code: string;
  /** The parsed answer body, when it was JSON. */
  readonly body: unknown;

  constructor(message: string, details: ErrorDetails = {}) {
    super(message, details.cause !== undefined ? { cause: details.cause } : undefined);
    this.name = new.target.name;
    this.status = details.status ?? 0;
    this.code = details.code ?? "";
    this.body = details.body;
  }
}

/** 400 (bad or unknown field, bad JSON), 413 (body too large) or 422 `invalid_argument`. */
export class InvalidRequestError extends AirlockError {}

/** 401 (no or bad API key) or 403 (an admin endpoint). */
export class AuthenticationError extends AirlockError {}

/** 404: no such sandbox (or another tenant's), template, snapshot, file or process. */
export class NotFoundError extends AirlockError {}

/** 409: the sandbox is in a state that does not allow the call (see {@link ConflictError.state}). */
export class ConflictError extends AirlockError {
  /** The sandbox's state when the API refused, e.g. `paused`, when it said. */
  readonly state?: string;

  constructor(message: string, details: ErrorDetails = {}) {
    super(message, details);
    const b = details.body as { state?: unknown } | undefined;
    if (b && typeof b.state === "string") this.state = b.state;
  }
}

/** 422: a tenant quota, the node's capacity or a limit (`quota_exceeded`, `over_capacity`, `limit_exceeded`). */
export class QuotaExceededError extends AirlockError {}

/** 429: rate limited, too many requests in progress or too many connections. */
export class RateLimitError extends AirlockError {
  /** Seconds the server asked to wait (`Retry-After`), when it said. */
  readonly retryAfter?: number;

  constructor(message: string, details: ErrorDetails = {}) {
    super(message, details);
    this.retryAfter = details.retryAfter;
  }
}

/** 5xx: the server or a node failed (`internal`, `unavailable`, `busy`, ...). */
export class ServerError extends AirlockError {
  /** Seconds the server asked to wait (`Retry-After`), when it said. */
  readonly retryAfter?: number;

  constructor(message: string, details: ErrorDetails = {}) {
    super(message, details);
    this.retryAfter = details.retryAfter;
  }
}

/** 501: the sandbox's backend or the node cannot do this (e.g. pause, full snapshots on ns). */
export class NotSupportedError extends ServerError {}

/** 408/504 from the server, or the SDK's own request timeout ran out. */
export class TimeoutError extends AirlockError {}

/** No answer: the connection was refused or broke before an answer came. */
export class ConnectionError extends AirlockError {}

/** The caller's AbortSignal aborted the call. */
export class AbortError extends AirlockError {}

/** The error class for an API answer of this status and code. */
export function errorFor(status: number, code: string, message: string, details: ErrorDetails): AirlockError {
  const d = { ...details, status, code };
  const text = message || `HTTP ${status}${code ? ` ${code}` : ""}`;
  switch (status) {
    case 400:
    case 413:
      return new InvalidRequestError(text, d);
    case 401:
    case 403:
      return new AuthenticationError(text, d);
    case 404:
      return new NotFoundError(text, d);
    case 408:
    case 504:
      return new TimeoutError(text, d);
    case 409:
      return new ConflictError(text, d);
    case 422:
      return code === "invalid_argument" ? new InvalidRequestError(text, d) : new QuotaExceededError(text, d);
    case 429:
      return new RateLimitError(text, d);
    case 501:
      return new NotSupportedError(text, d);
  }
  if (status >= 500) return new ServerError(text, d);
  return new AirlockError(text, d);
}
