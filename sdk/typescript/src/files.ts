/** `sb.files`: the sandbox's filesystem. */
import { AbortError, ConnectionError, NotFoundError } from "./errors.js";
import { CallOptions, abortError, ndjson } from "./http.js";
import type { SandboxRef } from "./commands.js";
import type { FileEntry, FileInfo, WatchEvent } from "./types.js";

/** Options of {@link Files.watch}. */
export interface WatchOptions {
  /** Watch subdirectories too, including ones made later (default true). */
  recursive?: boolean;
  /** Events the node queues for a slow reader before it drops them (1..65536, default 4096). */
  maxQueue?: number;
  /** Called with each event (the `start` line aside) as it arrives. */
  onEvent?: (ev: WatchEvent) => void;
  /** Aborting ends the watch. */
  signal?: AbortSignal;
}

/**
 * A live file watch: iterate it for events (`create`, `write`, `rename`,
 * `remove`, `overflow`) until {@link close}, the caller's signal, or the
 * sandbox's end.
 */
export class WatchHandle implements AsyncIterable<WatchEvent> {
  private readonly events: WatchEvent[] = [];
  private waiters: Array<() => void> = [];
  private ended = false;
  private failure?: Error;

  /** @internal */
  constructor(
    private readonly ac: AbortController,
    gen: AsyncGenerator<WatchEvent>,
    private readonly onEvent?: (ev: WatchEvent) => void,
  ) {
    void this.pump(gen);
  }

  /** Stop watching. */
  close(): void {
    this.ac.abort(new AbortError("the watch was closed"));
  }

  /** Events from when the watch started, until it ends. */
  async *[Symbol.asyncIterator](): AsyncIterator<WatchEvent> {
    let i = 0;
    for (;;) {
      if (i < this.events.length) {
        yield this.events[i++];
        continue;
      }
      if (this.ended) {
        if (this.failure) throw this.failure;
        return;
      }
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private async pump(gen: AsyncGenerator<WatchEvent>): Promise<void> {
    try {
      for await (const ev of gen) {
        this.events.push(ev);
        this.onEvent?.(ev);
        this.wake();
      }
    } catch (e) {
      // Closing the watch is its normal end, not an error.
      if (!this.ac.signal.aborted) this.failure = e as Error;
    } finally {
      this.ended = true;
      this.wake();
    }
  }
}

/** The sandbox's files. Paths are absolute paths in the sandbox. */
export class Files {
  /** @internal */
  constructor(private readonly ref: SandboxRef) {}

  private path(op = ""): string {
    return `/v1/sandboxes/${encodeURIComponent(this.ref.sandboxId)}/files${op}`;
  }

  /** Read a file: as UTF-8 text (default) or as bytes with `{format: "bytes"}`. */
  read(path: string, opts?: CallOptions & { format?: "text" }): Promise<string>;
  read(path: string, opts: CallOptions & { format: "bytes" }): Promise<Uint8Array>;
  async read(path: string, opts: CallOptions & { format?: "text" | "bytes" } = {}): Promise<string | Uint8Array> {
    const b = await this.ref.http.bytes("GET", this.path(), { ...opts, query: { path } });
    return opts.format === "bytes" ? b : new TextDecoder().decode(b);
  }

  /**
   * Write a file (atomically; missing parent directories are made).
   * `mode` is octal text, e.g. `"0755"`. At most 16 MiB.
   */
  async write(path: string, data: string | Uint8Array, opts: CallOptions & { mode?: string } = {}): Promise<void> {
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    await this.ref.http.json("PUT", this.path(), { ...opts, query: { path, mode: opts.mode }, body });
  }

  /** The entries of a directory. */
  async list(path: string, opts: CallOptions = {}): Promise<FileEntry[]> {
    const r = await this.ref.http.json<{ entries: FileEntry[] }>("GET", this.path("/list"), { ...opts, query: { path } });
    return r.entries;
  }

  /** Type, size, mode and mtime of a path. */
  stat(path: string, opts: CallOptions = {}): Promise<FileInfo> {
    return this.ref.http.json<FileInfo>("GET", this.path("/stat"), { ...opts, query: { path } });
  }

  /** Whether a path exists. */
  async exists(path: string, opts: CallOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, opts);
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** Delete a file, or a directory (with `recursive: true` when it is not empty). */
  async remove(path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.ref.http.json("DELETE", this.path(), {
      ...opts,
      query: { path, recursive: opts.recursive ? 1 : undefined },
    });
  }

  /** Rename (move) a path. */
  async rename(from: string, to: string, opts: CallOptions = {}): Promise<void> {
    await this.ref.http.json("POST", this.path("/rename"), { ...opts, json: { from, to } });
  }

  /** Make a directory, its parents too unless `parents: false`. */
  async makeDir(path: string, opts: CallOptions & { parents?: boolean } = {}): Promise<void> {
    await this.ref.http.json("POST", this.path("/mkdir"), { ...opts, json: { path, parents: opts.parents ?? true } });
  }

  /**
   * Watch a path for changes. Resolves once the watch is in place (every
   * change after that is reported), with a {@link WatchHandle} to iterate.
   */
  async watch(path: string, opts: WatchOptions = {}): Promise<WatchHandle> {
    const ac = new AbortController();
    const user = opts.signal;
    const onAbort = () => ac.abort(abortError(user!));
    if (user) {
      if (user.aborted) throw abortError(user);
      user.addEventListener("abort", onAbort, { once: true });
    }
    const detach = () => user?.removeEventListener("abort", onAbort);
    let gen: AsyncGenerator<WatchEvent>;
    try {
      const r = await this.ref.http.open("GET", this.path("/watch"), {
        query: { path, recursive: opts.recursive ?? true, max_queue: opts.maxQueue },
        signal: ac.signal,
      });
      gen = ndjson<WatchEvent>(r, this.ref.http);
      // The `start` line says the guest's inotify watch is set.
      const first = await gen.next();
      if (first.done || first.value.type !== "start") {
        await gen.return(undefined);
        throw new ConnectionError("the watch ended before it started");
      }
    } catch (e) {
      detach();
      throw e;
    }
    ac.signal.addEventListener("abort", detach, { once: true });
    return new WatchHandle(ac, gen, opts.onEvent);
  }
}
