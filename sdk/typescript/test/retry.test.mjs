// The retry rules, against a scripted local HTTP server (answers a real
// Airlock does not give on demand): Retry-After honoured, a Retry-After
// too long handed to the caller, what is and is not repeated after a lost
// answer, and one Idempotency-Key for every try of a create.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";

import { Sandbox, RateLimitError, ServerError, ConnectionError } from "../dist/index.js";

/** A server answering request i with script[i] (the last one repeats); records the requests. */
async function scripted(script) {
  const seen = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      seen.push({ method: req.method, url: req.url, headers: req.headers, body, at: Date.now() });
      const step = script[Math.min(seen.length - 1, script.length - 1)];
      if (step === "drop") return req.socket.destroy();
      res.writeHead(step.status, { "Content-Type": "application/json", ...(step.headers ?? {}) });
      res.end(JSON.stringify(step.body ?? {}));
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    close: () => new Promise((r) => server.close(r)),
  };
}

const SB = { id: "sb-1", state: "running", metadata: {}, limits: {} };
const err = (status, code, headers) => ({ status, headers, body: { error: { code, message: code } } });

test("429 waits Retry-After, then succeeds", async () => {
  const s = await scripted([err(429, "rate_limited", { "Retry-After": "1" }), { status: 200, body: SB }]);
  try {
    const info = await Sandbox.getInfo("sb-1", { apiUrl: s.url, apiKey: "k" });
    assert.equal(info.id, "sb-1");
    assert.equal(s.seen.length, 2);
    assert.ok(s.seen[1].at - s.seen[0].at >= 950, `waited ${s.seen[1].at - s.seen[0].at} ms`);
    assert.equal(s.seen[0].headers.authorization, "Bearer k");
  } finally {
    await s.close();
  }
});

test("a Retry-After past 60 s is the caller's: RateLimitError at once", async () => {
  const s = await scripted([err(429, "rate_limited", { "Retry-After": "3600" })]);
  try {
    const e = await Sandbox.getInfo("sb-1", { apiUrl: s.url, apiKey: "k" }).catch((x) => x);
    assert.ok(e instanceof RateLimitError, String(e));
    assert.equal(e.retryAfter, 3600);
    assert.equal(s.seen.length, 1);
  } finally {
    await s.close();
  }
});

test("create: every try carries the same Idempotency-Key; 503 busy and lost answers are retried", async () => {
  const s = await scripted([err(503, "busy", { "Retry-After": "0" }), "drop", { status: 201, body: SB }]);
  try {
    const sb = await Sandbox.create({ apiUrl: s.url, apiKey: "k", template: "t" });
    assert.equal(sb.sandboxId, "sb-1");
    assert.equal(s.seen.length, 3);
    const keys = s.seen.map((r) => r.headers["idempotency-key"]);
    assert.ok(keys[0] && keys[0].length >= 16);
    assert.deepEqual(keys, [keys[0], keys[0], keys[0]]);
    assert.deepEqual(JSON.parse(s.seen[0].body), { template: "t" });
    // the create's long timeout (600 s) is its own, not the sandbox's
    assert.equal(sb.http.requestTimeoutMs, 60_000);
    // another call, another key
    const s2 = await Sandbox.create({ apiUrl: s.url, apiKey: "k" });
    assert.equal(s2.sandboxId, "sb-1");
    assert.notEqual(s.seen[3].headers["idempotency-key"], keys[0]);
  } finally {
    await s.close();
  }
});

test("a POST that is not idempotent is not repeated after a lost answer or a 502; a GET is", async () => {
  const s = await scripted([{ status: 200, body: SB }, "drop", err(502, "bad_gateway")]);
  try {
    const sb = await Sandbox.connect("sb-1", { apiUrl: s.url, apiKey: "k" });
    assert.equal(s.seen.length, 1);
    const lost = await sb.pause().catch((x) => x);
    assert.ok(lost instanceof ConnectionError, String(lost));
    assert.equal(s.seen.length, 2, "the pause was sent once");
    const bad = await sb.pause().catch((x) => x);
    assert.ok(bad instanceof ServerError, String(bad));
    assert.equal(bad.status, 502);
    assert.equal(s.seen.length, 3, "the pause was sent once");
    const get = await sb.getInfo().catch((x) => x);
    assert.ok(get instanceof ServerError, String(get));
    assert.equal(s.seen.length, 3 + 4, "the GET was tried maxRetries (3) + 1 times");
  } finally {
    await s.close();
  }
});

test("a redirect is not followed (the key never goes elsewhere)", async () => {
  const other = await scripted([{ status: 200, body: SB }]);
  const s = await scripted([{ status: 302, headers: { Location: `${other.url}/v1/sandboxes/sb-1` } }]);
  try {
    const e = await Sandbox.getInfo("sb-1", { apiUrl: s.url, apiKey: "k" }).catch((x) => x);
    assert.ok(e instanceof Error && !(e.id === "sb-1"), String(e));
    assert.equal(e.status, 302);
    assert.equal(other.seen.length, 0, "the redirect target got nothing");
  } finally {
    await s.close();
    await other.close();
  }
});
