/** The `Sandbox` class: create, connect, list and drive sandboxes. */
import { randomUUID } from "node:crypto";

import { Commands, Pty } from "./commands.js";
import {
  Context,
  Execution,
  RunCodeOptions,
  createCodeContext,
  listCodeContexts,
  removeCodeContext,
  restartCodeContext,
  runCode,
} from "./code.js";
import { NotFoundError } from "./errors.js";
import { CallOptions, ConnectionOptions, HttpClient } from "./http.js";
import { Files } from "./files.js";
import type {
  Limits,
  NetworkInfo,
  NetworkLogEntry,
  NetworkPolicy,
  PortToken,
  SandboxEvent,
  SandboxInfo,
  SandboxMetrics,
  SandboxState,
  SnapshotInfo,
} from "./types.js";

/** Options of {@link Sandbox.create}. */
export interface SandboxOptions extends ConnectionOptions, CallOptions {
  /** Template name (server default: `debian`). */
  template?: string;
  /** `ns` or `vm` (server default: the node's). */
  backend?: string;
  /** Environment of every command. */
  env?: Record<string, string>;
  /** Free-form string labels; {@link Sandbox.list} filters on them. */
  metadata?: Record<string, string>;
  /** Lifetime in ms of running time (rounded up to seconds); 0: none. */
  timeoutMs?: number;
  /** Lifetime in seconds (the API's unit); `timeoutMs` wins when both are given. */
  timeout?: number;
  /** What happens when the timeout runs out (server default `delete`). */
  onTimeout?: "delete" | "pause";
  /** Pause after this long without activity, ms (rounded up to seconds). */
  idleTimeoutMs?: number;
  /** Resource limits. */
  limits?: Limits;
  /** Egress policy (default `"allow-all"`). */
  network?: NetworkPolicy;
  /** Scheduled snapshots and retention, in the API's form (docs/API.md, "Create body"). */
  snapshots?: Record<string, unknown>;
  /** A cluster: the node to place it on. */
  node?: string;
  /** Idempotency key of the create (default: a fresh UUID per call). */
  idempotencyKey?: string;
}

/** Filters of {@link Sandbox.list}. */
export interface ListOptions extends ConnectionOptions, CallOptions {
  state?: SandboxState;
  template?: string;
  /** Only sandboxes with all these metadata values. */
  metadata?: Record<string, string>;
  /** Page size (1..1000, default 100); the iterator follows every page. */
  limit?: number;
}

function sbPath(id: string, rest = ""): string {
  return `/v1/sandboxes/${encodeURIComponent(id)}${rest}`;
}

/** `sb.snapshots`: disk (and, on vm, full) snapshots. */
export class Snapshots {
  /** @internal */
  constructor(private readonly sb: Sandbox) {}

  /** Take a snapshot; `kind: "full"` (vm only) keeps memory too. */
  create(opts: CallOptions & { name?: string; kind?: "disk" | "full" } = {}): Promise<SnapshotInfo> {
    const json: Record<string, string> = {};
    if (opts.name) json.name = opts.name;
    if (opts.kind) json.kind = opts.kind;
    return this.sb.http.json("POST", sbPath(this.sb.sandboxId, "/snapshots"), { ...opts, json });
  }

  /** Every snapshot of the sandbox, oldest first. */
  async list(opts: CallOptions = {}): Promise<SnapshotInfo[]> {
    const out: SnapshotInfo[] = [];
    let token: string | null = null;
    do {
      const page: { snapshots: SnapshotInfo[]; next_token: string | null } = await this.sb.http.json(
        "GET",
        sbPath(this.sb.sandboxId, "/snapshots"),
        { ...opts, query: { limit: 1000, next_token: token } },
      );
      out.push(...page.snapshots);
      token = page.next_token;
    } while (token);
    return out;
  }

  /** Delete a snapshot (by id, name or object). */
  async delete(snapshot: string | SnapshotInfo, opts: CallOptions = {}): Promise<void> {
    const ref = typeof snapshot === "string" ? snapshot : snapshot.id;
    await this.sb.http.json("DELETE", sbPath(this.sb.sandboxId, `/snapshots/${encodeURIComponent(ref)}`), opts);
  }
}

/** `sb.network`: the sandbox's egress policy. */
export class Network {
  /** @internal */
  constructor(private readonly sb: Sandbox) {}

  /** The policy in force and the sandbox's address. */
  get(opts: CallOptions = {}): Promise<NetworkInfo> {
    return this.sb.http.json("GET", sbPath(this.sb.sandboxId, "/network"), opts);
  }

  /** Replace the policy; in force for every new connection from then on. */
  set(policy: NetworkPolicy, opts: CallOptions = {}): Promise<NetworkInfo> {
    return this.sb.http.json("PATCH", sbPath(this.sb.sandboxId, "/network"), {
      ...opts,
      json: { network: policy },
      idempotent: true,
    });
  }

  /** The gateway's last decisions for this sandbox, oldest first. */
  async log(opts: CallOptions = {}): Promise<NetworkLogEntry[]> {
    const r = await this.sb.http.json<{ entries: NetworkLogEntry[] }>("GET", sbPath(this.sb.sandboxId, "/network/log"), opts);
    return r.entries;
  }
}

/**
 * A sandbox. Make one with {@link Sandbox.create}, reach an existing one
 * with {@link Sandbox.connect}; {@link Sandbox.kill} deletes it.
 *
 * ```ts
 * const sb = await Sandbox.create({ template: "busybox" });
 * const r = await sb.commands.run("echo hi");
 * await sb.kill();
 * ```
 */
export class Sandbox {
  /** The sandbox's id (`sb-...`). */
  readonly sandboxId: string;
  /** @internal */
  readonly http: HttpClient;
  /** Processes. */
  readonly commands: Commands;
  /** Terminals. */
  readonly pty: Pty;
  /** Files. */
  readonly files: Files;
  /** Snapshots. */
  readonly snapshots: Snapshots;
  /** Egress policy. */
  readonly network: Network;
  private _info: SandboxInfo;

  /** @internal Use {@link Sandbox.create} or {@link Sandbox.connect}. */
  constructor(info: SandboxInfo, http: HttpClient) {
    this.sandboxId = info.id;
    this._info = info;
    this.http = http;
    this.commands = new Commands(this);
    this.pty = new Pty(this);
    this.files = new Files(this);
    this.snapshots = new Snapshots(this);
    this.network = new Network(this);
  }

  /** The sandbox object as last seen (refresh with {@link getInfo}). */
  get info(): SandboxInfo {
    return this._info;
  }

  /** Its state as last seen. */
  get state(): SandboxState {
    return this._info.state;
  }

  /**
   * Create a sandbox; resolves once it runs and its agent is ready. The
   * request carries an `Idempotency-Key` made once per call, so a retry after
   * a lost answer gets the same sandbox, never a second one.
   */
  static async create(opts: SandboxOptions = {}): Promise<Sandbox> {
    const http = new HttpClient(opts);
    const body: Record<string, unknown> = {};
    if (opts.template !== undefined) body.template = opts.template;
    if (opts.backend !== undefined) body.backend = opts.backend;
    if (opts.env !== undefined) body.env = opts.env;
    if (opts.metadata !== undefined) body.metadata = opts.metadata;
    if (opts.timeoutMs !== undefined) body.timeout_s = Math.ceil(opts.timeoutMs / 1000);
    else if (opts.timeout !== undefined) body.timeout_s = Math.ceil(opts.timeout);
    if (opts.onTimeout !== undefined) body.on_timeout = opts.onTimeout;
    if (opts.idleTimeoutMs !== undefined) body.idle_timeout_s = Math.ceil(opts.idleTimeoutMs / 1000);
    if (opts.limits !== undefined) body.limits = opts.limits;
    if (opts.network !== undefined) body.network = opts.network;
    if (opts.snapshots !== undefined) body.snapshots = opts.snapshots;
    if (opts.node !== undefined) body.node = opts.node;
    const info = await http.json<SandboxInfo>("POST", "/v1/sandboxes", {
      json: body,
      headers: { "Idempotency-Key": opts.idempotencyKey ?? randomUUID() },
      idempotent: true,
      signal: opts.signal,
      requestTimeoutMs: opts.requestTimeoutMs ?? 600_000,
    });
    return new Sandbox(info, http);
  }

  /** Reach an existing sandbox; a paused one is resumed. 404 is {@link NotFoundError}. */
  static async connect(sandboxId: string, opts: ConnectionOptions & CallOptions = {}): Promise<Sandbox> {
    const http = new HttpClient(opts);
    const info = await http.json<SandboxInfo>("POST", sbPath(sandboxId, "/connect"), {
      signal: opts.signal,
      idempotent: true,
    });
    return new Sandbox(info, http);
  }

  /** The sandbox object of an id, without resuming it. */
  static async getInfo(sandboxId: string, opts: ConnectionOptions & CallOptions = {}): Promise<SandboxInfo> {
    return new HttpClient(opts).json<SandboxInfo>("GET", sbPath(sandboxId), { signal: opts.signal });
  }

  /** Delete a sandbox by id; `false` when the API does not know it (404). */
  static async kill(sandboxId: string, opts: ConnectionOptions & CallOptions = {}): Promise<boolean> {
    return deleteSandbox(new HttpClient(opts), sandboxId, opts);
  }

  /**
   * The tenant's sandboxes, oldest first, as an async iterator that fetches
   * page after page (`limit` per page) until the last:
   * `for await (const info of Sandbox.list({ state: "running" })) ...`
   */
  static async *list(opts: ListOptions = {}): AsyncGenerator<SandboxInfo> {
    const http = new HttpClient(opts);
    const query: Record<string, string | number | undefined> = {
      state: opts.state,
      template: opts.template,
      limit: opts.limit,
    };
    for (const [k, v] of Object.entries(opts.metadata ?? {})) query[`metadata.${k}`] = v;
    let token: string | null = null;
    do {
      const page: { sandboxes: SandboxInfo[]; next_token: string | null } = await http.json("GET", "/v1/sandboxes", {
        query: { ...query, next_token: token ?? undefined },
        signal: opts.signal,
      });
      yield* page.sandboxes;
      token = page.next_token;
    } while (token);
  }

  /** Fetch the sandbox object again. */
  async getInfo(opts: CallOptions = {}): Promise<SandboxInfo> {
    this._info = await this.http.json<SandboxInfo>("GET", sbPath(this.sandboxId), opts);
    return this._info;
  }

  /** Whether it is running now. */
  async isRunning(opts: CallOptions = {}): Promise<boolean> {
    try {
      return (await this.getInfo(opts)).state === "running";
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** Delete the sandbox (and its snapshots); `false` when the API does not know it (404). */
  kill(opts: CallOptions = {}): Promise<boolean> {
    return deleteSandbox(this.http, this.sandboxId, opts);
  }

  private async transition(op: string, opts: CallOptions & { json?: unknown }): Promise<SandboxInfo> {
    this._info = await this.http.json<SandboxInfo>("POST", sbPath(this.sandboxId, `/${op}`), opts);
    return this._info;
  }

  /** Freeze everything in it, memory kept (409 {@link ConflictError} unless running). */
  pause(opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.transition("pause", opts);
  }

  /** Resume a paused (or restore a suspended) sandbox. */
  resume(opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.transition("resume", opts);
  }

  /** Move it to the object store, freeing the node. */
  suspend(opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.transition("suspend", { requestTimeoutMs: 600_000, ...opts });
  }

  /** Bring a suspended sandbox back (in a cluster, optionally on `node`). */
  restore(opts: CallOptions & { node?: string } = {}): Promise<SandboxInfo> {
    const { node, ...rest } = opts;
    return this.transition("restore", { requestTimeoutMs: 600_000, ...rest, ...(node ? { json: { node } } : {}) });
  }

  /** Put the disk (full: and memory) back as a snapshot had it. */
  rollback(snapshot: string | SnapshotInfo, opts: CallOptions = {}): Promise<SandboxInfo> {
    const ref = typeof snapshot === "string" ? snapshot : snapshot.id;
    return this.transition("rollback", { requestTimeoutMs: 600_000, ...opts, json: { snapshot: ref } });
  }

  /**
   * Make `count` (1..16) new sandboxes from this one's current state (or
   * from `fromSnapshot`); all or nothing.
   */
  async fork(count: number | (CallOptions & { count?: number; fromSnapshot?: string | SnapshotInfo }) = 1): Promise<Sandbox[]> {
    const o = typeof count === "number" ? { count } : count;
    const json: Record<string, unknown> = { count: o.count ?? 1 };
    if (o.fromSnapshot) json.from_snapshot = typeof o.fromSnapshot === "string" ? o.fromSnapshot : o.fromSnapshot.id;
    const r = await this.http.json<{ sandboxes: SandboxInfo[] }>("POST", sbPath(this.sandboxId, "/fork"), {
      json,
      signal: o.signal,
      requestTimeoutMs: o.requestTimeoutMs ?? 600_000,
    });
    return r.sandboxes.map((info) => new Sandbox(info, this.http));
  }

  /** What the sandbox uses now: CPU time, memory (now and peak), disk written, and the
   * bytes the gateway relayed for it (null without a network). */
  async metrics(opts: CallOptions = {}): Promise<SandboxMetrics> {
    return this.http.json("GET", sbPath(this.sandboxId, "/metrics"), opts);
  }

  /** The sandbox's lifecycle log, oldest first. */
  async events(opts: CallOptions = {}): Promise<SandboxEvent[]> {
    const out: SandboxEvent[] = [];
    let token: string | null = null;
    do {
      const page: { events: SandboxEvent[]; next_token: string | null } = await this.http.json("GET", sbPath(this.sandboxId, "/events"), {
        ...opts,
        query: { limit: 1000, next_token: token },
      });
      out.push(...page.events);
      token = page.next_token;
    } while (token);
    return out;
  }

  /**
   * Run a cell in the sandbox's code interpreter (a `code-interpreter`
   * template); the kernel keeps its state between cells. Resolves with the
   * {@link Execution}: results (text, html, png...), logs, the error a cell
   * raised (not thrown), the execution count. The callbacks see each line
   * as it comes.
   *
   * ```ts
   * const ex = await sb.runCode("x = 41\nx + 1");
   * console.log(ex.text); // "42"
   * ```
   */
  runCode(code: string, opts: RunCodeOptions = {}): Promise<Execution> {
    return runCode(this.http, this.sandboxId, code, opts);
  }

  /** A new code context (its own kernel) for `language` (default python) in `cwd`. */
  createCodeContext(opts: CallOptions & { language?: string; cwd?: string } = {}): Promise<Context> {
    return createCodeContext(this.http, this.sandboxId, opts);
  }

  /** The code interpreter's contexts. */
  listCodeContexts(opts: CallOptions = {}): Promise<Context[]> {
    return listCodeContexts(this.http, this.sandboxId, opts);
  }

  /** Restart a context's kernel (its state is lost). */
  restartCodeContext(context: Context | string, opts: CallOptions = {}): Promise<void> {
    return restartCodeContext(this.http, this.sandboxId, context, opts);
  }

  /** Remove a context and end its kernel. */
  removeCodeContext(context: Context | string, opts: CallOptions = {}): Promise<void> {
    return removeCodeContext(this.http, this.sandboxId, context, opts);
  }

  /**
   * The API URL of a port's HTTP service in the sandbox (the reverse proxy;
   * send the API key, or use {@link portToken}).
   */
  getUrl(port: number): string {
    return `${this.http.apiUrl}${sbPath(this.sandboxId, `/ports/${port}/`)}`;
  }

  /**
   * A token that opens one port of this sandbox (and nothing else) without
   * an API key, for `ttlSeconds` (default 3600). `host` is its host-routed
   * name when the server has a ports domain.
   */
  portToken(port: number, opts: CallOptions & { ttlSeconds?: number } = {}): Promise<PortToken> {
    const json: Record<string, number> = { port };
    if (opts.ttlSeconds !== undefined) json.ttl_s = opts.ttlSeconds;
    return this.http.json("POST", sbPath(this.sandboxId, "/port-tokens"), { ...opts, json });
  }
}

async function deleteSandbox(http: HttpClient, id: string, opts: CallOptions): Promise<boolean> {
  try {
    await http.json("DELETE", sbPath(id), opts);
    return true;
  } catch (e) {
    if (e instanceof NotFoundError) return false;
    throw e;
  }
}
