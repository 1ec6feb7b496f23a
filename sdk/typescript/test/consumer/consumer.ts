// Compiled (not run) by typecheck.test.mjs: the public types as a consumer
// sees them through dist/*.d.ts, NodeNext resolution, strict mode.
import {
  Sandbox,
  CommandHandle,
  CommandResult,
  ConflictError,
  NotFoundError,
  RateLimitError,
  WatchEvent,
  SandboxInfo,
} from "../../dist/index.js";

export async function use(): Promise<void> {
  const sb: Sandbox = await Sandbox.create({ template: "busybox", timeoutMs: 60_000, metadata: { a: "b" } });
  const r: CommandResult = await sb.commands.run("echo hi", { onStdout: (t: string) => void t });
  const code: number | null = r.exitCode;
  const h: CommandHandle = await sb.commands.run(["sleep", "1"], { background: true });
  for await (const c of h) {
    const bytes: Uint8Array = c.data;
    void bytes;
  }
  await h.kill();
  const term = await sb.pty.create({ rows: 24, cols: 80, onData: (d: Uint8Array) => void d });
  await term.resize({ rows: 1, cols: 2 });
  const text: string = await sb.files.read("/x");
  const bin: Uint8Array = await sb.files.read("/x", { format: "bytes" });
  const w = await sb.files.watch("/x", { signal: new AbortController().signal });
  for await (const ev of w) {
    const e: WatchEvent = ev;
    void e;
  }
  for await (const info of Sandbox.list({ state: "running", metadata: { a: "b" } })) {
    const i: SandboxInfo = info;
    void i;
  }
  const kids: Sandbox[] = await sb.fork(2);
  const snap = await sb.snapshots.create({ name: "s" });
  await sb.rollback(snap);
  const url: string = sb.getUrl(8080);
  try {
    await sb.pause();
  } catch (e) {
    if (e instanceof ConflictError) void e.state;
    if (e instanceof RateLimitError) void e.retryAfter;
    if (e instanceof NotFoundError) void e.code;
  }
  void [code, text, bin, kids, url];
}
