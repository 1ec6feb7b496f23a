/**
 * Processes in a sandbox: `sb.commands` and `sb.pty`.
 *
 * A process outlives the HTTP stream that started it and the node keeps the
 * last 1 MiB of each of its outputs, so when a stream breaks the SDK asks for
 * the rest with `GET .../processes/{pid}/output?offset=N` and drops any
 * bytes it already has: output arrives once, in order, whatever the network
 * does.
 */
import { AbortError, AirlockError, ConnectionError, NotFoundError, ServerError, TimeoutError } from "./errors.js";
import { HttpClient, OpenResponse, abortError, ndjson, sleep } from "./http.js";
import type { ProcessInfo } from "./types.js";

/** The sandbox a process lives in, as commands see it. */
export interface SandboxRef {
  readonly http: HttpClient;
  readonly sandboxId: string;
}

/** A piece of a process's output. */
export interface OutputChunk {
  /** Which output it came from (a PTY's output is `stdout`). */
  stream: "stdout" | "stderr";
  /** The bytes. */
  data: Uint8Array;
  /** The bytes as UTF-8 text (a character split between chunks is in the later one). */
  text: string;
}

/** How a finished process ended and what it wrote. */
export interface CommandResult {
  /** The process id in the sandbox. */
  pid: number;
  /** Everything it wrote on stdout, as UTF-8 text. */
  stdout: string;
  /** Everything it wrote on stderr, as UTF-8 text. */
  stderr: string;
  /** Its exit code; `null` when a signal ended it. */
  exitCode: number | null;
  /** The signal that ended it, if one did (9 for a `timeoutMs` kill or a `kill()`). */
  signal?: number;
  /** Why it ended, when the sandbox ended it (e.g. `the sandbox was rolled back`). */
  reason?: string;
  /** Bytes the node no longer held when they were asked for (over its 1 MiB buffer). */
  droppedBytes: number;
}

/** Options of {@link Commands.run}. */
export interface RunOptions {
  /** Working directory. */
  cwd?: string;
  /** Environment variables, on top of the sandbox's. */
  envs?: Record<string, string>;
  /** User name in the sandbox (default: the sandbox's default, root). */
  user?: string;
  /** The server kills the process after this long (rounded up to seconds); 0 or unset: never. */
  timeoutMs?: number;
  /** Called with stdout text as it arrives. */
  onStdout?: (text: string) => void;
  /** Called with stderr text as it arrives. */
  onStderr?: (text: string) => void;
  /** Return a {@link CommandHandle} once the process started instead of waiting for it. */
  background?: boolean;
  /**
   * Standard input: a string or bytes are written and then closed; `true`
   * keeps stdin open for {@link CommandHandle.sendStdin}; unset: no stdin.
   */
  stdin?: string | Uint8Array | boolean;
  /** Aborting kills the process and rejects the call (or the handle's `wait()`) with {@link AbortError}. */
  signal?: AbortSignal;
}

/** Options of {@link Commands.connect}. */
export interface ConnectOptions {
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  signal?: AbortSignal;
}

type ExecEvent =
  | { type: "start"; pid: number }
  | { type: "stdout" | "stderr"; offset: number; data: string }
  | { type: "dropped"; stream: "stdout" | "stderr"; from: number; to: number }
  | { type: "exit"; exit_code?: number; signal?: number; reason?: string };

/** Consecutive reconnects without any new line before giving up. */
const MAX_RECONNECTS = 8;

function toBytes(data: string | Uint8Array): Uint8Array {
  return typeof data === "string" ? new TextEncoder().encode(data) : data;
}

function b64(data: Uint8Array): string {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64");
}

function procPath(ref: SandboxRef, pid: number, op: string): string {
  return `/v1/sandboxes/${encodeURIComponent(ref.sandboxId)}/processes/${pid}/${op}`;
}

/** Signal a process; false when it is not there. */
async function signalProc(ref: SandboxRef, pid: number, signal: string | number): Promise<boolean> {
  try {
    await ref.http.json("POST", procPath(ref, pid, "signal"), { json: { signal } });
    return true;
  } catch (e) {
    if (e instanceof NotFoundError) return false;
    throw e;
  }
}

/** Write to a process's stdin (not retried: a repeat would write twice). */
async function stdinProc(ref: SandboxRef, pid: number, data: string | Uint8Array, eof: boolean): Promise<void> {
  await ref.http.json("POST", procPath(ref, pid, "stdin"), { json: { data: b64(toBytes(data)), eof } });
}

interface Callbacks {
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  onData?: (data: Uint8Array) => void;
}

/**
 * A running (or finished) process. Await {@link wait} for its result,
 * iterate it (`for await (const chunk of handle)`) for its output from the
 * start, {@link kill} it or {@link sendStdin} to it.
 */
export class CommandHandle implements AsyncIterable<OutputChunk> {
  /** The process id in the sandbox. */
  readonly pid: number;

  /** @internal */
  protected readonly ref: SandboxRef;
  private readonly cb: Callbacks;
  private readonly ac = new AbortController();
  private readonly chunks: OutputChunk[] = [];
  private readonly offsets = { stdout: 0, stderr: 0 };
  private readonly decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  /** Text the decoders held back until the end (a cut-off UTF-8 sequence). */
  private readonly tails = { stdout: "", stderr: "" };
  private waiters: Array<() => void> = [];
  private ended = false;
  private failure?: AirlockError;
  private exit?: { exitCode: number | null; signal?: number; reason?: string };
  private dropped = 0;
  private nReconnects = 0;
  private readonly done: Promise<CommandResult>;
  private readonly userSignal?: AbortSignal;

  /** @internal Use {@link Commands.run} or {@link Commands.connect}. */
  constructor(ref: SandboxRef, pid: number, first: AsyncGenerator<ExecEvent> | null, cb: Callbacks, signal?: AbortSignal) {
    this.ref = ref;
    this.pid = pid;
    this.cb = cb;
    this.userSignal = signal;
    if (signal) {
      if (signal.aborted) this.onUserAbort();
      else signal.addEventListener("abort", this.onUserAbort, { once: true });
    }
    this.done = this.pump(first);
    // wait() may never be called (a handle only iterated, or dropped).
    this.done.catch(() => {});
  }

  /** How many times the output stream broke and was picked up again. */
  get reconnects(): number {
    return this.nReconnects;
  }

  /** The exit code once the process ended (`null` for a signal), else `undefined`. */
  get exitCode(): number | null | undefined {
    return this.exit?.exitCode;
  }

  /** Everything written on stdout so far. */
  get stdout(): string {
    return this.text("stdout");
  }

  /** Everything written on stderr so far. */
  get stderr(): string {
    return this.text("stderr");
  }

  /** One stream's text, from the chunks (kept once, for iteration too). */
  private text(s: "stdout" | "stderr"): string {
    let t = "";
    for (const c of this.chunks) if (c.stream === s) t += c.text;
    return t + this.tails[s];
  }

  /** Wait for the process to end; its whole output and exit status. */
  wait(): Promise<CommandResult> {
    return this.done;
  }

  /**
   * Send a signal (default `KILL`). Resolves `false` when the process is
   * not there any more.
   */
  kill(signal: string | number = "KILL"): Promise<boolean> {
    return signalProc(this.ref, this.pid, signal);
  }

  /**
   * Write to the process's stdin (it must have been started with
   * `stdin: true`); `eof: true` closes it after the data.
   */
  sendStdin(data: string | Uint8Array, opts: { eof?: boolean } = {}): Promise<void> {
    return stdinProc(this.ref, this.pid, data, opts.eof ?? false);
  }

  /** Close the process's stdin. */
  async closeStdin(): Promise<void> {
    await this.sendStdin(new Uint8Array(0), { eof: true });
  }

  /**
   * Stop following the output; the process carries on in the sandbox
   * ({@link Commands.connect} follows it again). `wait()` rejects with
   * {@link AbortError}.
   */
  disconnect(): void {
    this.ac.abort(new AbortError("disconnected from the process"));
  }

  /** The output from the start, chunk by chunk, until the process ends. */
  async *[Symbol.asyncIterator](): AsyncIterator<OutputChunk> {
    let i = 0;
    for (;;) {
      if (i < this.chunks.length) {
        yield this.chunks[i++];
        continue;
      }
      if (this.ended) {
        if (this.failure) throw this.failure;
        return;
      }
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  private readonly onUserAbort = () => {
    // An abort by the caller kills the process, as a local child would be.
    this.kill("KILL").catch(() => {});
    this.ac.abort(abortError(this.userSignal!));
  };

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  /** Take one event; true when it brought something new. */
  private take(ev: ExecEvent): boolean {
    switch (ev.type) {
      case "stdout":
      case "stderr": {
        const s = ev.type;
        let bytes: Uint8Array = Buffer.from(ev.data, "base64");
        const have = this.offsets[s];
        const end = ev.offset + bytes.length;
        // A replay after a reconnect repeats what we have: keep only the rest.
        if (end <= have) return false;
        if (ev.offset < have) bytes = bytes.subarray(have - ev.offset);
        else if (ev.offset > have) this.dropped += ev.offset - have;
        this.offsets[s] = end;
        const text = this.decoders[s].decode(bytes, { stream: true });
        this.chunks.push({ stream: s, data: bytes, text });
        if (s === "stdout") {
          this.cb.onData?.(bytes);
          if (text) this.cb.onStdout?.(text);
        } else if (text) {
          this.cb.onStderr?.(text);
        }
        this.wake();
        return true;
      }
      case "dropped":
        if (ev.to > this.offsets[ev.stream]) {
          this.dropped += ev.to - Math.max(ev.from, this.offsets[ev.stream]);
          this.offsets[ev.stream] = ev.to;
          return true;
        }
        return false;
      case "exit":
        this.exit = {
          exitCode: ev.exit_code ?? null,
          ...(ev.signal !== undefined ? { signal: ev.signal } : {}),
          ...(ev.reason !== undefined ? { reason: ev.reason } : {}),
        };
        return true;
      default:
        return false;
    }
  }

  private openOutput(): Promise<OpenResponse> {
    return this.ref.http.open("GET", procPath(this.ref, this.pid, "output"), {
      query: { offset: this.offsets.stdout, stderr_offset: this.offsets.stderr, follow: 1 },
      signal: this.ac.signal,
    });
  }

  private async pump(first: AsyncGenerator<ExecEvent> | null): Promise<CommandResult> {
    let gen = first;
    let idle = 0;
    try {
      while (!this.exit) {
        try {
          if (!gen) gen = ndjson<ExecEvent>(await this.openOutput(), this.ref.http);
          for await (const ev of gen) {
            if (this.take(ev)) idle = 0;
            if (this.exit) break;
          }
        } catch (e) {
          if (this.ac.signal.aborted) throw abortError(this.ac.signal);
          // Only a broken or refused stream is worth another try.
          const again = e instanceof ConnectionError || e instanceof TimeoutError ||
            (e instanceof ServerError && [502, 503, 504].includes(e.status));
          if (!again) throw e;
        } finally {
          await gen?.return(undefined);
          gen = null;
        }
        if (this.exit) break;
        // The stream ended or broke before the exit line: pick it up again
        // from the offsets we have.
        if (++idle > MAX_RECONNECTS)
          throw new ConnectionError(`lost the output of process ${this.pid} ${MAX_RECONNECTS} times in a row`);
        this.nReconnects++;
        await sleep(Math.min(2000, 100 * 2 ** (idle - 1)), this.ac.signal);
      }
      for (const s of ["stdout", "stderr"] as const) {
        const tail = this.decoders[s].decode();
        if (tail) {
          this.tails[s] = tail;
          if (s === "stdout") this.cb.onStdout?.(tail);
          else this.cb.onStderr?.(tail);
        }
      }
      return {
        pid: this.pid,
        stdout: this.stdout,
        stderr: this.stderr,
        exitCode: this.exit!.exitCode,
        ...(this.exit!.signal !== undefined ? { signal: this.exit!.signal } : {}),
        ...(this.exit!.reason !== undefined ? { reason: this.exit!.reason } : {}),
        droppedBytes: this.dropped,
      };
    } catch (e) {
      this.failure = e instanceof AirlockError ? e : new AirlockError(String(e), { cause: e });
      throw this.failure;
    } finally {
      this.ended = true;
      this.userSignal?.removeEventListener("abort", this.onUserAbort);
      this.wake();
    }
  }
}

/** A process on a pseudo-terminal ({@link Pty.create}). */
export class PtyHandle extends CommandHandle {
  /** Type into the terminal. */
  async sendInput(data: string | Uint8Array): Promise<void> {
    await this.sendStdin(data);
  }

  /** Change the terminal's size. */
  async resize(size: { rows: number; cols: number }): Promise<void> {
    await this.ref.http.json("POST", procPath(this.ref, this.pid, "resize"), {
      json: { rows: size.rows, cols: size.cols },
    });
  }
}

type HandleClass<H> = new (
  ref: SandboxRef,
  pid: number,
  first: AsyncGenerator<ExecEvent> | null,
  cb: Callbacks,
  signal?: AbortSignal,
) => H;

/** Start a process; resolves once its `start` line names its pid. */
async function startProcess<H extends CommandHandle>(
  ref: SandboxRef,
  body: Record<string, unknown>,
  cb: Callbacks,
  signal: AbortSignal | undefined,
  cls: HandleClass<H>,
): Promise<H> {
  const http = ref.http;
  const r = await http.open("POST", `/v1/sandboxes/${encodeURIComponent(ref.sandboxId)}/exec`, {
    json: body,
    signal,
  });
  const gen = ndjson<ExecEvent>(r, http);
  let first: IteratorResult<ExecEvent>;
  try {
    first = await gen.next();
  } catch (e) {
    await gen.return(undefined);
    throw e;
  }
  if (first.done || first.value.type !== "start") {
    await gen.return(undefined);
    throw new ConnectionError("the exec stream ended before the process started");
  }
  return new cls(ref, first.value.pid, gen, cb, signal);
}

function execBody(cmd: string | string[], opts: RunOptions): Record<string, unknown> {
  const body: Record<string, unknown> = {
    cmd: Array.isArray(cmd) ? cmd : ["/bin/sh", "-c", cmd],
  };
  if (opts.envs) body.env = opts.envs;
  if (opts.cwd) body.cwd = opts.cwd;
  if (opts.user) body.user = opts.user;
  if (opts.timeoutMs) body.timeout_s = Math.ceil(opts.timeoutMs / 1000);
  if (opts.stdin !== undefined && opts.stdin !== false) body.stdin = true;
  return body;
}

/** `sb.commands`: run processes and follow them. */
export class Commands {
  /** @internal */
  constructor(private readonly ref: SandboxRef) {}

  /**
   * Run a command: a string goes to `/bin/sh -c`, an array is the argv.
   * Resolves with the result once it exited, or with a {@link CommandHandle}
   * once it started when `background: true`. A non-zero exit is a result,
   * not an error.
   */
  run(cmd: string | string[], opts: RunOptions & { background: true }): Promise<CommandHandle>;
  run(cmd: string | string[], opts?: RunOptions & { background?: false }): Promise<CommandResult>;
  run(cmd: string | string[], opts?: RunOptions): Promise<CommandResult | CommandHandle>;
  async run(cmd: string | string[], opts: RunOptions = {}): Promise<CommandResult | CommandHandle> {
    const cb = { onStdout: opts.onStdout, onStderr: opts.onStderr };
    const h = await startProcess(this.ref, execBody(cmd, opts), cb, opts.signal, CommandHandle);
    if (typeof opts.stdin === "string" || opts.stdin instanceof Uint8Array) {
      await h.sendStdin(opts.stdin, { eof: true });
    }
    return opts.background ? h : h.wait();
  }

  /** Follow a process started earlier (by this or another client), its output from the start. */
  async connect(pid: number, opts: ConnectOptions = {}): Promise<CommandHandle> {
    // Check it exists, so that a bad pid fails here and not in wait().
    const all = await this.list();
    if (!all.some((p) => p.pid === pid)) throw new NotFoundError(`no process ${pid} in ${this.ref.sandboxId}`, { status: 404, code: "not_found" });
    return new CommandHandle(this.ref, pid, null, { onStdout: opts.onStdout, onStderr: opts.onStderr }, opts.signal);
  }

  /** The sandbox's processes (running and ended), oldest first. */
  async list(): Promise<ProcessInfo[]> {
    const out: ProcessInfo[] = [];
    let token: string | null = null;
    do {
      const page: { processes: ProcessInfo[]; next_token: string | null } = await this.ref.http.json(
        "GET",
        `/v1/sandboxes/${encodeURIComponent(this.ref.sandboxId)}/processes`,
        { query: { limit: 1000, next_token: token } },
      );
      out.push(...page.processes);
      token = page.next_token;
    } while (token);
    return out;
  }

  /** Send a signal to a process by pid (default `KILL`); `false` when it is not there. */
  async kill(pid: number, signal: string | number = "KILL"): Promise<boolean> {
    return signalProc(this.ref, pid, signal);
  }

  /** Write to a process's stdin by pid. */
  async sendStdin(pid: number, data: string | Uint8Array, opts: { eof?: boolean } = {}): Promise<void> {
    return stdinProc(this.ref, pid, data, opts.eof ?? false);
  }
}

/** Options of {@link Pty.create}. */
export interface PtyOptions {
  /** Terminal rows (default 24). */
  rows?: number;
  /** Terminal columns (default 80). */
  cols?: number;
  /** Called with the terminal's output bytes as they arrive. */
  onData?: (data: Uint8Array) => void;
  /** The program (default `/bin/sh -i`). */
  cmd?: string[];
  cwd?: string;
  envs?: Record<string, string>;
  user?: string;
  timeoutMs?: number;
  /** Aborting kills the terminal's process. */
  signal?: AbortSignal;
}

/** `sb.pty`: interactive terminals. */
export class Pty {
  /** @internal */
  constructor(private readonly ref: SandboxRef) {}

  /** Start a program on a new terminal; resolves once it started. */
  async create(opts: PtyOptions = {}): Promise<PtyHandle> {
    const body = execBody(opts.cmd ?? ["/bin/sh", "-i"], {
      cwd: opts.cwd,
      envs: { TERM: "xterm-256color", ...(opts.envs ?? {}) },
      user: opts.user,
      timeoutMs: opts.timeoutMs,
      stdin: true,
    });
    body.pty = { rows: opts.rows ?? 24, cols: opts.cols ?? 80 };
    return startProcess(this.ref, body, { onData: opts.onData }, opts.signal, PtyHandle);
  }

  /** Change a terminal's size by pid. */
  async resize(pid: number, size: { rows: number; cols: number }): Promise<void> {
    await this.ref.http.json("POST", procPath(this.ref, pid, "resize"), { json: size });
  }

  /** Type into a terminal by pid. */
  async sendInput(pid: number, data: string | Uint8Array): Promise<void> {
    await stdinProc(this.ref, pid, data, false);
  }

  /** Kill a terminal's process by pid; `false` when it is not there. */
  async kill(pid: number): Promise<boolean> {
    return signalProc(this.ref, pid, "KILL");
  }
}
