/**
 * `@airlock/sdk`: drive Airlock sandboxes from Node (>= 18) through
 * Airlock's own HTTP API (docs/API.md). No runtime dependencies.
 *
 * ```ts
 * import { Sandbox } from "@airlock/sdk";
 * const sb = await Sandbox.create({ template: "busybox" });
 * console.log((await sb.commands.run("echo hi")).stdout);
 * await sb.kill();
 * ```
 *
 * @packageDocumentation
 */
export { Sandbox, Snapshots, Network } from "./sandbox.js";
export type { SandboxOptions, ListOptions } from "./sandbox.js";
export { Commands, CommandHandle, Pty, PtyHandle } from "./commands.js";
export type { CommandResult, OutputChunk, RunOptions, ConnectOptions, PtyOptions } from "./commands.js";
export { Files, WatchHandle } from "./files.js";
export { Execution, ExecutionError, Result } from "./code.js";
export type { Context, Logs, OutputMessage, RunCodeOptions } from "./code.js";
export type { WatchOptions } from "./files.js";
export type { ConnectionOptions, CallOptions } from "./http.js";
export * from "./errors.js";
export type * from "./types.js";
