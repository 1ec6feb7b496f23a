/**
 * The code interpreter of a `code-interpreter` sandbox: `sandbox.runCode()`
 * and code contexts (docs/API.md, "Code interpreter").
 *
 * `POST /v1/sandboxes/{id}/code` answers NDJSON lines in the shape of E2B's
 * code-interpreter service; {@link Execution} collects them as
 * `@e2b/code-interpreter` does, and the callbacks see each as it comes.
 */
import { ConnectionError, ServerError } from "./errors.js";
import { CallOptions, HttpClient, ndjson } from "./http.js";

/** Result keys that are formats; the others go to {@link Result.extra}. */
const FORMATS = ["text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript", "data", "chart"] as const;

/** One rich result of a cell: a display output or the cell's value. */
export class Result {
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  /** base64 */
  png?: string;
  /** base64 */
  jpeg?: string;
  /** base64 */
  pdf?: string;
  latex?: string;
  json?: unknown;
  javascript?: string;
  data?: unknown;
  chart?: unknown;
  /** Formats this SDK does not name. */
  extra: Record<string, unknown> = {};
  /** The line without `type` and `is_main_result`. */
  raw: Record<string, unknown>;
  /** The cell's value (its last expression) rather than a display. */
  isMainResult: boolean;

  constructor(line: Record<string, unknown>) {
    const data: Record<string, unknown> = { ...line };
    delete data.type;
    delete data.is_main_result;
    this.raw = data;
    this.isMainResult = line.is_main_result === true;
    const self = this as unknown as Record<string, unknown>;
    for (const k of FORMATS) self[k] = data[k];
    for (const [k, v] of Object.entries(data)) {
      if (!(FORMATS as readonly string[]).includes(k)) this.extra[k] = v;
    }
  }

  /** The formats present besides text, e.g. `["html", "png"]`. */
  formats(): string[] {
    const self = this as unknown as Record<string, unknown>;
    return [...FORMATS.slice(1).filter((k) => self[k]), ...Object.keys(this.extra)];
  }
}

/** The error a cell raised. */
export class ExecutionError {
  /** The traceback as text. */
  traceback: string;
  constructor(
    /** e.g. `ZeroDivisionError` */
    public name: string,
    /** its message */
    public value: string,
    traceback: unknown,
  ) {
    this.traceback = Array.isArray(traceback) ? traceback.join("\n") : typeof traceback === "string" ? traceback : "";
  }
}

/** What a cell printed, chunk by chunk. */
export interface Logs {
  stdout: string[];
  stderr: string[];
}

/** What a cell left. */
export class Execution {
  results: Result[] = [];
  logs: Logs = { stdout: [], stderr: [] };
  error?: ExecutionError;
  executionCount?: number;

  /** The main result's text. */
  get text(): string | undefined {
    return this.results.find((r) => r.isMainResult)?.text;
  }
}

/** A code context: its own kernel and working directory. */
export interface Context {
  id: string;
  language: string;
  cwd: string;
}

/** A chunk of a cell's stdout or stderr, as the callbacks get it. */
export interface OutputMessage {
  line: string;
  error: boolean;
  /** microseconds since the epoch */
  timestamp: number;
}

/** Options of {@link Sandbox.runCode}. */
export interface RunCodeOptions extends CallOptions {
  /** `python` (default), `javascript`, `bash`...: that language's default context. */
  language?: string;
  /** A context of {@link Sandbox.createCodeContext} (not with `language`). */
  context?: Context | string;
  /** Env vars of this cell only. */
  envs?: Record<string, string>;
  /** The kernel is interrupted after this long (its state kept). */
  timeoutMs?: number;
  onStdout?: (out: OutputMessage) => unknown;
  onStderr?: (out: OutputMessage) => unknown;
  onResult?: (r: Result) => unknown;
  onError?: (e: ExecutionError) => unknown;
}

function ctxPath(id: string, rest = ""): string {
  return `/v1/sandboxes/${encodeURIComponent(id)}/code/contexts${rest}`;
}

/** @internal */
export async function runCode(http: HttpClient, sandboxId: string, code: string, opts: RunCodeOptions = {}): Promise<Execution> {
  if (opts.language !== undefined && opts.context !== undefined) {
    throw new TypeError("runCode: give language or context, not both");
  }
  const json: Record<string, unknown> = { code };
  if (opts.language !== undefined) json.language = opts.language;
  if (opts.context !== undefined) json.context_id = typeof opts.context === "string" ? opts.context : opts.context.id;
  if (opts.envs) json.env_vars = opts.envs;
  if (opts.timeoutMs !== undefined) json.timeout_ms = opts.timeoutMs;
  const r = await http.open("POST", `/v1/sandboxes/${encodeURIComponent(sandboxId)}/code`, {
    json,
    signal: opts.signal,
    idempotent: false,
    requestTimeoutMs: opts.requestTimeoutMs,
  });
  const ex = new Execution();
  let ended = false;
  const now = () => Date.now() * 1000;
  for await (const line of ndjson<Record<string, unknown>>(r, http)) {
    switch (line.type) {
      case "stdout":
      case "stderr": {
        const text = String(line.text ?? "");
        const err = line.type === "stderr";
        (err ? ex.logs.stderr : ex.logs.stdout).push(text);
        const cb = err ? opts.onStderr : opts.onStdout;
        if (cb) await cb({ line: text, error: err, timestamp: now() });
        break;
      }
      case "result": {
        const res = new Result(line);
        ex.results.push(res);
        if (opts.onResult) await opts.onResult(res);
        break;
      }
      case "error": {
        const e = line.error as { code?: string; message?: string } | undefined;
        if (e && typeof e === "object") {
          // Airlock's own error line, not the cell's
          throw new ServerError(`runCode: ${e.code ?? "internal"}: ${e.message ?? "the cell failed"}`, { status: 500, code: e.code ?? "internal" });
        }
        ex.error = new ExecutionError(String(line.name ?? ""), String(line.value ?? ""), line.traceback);
        if (opts.onError) await opts.onError(ex.error);
        break;
      }
      case "number_of_executions":
        ex.executionCount = line.execution_count as number;
        break;
      case "end_of_execution":
        ended = true;
        break;
      case "unexpected_end_of_execution":
        throw new ServerError("runCode: the code service ended the cell unexpectedly", { status: 500, code: "unexpected_end_of_execution" });
    }
    if (ended) break;
  }
  if (!ended) throw new ConnectionError("runCode: the stream ended before the cell did");
  return ex;
}

/** @internal */
export async function createCodeContext(http: HttpClient, sandboxId: string, opts: CallOptions & { language?: string; cwd?: string } = {}): Promise<Context> {
  const json: Record<string, string> = {};
  if (opts.language !== undefined) json.language = opts.language;
  if (opts.cwd !== undefined) json.cwd = opts.cwd;
  return http.json<Context>("POST", ctxPath(sandboxId), { ...opts, json });
}

/** @internal */
export async function listCodeContexts(http: HttpClient, sandboxId: string, opts: CallOptions = {}): Promise<Context[]> {
  const r = await http.json<Context[] | { contexts: Context[] }>("GET", ctxPath(sandboxId), opts);
  return Array.isArray(r) ? r : (r?.contexts ?? []);
}

/** @internal */
export async function restartCodeContext(http: HttpClient, sandboxId: string, context: Context | string, opts: CallOptions = {}): Promise<void> {
  const id = typeof context === "string" ? context : context.id;
  await http.json("POST", ctxPath(sandboxId, `/${encodeURIComponent(id)}/restart`), opts);
}

/** @internal */
export async function removeCodeContext(http: HttpClient, sandboxId: string, context: Context | string, opts: CallOptions = {}): Promise<void> {
  const id = typeof context === "string" ? context : context.id;
  await http.json("DELETE", ctxPath(sandboxId, `/${encodeURIComponent(id)}`), opts);
}
