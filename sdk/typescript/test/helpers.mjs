// Shared by the node --test suites: the server under test comes from the
// environment (tests/e2e/test_sdk_typescript.py starts it and sets these).
import net from "node:net";

export const API_URL = process.env.AIRLOCK_API_URL;
export const API_KEY = process.env.AIRLOCK_API_KEY;
export const ADMIN_KEY = process.env.AIRLOCK_ADMIN_KEY;
export const TEMPLATE = process.env.AIRLOCK_TEST_TEMPLATE || "busybox";
export const BACKEND = process.env.AIRLOCK_TEST_BACKEND || undefined;

if (!API_URL || !API_KEY) {
  throw new Error("AIRLOCK_API_URL and AIRLOCK_API_KEY must name a running Airlock (tests/e2e/test_sdk_typescript.py)");
}

/** Small sandboxes: the host is small and shared (a vm guest's kernel needs more). */
export const MEMORY_MB = BACKEND === "vm" ? 256 : 64;
export function sbOpts(extra = {}) {
  return { template: TEMPLATE, backend: BACKEND, limits: { memory_mb: MEMORY_MB }, ...extra };
}

/** An admin call over plain fetch (tenants, keys, quotas are not SDK surface). */
export async function admin(method, path, body) {
  const r = await fetch(API_URL + path, {
    method,
    headers: { Authorization: `Bearer ${ADMIN_KEY}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

/** A new tenant and a key of it. */
export async function newTenant(name) {
  const t = await admin("POST", "/v1/tenants", { name: `${name}-${process.pid}-${Date.now()}` });
  const k = await admin("POST", "/v1/keys", { tenant: t.id });
  return { tenant: t, key: k.key };
}

/** Run tasks with at most n at once; their results in order. */
export async function pool(n, items, fn) {
  const out = new Array(items.length);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  }
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
  return out;
}

/**
 * A loopback TCP proxy to the API that cuts the first connection whose
 * request matches `match` once `cutAfter` bytes of its answer went back
 * (the client sees its stream break in the middle). Everything else passes.
 */
export async function cuttingProxy(match, cutAfter) {
  const target = new URL(API_URL);
  const state = { cuts: 0, armed: true, bytesBeforeCut: 0 };
  const sockets = new Set();
  const server = net.createServer((client) => {
    const up = net.connect(Number(target.port), target.hostname);
    sockets.add(client);
    sockets.add(up);
    let watching = false;
    let sent = 0;
    client.on("data", (d) => {
      if (state.armed && match.test(d.toString("latin1"))) {
        state.armed = false;
        watching = true;
      }
      up.write(d);
    });
    up.on("data", (d) => {
      if (!watching) return client.write(d);
      if (sent + d.length < cutAfter) {
        sent += d.length;
        return client.write(d);
      }
      const part = d.subarray(0, cutAfter - sent);
      sent += part.length;
      state.bytesBeforeCut = sent;
      state.cuts++;
      watching = false;
      client.write(part, () => {
        client.destroy();
        up.destroy();
      });
    });
    const end = () => {
      client.destroy();
      up.destroy();
      sockets.delete(client);
      sockets.delete(up);
    };
    client.on("error", end);
    up.on("error", end);
    client.on("close", end);
    up.on("close", end);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    state,
    close: () =>
      new Promise((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}
