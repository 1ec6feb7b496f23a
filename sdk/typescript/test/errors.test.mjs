// Error answers of a real server mapped to the SDK's classes (400, 401,
// 404, 409, 422, 429, 501), 429 honoured by the retries, client-side
// timeouts and connection errors, and pagination over 250 sandboxes.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";

import {
  Sandbox,
  AirlockError,
  AuthenticationError,
  ConflictError,
  ConnectionError,
  InvalidRequestError,
  NotFoundError,
  NotSupportedError,
  QuotaExceededError,
  RateLimitError,
  TimeoutError,
} from "../dist/index.js";
import { sbOpts, admin, newTenant, pool } from "./helpers.mjs";

let sb;
before(async () => {
  sb = await Sandbox.create(sbOpts());
});
after(async () => {
  if (sb) await sb.kill();
});

test("404 is NotFoundError", async () => {
  const e = await Sandbox.connect("sb-nonexistent").catch((x) => x);
  assert.ok(e instanceof NotFoundError, String(e));
  assert.ok(e instanceof AirlockError);
  assert.equal(e.status, 404);
  assert.equal(e.code, "not_found");
  await assert.rejects(Sandbox.getInfo("sb-nonexistent"), NotFoundError);
  await assert.rejects(sb.snapshots.delete("no-such-snap"), NotFoundError);
  await assert.rejects(sb.rollback("no-such-snap"), NotFoundError);
  await assert.rejects(Sandbox.create(sbOpts({ template: "no-such-template" })), (x) => x instanceof NotFoundError && x.code === "template_not_found");
});

test("409 is ConflictError, with the state", async () => {
  const e = await sb.resume().catch((x) => x);
  assert.ok(e instanceof ConflictError, String(e));
  assert.equal(e.status, 409);
  assert.equal(e.code, "conflict");
  assert.equal(e.state, "running");
  await sb.snapshots.create({ name: "dup" });
  await assert.rejects(sb.snapshots.create({ name: "dup" }), ConflictError);
  await sb.snapshots.delete("dup");
});

test("422 quota_exceeded is QuotaExceededError; invalid_argument is InvalidRequestError", async () => {
  const { tenant, key } = await newTenant("quota");
  await admin("PUT", `/v1/tenants/${tenant.id}/quota`, { sandboxes: 1 });
  const first = await Sandbox.create(sbOpts({ apiKey: key }));
  try {
    const e = await Sandbox.create(sbOpts({ apiKey: key })).catch((x) => x);
    assert.ok(e instanceof QuotaExceededError, String(e));
    assert.equal(e.status, 422);
    assert.equal(e.code, "quota_exceeded");
    assert.match(e.message, /sandboxes/);
  } finally {
    await first.kill();
  }
  const e = await Sandbox.create(sbOpts({ limits: { pids: 5000 } })).catch((x) => x);
  assert.ok(e instanceof InvalidRequestError, String(e));
  assert.equal(e.status, 422);
  assert.equal(e.code, "invalid_argument");
});

test("400 is InvalidRequestError; 401 is AuthenticationError", async () => {
  const e = await Sandbox.create(sbOpts({ backend: "no-such-backend" })).catch((x) => x);
  assert.ok(e instanceof InvalidRequestError, String(e));
  assert.equal(e.status, 400);
  await assert.rejects(sb.snapshots.create({ name: "Bad Name!" }), InvalidRequestError);
  const a = await Sandbox.connect(sb.sandboxId, { apiKey: "not-a-key" }).catch((x) => x);
  assert.ok(a instanceof AuthenticationError, String(a));
  assert.equal(a.status, 401);
});

test("501 is NotSupportedError (full snapshots on ns)", async (t) => {
  if (sb.info.backend !== "ns") return t.skip("the vm backend has full snapshots");
  const e = await sb.snapshots.create({ kind: "full" }).catch((x) => x);
  assert.ok(e instanceof NotSupportedError, String(e));
  assert.equal(e.status, 501);
});

test("429 is RateLimitError with Retry-After; the retries wait and succeed", async () => {
  // A key of its own: the server runs 50 requests/s, burst 50, per key.
  const { key } = await newTenant("ratelimit");
  let limited;
  for (let i = 0; i < 400 && !limited; i++) {
    try {
      await Sandbox.getInfo("sb-nonexistent", { apiKey: key, maxRetries: 0 });
    } catch (e) {
      if (e instanceof RateLimitError) limited = e;
      else assert.ok(e instanceof NotFoundError, String(e));
    }
  }
  assert.ok(limited, "a burst over the rate limit was refused");
  assert.equal(limited.status, 429);
  assert.equal(limited.code, "rate_limited");
  assert.ok(limited.retryAfter >= 1, `retryAfter ${limited.retryAfter}`);
  // With retries (the default) the same burst goes through: every 429 is
  // retried after Retry-After.
  const t0 = Date.now();
  const results = await Promise.all(
    Array.from({ length: 80 }, () => Sandbox.getInfo("sb-nonexistent", { apiKey: key, maxRetries: 10 }).catch((e) => e)),
  );
  for (const r of results) assert.ok(r instanceof NotFoundError, String(r));
  assert.ok(Date.now() - t0 >= 500, "some calls waited for the bucket to refill");
});

test("client-side timeout is TimeoutError; no server is ConnectionError", async () => {
  // a server that accepts and never answers (the real one can answer a
  // GET within 1 ms, so a tiny timeout against it proves nothing)
  const held = [];
  const silent = net.createServer((s) => held.push(s));
  await new Promise((r) => silent.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${silent.address().port}`;
  const t = await Sandbox.getInfo("sb-x", { apiUrl: url, requestTimeoutMs: 200, maxRetries: 0 }).catch((x) => x);
  for (const s of held) s.destroy();
  await new Promise((r) => silent.close(r));
  assert.ok(t instanceof TimeoutError, String(t));
  const c = await Sandbox.getInfo("sb-x", { apiUrl: "http://127.0.0.1:1", maxRetries: 1 }).catch((x) => x);
  assert.ok(c instanceof ConnectionError, String(c));
});

test("list pages through 250 sandboxes, each once, oldest first", async () => {
  const { key } = await newTenant("pages");
  const ids = await pool(8, Array.from({ length: 250 }), async () => {
    // the node's default backend (ns): paging is the api's, whatever the backend
    const s = await Sandbox.create(sbOpts({ apiKey: key, backend: undefined, limits: { memory_mb: 32 }, metadata: { batch: "p250" } }));
    return s.sandboxId;
  });
  try {
    assert.equal(new Set(ids).size, 250);
    const seen = [];
    for await (const info of Sandbox.list({ apiKey: key, limit: 100 })) seen.push(info);
    assert.equal(seen.length, 250);
    assert.deepEqual(seen.map((i) => i.id).sort(), [...ids].sort());
    const keys = seen.map((i) => `${i.created_at} ${i.id}`);
    assert.deepEqual(keys, [...keys].sort(), "oldest first");
    // small pages and filters compose
    let n = 0;
    for await (const info of Sandbox.list({ apiKey: key, limit: 7, state: "running", metadata: { batch: "p250" } })) {
      assert.equal(info.metadata.batch, "p250");
      n++;
    }
    assert.equal(n, 250);
    // the default page size (100) still gives everything
    n = 0;
    for await (const _ of Sandbox.list({ apiKey: key })) n++;
    assert.equal(n, 250);
  } finally {
    await pool(8, ids, (id) => Sandbox.kill(id, { apiKey: key }));
  }
  let left = 0;
  for await (const _ of Sandbox.list({ apiKey: key })) left++;
  assert.equal(left, 0);
});
