/** Shapes of the API's objects (docs/API.md), as the API sends them. */

/** A sandbox's state (`lost` only in a cluster's view). */
export type SandboxState =
  | "pending"
  | "starting"
  | "running"
  | "paused"
  | "rolling_back"
  | "suspending"
  | "suspended"
  | "restoring"
  | "stopping"
  | "stopped"
  | "failed"
  | "lost";

/** Resource limits of a sandbox, in the API's units. */
export interface Limits {
  memory_mb?: number;
  cpus?: number;
  pids?: number;
  disk_mb?: number;
}

/** A network policy: `"allow-all"`, `"deny-all"`, or rules (docs/API.md, "Network policy"). */
export type NetworkPolicy =
  | "allow-all"
  | "deny-all"
  | {
      default?: "allow" | "deny";
      allow?: { domains?: string[]; cidrs?: string[]; ports?: number[] };
      deny?: { domains?: string[]; cidrs?: string[]; ports?: number[] };
    };

/** The sandbox object (`GET /v1/sandboxes/{id}`). */
export interface SandboxInfo {
  id: string;
  tenant: string;
  template: string;
  template_version?: number | string;
  backend: string;
  node?: string;
  state: SandboxState;
  limits: Limits;
  metadata: Record<string, string>;
  timeout_s: number;
  idle_timeout_s?: number;
  on_timeout?: "delete" | "pause";
  snapshots?: Record<string, unknown>;
  network?: NetworkPolicy;
  created_at: string;
  parent: string | null;
  recovered_from?: { snapshot: string; kind: string; at: string } | null;
  suspend?: "memory" | "disk" | null;
  snapshot_id?: string;
  suspended_bytes?: number;
  error?: string;
  [key: string]: unknown;
}

/** A snapshot (`POST /v1/sandboxes/{id}/snapshots`). */
export interface SnapshotInfo {
  id: string;
  name: string;
  sandbox_id: string;
  kind: "disk" | "full";
  scheduled: boolean;
  created_at: string;
  size_bytes: number | null;
}

/** `GET .../files/stat`. */
export interface FileInfo {
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  /** Octal text, e.g. `"0644"`. */
  mode: string;
  mtime: string | number;
}

/** One entry of `GET .../files/list`. */
export interface FileEntry {
  name: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: string;
  mtime: string | number;
}

/** One line of a file watch (docs/API.md, "File watch stream"). */
export interface WatchEvent {
  type: "start" | "create" | "write" | "rename" | "remove" | "overflow";
  path?: string;
  /** For `rename`: the old path. */
  from?: string;
  dir?: boolean;
  recursive?: boolean;
}

/** `GET /v1/sandboxes/{id}/processes` entries. */
export interface ProcessInfo {
  pid: number;
  cmd: string[];
  running: boolean;
  exit_code: number | null;
  signal: number | null;
  started_at: string;
  pty: boolean;
}

/** `GET /v1/sandboxes/{id}/network`. */
export interface NetworkInfo {
  network: NetworkPolicy;
  addr: string;
}

/** One entry of `GET /v1/sandboxes/{id}/network/log`. */
export interface NetworkLogEntry {
  time_ms: number;
  proto: "tcp" | "tls" | "http" | "dns";
  host: string;
  ip: string;
  port: number;
  decision: "allow" | "deny";
  rule: string;
}

/** `POST /v1/sandboxes/{id}/port-tokens`. */
export interface PortToken {
  token: string;
  sandbox_id: string;
  port: number;
  expires_at: string;
  /** `{port}-{id}.<ports_domain>`, or null when the server has no ports domain. */
  host: string | null;
}

/** A lifecycle event of a sandbox. */
/** GET /v1/sandboxes/{id}/metrics: what a sandbox uses now. */
export interface SandboxMetrics {
  id: string;
  backend: string;
  state: SandboxState;
  cpu_seconds: number;
  memory_bytes: number;
  memory_peak_bytes: number | null;
  disk_used_bytes: number;
  network: { bytes_in: number; bytes_out: number } | null;
}

export interface SandboxEvent {
  at: string;
  from: string;
  to: string;
  reason: string;
}
