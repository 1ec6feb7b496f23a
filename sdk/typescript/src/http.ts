/**
 * The HTTP layer: one place that adds the API key, applies timeouts and
 * retries, and turns error answers into typed errors. Uses Node's global
 * `fetch` (Node >= 18); no dependencies.
 */
import {
  AbortError,
  AirlockError,
  ConnectionError,
  TimeoutError,
  errorFor,
} from "./errors.js";

/** Where the API is and how to talk to it. Every field is optional. */
export interface ConnectionOptions {
  /** Base URL of the API, e.g. `http://127.0.0.1:7070`. Default: env `AIRLOCK_API_URL`, else `http://127.0.0.1:7070`. */
  apiUrl?: string;
  /** API key (`Authorization: Bearer`). Default: env `AIRLOCK_API_KEY`. */
  apiKey?: string;
  /** Time allowed for one request until its answer's head, in ms (default 60 000; sandbox creation: 600 000). */
  requestTimeoutMs?: number;
  /** How many times a failed request is retried when that is safe (default 3). */
  maxRetries?: number;
}

/** Per-call options shared by most methods. */
export interface CallOptions {
  /** Abort the call. */
  signal?: AbortSignal;
  /** Overrides {@link ConnectionOptions.requestTimeoutMs} for this call. */
  requestTimeoutMs?: number;
}

export interface RequestOptions extends CallOptions {
  query?: Record<string, string | number | boolean | undefined | null>;
  json?: unknown;
  body?: Uint8Array | string;
  headers?: Record<string, string>;
  /**
   * Whether repeating the request after a lost answer is harmless. GET,
   * PUT and DELETE are by default; a POST only when the caller says so
   * (a create with an Idempotency-Key). Answers the server gives before
   * doing anything (429, 503 `busy`) are retried whatever this says.
   */
  idempotent?: boolean;
}

const DEFAULT_URL = "http://127.0.0.1:7070";
const RETRY_BASE_MS = 250;
const RETRY_MAX_MS = 8000;
/** The longest Retry-After the SDK waits out by itself; past it the error is the caller's. */
const RETRY_AFTER_MAX_S = 60;
/** The longest NDJSON line taken from a server (a file watch or exec line is far shorter). */
const MAX_LINE = 16 << 20;

function envVar(name: string): string | undefined {
  const v = typeof process !== "undefined" ? process.env[name] : undefined;
  return v ? v : undefined;
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(abortError(signal!));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export function abortError(signal: AbortSignal): AirlockError {
  const r = signal.reason;
  if (r instanceof AirlockError) return r;
  return new AbortError("the call was aborted", { cause: r });
}

/** Seconds from a Retry-After header (delta-seconds or an HTTP date). */
function parseRetryAfter(v: string | null): number | undefined {
  if (!v) return undefined;
  if (/^\s*\d+\s*$/.test(v)) return parseInt(v, 10);
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(0, Math.ceil((t - Date.now()) / 1000));
}

/** Exponential backoff with full jitter. */
function backoffMs(attempt: number): number {
  const cap = Math.min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** attempt);
  return cap / 2 + Math.random() * (cap / 2);
}

/**
 * One AbortSignal for a call: the caller's signal, and a timer that runs
 * until {@link Deadline.stopTimer} (once the answer's head is in, for
 * streams). `done()` detaches from the caller's signal.
 */
class Deadline {
  readonly controller = new AbortController();
  private timer?: ReturnType<typeof setTimeout>;
  private readonly onAbort: () => void;

  constructor(private readonly user: AbortSignal | undefined, timeoutMs: number) {
    this.onAbort = () => this.controller.abort(abortError(user!));
    if (user) {
      if (user.aborted) this.onAbort();
      else user.addEventListener("abort", this.onAbort, { once: true });
    }
    if (timeoutMs > 0 && Number.isFinite(timeoutMs)) {
      this.timer = setTimeout(
        () => this.controller.abort(new TimeoutError(`no answer within ${timeoutMs} ms`)),
        timeoutMs,
      );
    }
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  stopTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  done(): void {
    this.stopTimer();
    this.user?.removeEventListener("abort", this.onAbort);
  }
}

/** An answer whose body is still to be read (streams), with its cleanup. */
export interface OpenResponse {
  response: Response;
  /** The signal that aborts reading the body (the caller's). */
  signal: AbortSignal;
  /** Stop the body and detach from the caller's signal. */
  close(): void;
}

/** The client every object of one connection shares. */
export class HttpClient {
  readonly apiUrl: string;
  readonly apiKey: string | undefined;
  readonly requestTimeoutMs: number;
  readonly maxRetries: number;

  constructor(opts: ConnectionOptions = {}) {
    this.apiUrl = (opts.apiUrl ?? envVar("AIRLOCK_API_URL") ?? DEFAULT_URL).replace(/\/+$/, "");
    this.apiKey = opts.apiKey ?? envVar("AIRLOCK_API_KEY");
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 60_000;
    this.maxRetries = opts.maxRetries ?? 3;
  }

  /** The options that make another client like this one. */
  get options(): ConnectionOptions {
    return {
      apiUrl: this.apiUrl,
      apiKey: this.apiKey,
      requestTimeoutMs: this.requestTimeoutMs,
      maxRetries: this.maxRetries,
    };
  }

  url(path: string, query?: RequestOptions["query"]): string {
    const u = new URL(this.apiUrl + path);
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined && v !== null) u.searchParams.set(k, String(v));
    }
    return u.toString();
  }

  /** JSON answer (or undefined for 204). */
  json<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    return this.whole(method, path, opts, async (res) => {
      if (res.status === 204) return undefined as T;
      const text = await res.text();
      return (text ? JSON.parse(text) : undefined) as T;
    });
  }

  /** The answer's bytes. */
  bytes(method: string, path: string, opts: RequestOptions = {}): Promise<Uint8Array> {
    return this.whole(method, path, opts, async (res) => new Uint8Array(await res.arrayBuffer()));
  }

  /**
   * A request whose answer is read whole. An answer that breaks off in its
   * body is asked for again when the request is idempotent, like one that
   * never came.
   */
  private async whole<T>(method: string, path: string, opts: RequestOptions, read: (res: Response) => Promise<T>): Promise<T> {
    const idempotent = opts.idempotent ?? (method === "GET" || method === "PUT" || method === "DELETE");
    for (let attempt = 0; ; attempt++) {
      const r = await this.open(method, path, opts);
      try {
        return await read(r.response);
      } catch (e) {
        const err = this.readError(e, r.signal);
        if (!(err instanceof ConnectionError) || !idempotent || attempt >= this.maxRetries) throw err;
      } finally {
        r.close();
      }
      await sleep(backoffMs(attempt), opts.signal);
    }
  }

  /** An error while reading a body: an abort, a timeout or a broken connection. */
  readError(e: unknown, signal: AbortSignal): AirlockError {
    if (e instanceof AirlockError) return e;
    if (signal.aborted) return abortError(signal);
    return new ConnectionError(`the answer broke off: ${describe(e)}`, { cause: e });
  }

  /**
   * Send a request and return once a successful answer's head is in
   * (its body still to read), retrying as {@link RequestOptions.idempotent}
   * allows. Error answers throw typed errors.
   */
  async open(method: string, path: string, opts: RequestOptions = {}): Promise<OpenResponse> {
    const idempotent = opts.idempotent ?? (method === "GET" || method === "PUT" || method === "DELETE");
    const headers: Record<string, string> = { ...(opts.headers ?? {}) };
    if (this.apiKey) headers["Authorization"] = `Bearer ${this.apiKey}`;
    let body: Uint8Array | string | undefined = opts.body;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers["Content-Type"] = "application/json";
    } else if (body !== undefined && !headers["Content-Type"]) {
      headers["Content-Type"] = "application/octet-stream";
    }
    const url = this.url(path, opts.query);
    const timeoutMs = opts.requestTimeoutMs ?? this.requestTimeoutMs;

    for (let attempt = 0; ; attempt++) {
      const dl = new Deadline(opts.signal, timeoutMs);
      let res: Response;
      try {
        // No redirects: the API answers none, and following one would send
        // the key's request (and body) somewhere the caller did not name.
        res = await fetch(url, { method, headers, body, signal: dl.signal, redirect: "manual" });
      } catch (e) {
        dl.done();
        if (opts.signal?.aborted) throw abortError(opts.signal);
        const reason = dl.signal.reason;
        if (reason instanceof TimeoutError) {
          if (idempotent && attempt < this.maxRetries) continue;
          throw reason;
        }
        const err = new ConnectionError(`${method} ${path}: ${describe(e)}`, { cause: e });
        if (idempotent && attempt < this.maxRetries) {
          await sleep(backoffMs(attempt), opts.signal);
          continue;
        }
        throw err;
      }
      if (res.ok) {
        dl.stopTimer();
        return {
          response: res,
          signal: dl.signal,
          close: () => {
            dl.done();
            // Drop the rest of a body nobody reads; free its connection.
            if (!res.bodyUsed) res.body?.cancel().catch(() => {});
          },
        };
      }
      const err = await this.errorOf(res, method, path, dl.signal);
      dl.done();
      const retryAfter = (err as { retryAfter?: number }).retryAfter;
      // 429 and 503 `busy` come before the request did anything.
      const refused = err.status === 429 || (err.status === 503 && err.code === "busy");
      const transient = err.status === 502 || err.status === 503 || err.status === 504;
      const tooLong = retryAfter !== undefined && retryAfter > RETRY_AFTER_MAX_S;
      if (attempt < this.maxRetries && !tooLong && (refused || (idempotent && transient))) {
        const wait = retryAfter !== undefined ? retryAfter * 1000 : backoffMs(attempt);
        await sleep(wait, opts.signal);
        continue;
      }
      throw err;
    }
  }

  private async errorOf(res: Response, method: string, path: string, signal: AbortSignal): Promise<AirlockError> {
    let text = "";
    try {
      text = await res.text();
    } catch (e) {
      if (signal.aborted) return abortError(signal);
    }
    let body: unknown;
    let code = "";
    let message = "";
    try {
      body = JSON.parse(text);
      const e = (body as { error?: { code?: unknown; message?: unknown } }).error;
      if (e && typeof e.code === "string") code = e.code;
      if (e && typeof e.message === "string") message = e.message;
    } catch {
      message = text.slice(0, 300);
    }
    const retryAfter = parseRetryAfter(res.headers.get("retry-after"));
    const msg = `${method} ${path}: ${res.status}${code ? ` ${code}` : ""}${message ? `: ${message}` : ""}`;
    return errorFor(res.status, code, msg, { body, retryAfter });
  }
}

function describe(e: unknown): string {
  if (e instanceof Error) {
    const c = (e as { cause?: unknown }).cause;
    return c instanceof Error ? `${e.message} (${c.message})` : e.message;
  }
  return String(e);
}

/**
 * NDJSON lines of a streamed answer, parsed, as they arrive. Throws
 * {@link ConnectionError} when the stream breaks, {@link AbortError} when
 * the caller's signal aborts it.
 */
export async function* ndjson<T = Record<string, unknown>>(r: OpenResponse, http: HttpClient): AsyncGenerator<T> {
  const body = r.response.body;
  if (!body) return;
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let pending = "";
  try {
    for (;;) {
      let chunk: { done: boolean; value?: Uint8Array };
      try {
        chunk = await reader.read();
      } catch (e) {
        throw http.readError(e, r.signal);
      }
      if (chunk.done || !chunk.value) break;
      pending += decoder.decode(chunk.value, { stream: true });
      if (pending.length > MAX_LINE && pending.indexOf("\n") < 0) {
        throw new ConnectionError(`a stream line over ${MAX_LINE} bytes`);
      }
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, nl).trim();
        pending = pending.slice(nl + 1);
        if (line) yield JSON.parse(line) as T;
      }
    }
    const last = (pending + decoder.decode()).trim();
    if (last) {
      let v: T;
      try {
        v = JSON.parse(last) as T;
      } catch {
        // A line cut short: the stream broke off, however cleanly.
        throw new ConnectionError("the stream ended inside a line");
      }
      yield v;
    }
  } finally {
    reader.cancel().catch(() => {});
    r.close();
  }
}

