// The Sandbox class against a real server: create (env, metadata, timeout,
// network, idempotency even when the answer is lost), connect, getInfo,
// list with filters, kill, pause/resume, suspend/restore, snapshots,
// rollback, fork, network get/set/log, getUrl, portToken, events.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";

import { Sandbox, ConflictError } from "../dist/index.js";
import { sbOpts, cuttingProxy, API_URL, API_KEY, BACKEND, MEMORY_MB } from "./helpers.mjs";

const made = [];
async function create(extra = {}) {
  const sb = await Sandbox.create(sbOpts(extra));
  made.push(sb.sandboxId);
  return sb;
}

let sb;
before(async () => {
  sb = await create({
    env: { FROM_CREATE: "yes" },
    metadata: { suite: "sandbox", run: String(process.pid) },
    timeoutMs: 3_600_000,
    network: "allow-all",
  });
});
after(async () => {
  for (const id of made) await Sandbox.kill(id);
});

test("create: the body's fields reach the sandbox", async () => {
  assert.match(sb.sandboxId, /^sb-/);
  assert.equal(sb.state, "running");
  assert.equal(sb.info.template, sbOpts().template);
  assert.equal(sb.info.timeout_s, 3600);
  assert.deepEqual(sb.info.metadata, { suite: "sandbox", run: String(process.pid) });
  assert.equal(sb.info.limits.memory_mb, MEMORY_MB);
  const r = await sb.commands.run('echo "$FROM_CREATE"');
  assert.equal(r.stdout, "yes\n");
  // timeout in seconds, as the Python SDK spells it
  const t = await create({ timeout: 120 });
  assert.equal(t.info.timeout_s, 120);
});

test("create: the same idempotency key gives the same sandbox", async () => {
  const key = `k-${process.pid}-${Date.now()}`;
  const a = await create({ idempotencyKey: key });
  const b = await Sandbox.create(sbOpts({ idempotencyKey: key }));
  assert.equal(b.sandboxId, a.sandboxId);
});

test("create: an answer lost on the way is retried and makes one sandbox only", async () => {
  // The proxy cuts the first create's answer after 20 bytes (inside its head):
  // the server made the sandbox, the client never heard. The SDK retries with
  // the same Idempotency-Key and gets that sandbox back.
  const proxy = await cuttingProxy(/^POST \/v1\/sandboxes /, 20);
  const tag = `lost-${process.pid}-${Date.now()}`;
  try {
    const s = await Sandbox.create(sbOpts({ apiUrl: proxy.url, apiKey: API_KEY, metadata: { tag } }));
    made.push(s.sandboxId);
    assert.equal(proxy.state.cuts, 1, "the first answer was cut");
    const all = [];
    for await (const info of Sandbox.list({ metadata: { tag } })) all.push(info.id);
    assert.deepEqual(all, [s.sandboxId], "exactly one sandbox was made");
  } finally {
    await proxy.close();
  }
});

test("connect, getInfo, list filters, connection options from the environment", async () => {
  const again = await Sandbox.connect(sb.sandboxId);
  assert.equal(again.sandboxId, sb.sandboxId);
  assert.equal((await again.getInfo()).state, "running");
  assert.equal((await Sandbox.getInfo(sb.sandboxId)).id, sb.sandboxId);
  // explicit options work as well as the environment
  const explicit = await Sandbox.connect(sb.sandboxId, { apiUrl: API_URL, apiKey: API_KEY });
  assert.equal(explicit.sandboxId, sb.sandboxId);

  const byMeta = [];
  for await (const i of Sandbox.list({ metadata: { suite: "sandbox", run: String(process.pid) } })) byMeta.push(i.id);
  assert.deepEqual(byMeta, [sb.sandboxId]);
  const byTemplate = [];
  for await (const i of Sandbox.list({ template: sbOpts().template, state: "running", limit: 1 })) byTemplate.push(i.id);
  assert.ok(byTemplate.includes(sb.sandboxId));
  assert.equal(new Set(byTemplate).size, byTemplate.length);
  const none = [];
  for await (const i of Sandbox.list({ metadata: { suite: "no-such" } })) none.push(i);
  assert.equal(none.length, 0);
});

test("metrics: CPU, memory and disk the sandbox uses", async () => {
  await sb.commands.run("dd if=/dev/zero of=/root/m bs=1M count=4 2>/dev/null; sync");
  const m = await sb.metrics();
  assert.equal(m.id, sb.sandboxId);
  assert.ok(m.cpu_seconds > 0 && m.memory_bytes > 0, JSON.stringify(m));
  assert.ok(m.disk_used_bytes >= 4 << 20, JSON.stringify(m));
});

test("pause, resume; connect resumes a paused sandbox", async () => {
  const info = await sb.pause();
  assert.equal(info.state, "paused");
  assert.equal(sb.state, "paused");
  await assert.rejects(sb.pause(), (e) => e instanceof ConflictError && e.state === "paused");
  assert.equal((await sb.resume()).state, "running");
  await sb.pause();
  const c = await Sandbox.connect(sb.sandboxId);
  assert.equal(c.state, "running");
  assert.equal((await sb.isRunning()), true);
  const reasons = (await sb.events()).map((e) => e.reason);
  assert.ok(reasons.includes("paused by client"), JSON.stringify(reasons));
});

test("snapshots: create, list, rollback, delete", async () => {
  await sb.files.write("/tmp/state", "before");
  const snap = await sb.snapshots.create({ name: "s1" });
  assert.equal(snap.name, "s1");
  assert.equal(snap.kind, "disk");
  assert.equal(snap.sandbox_id, sb.sandboxId);
  await sb.files.write("/tmp/state", "after");
  const list = await sb.snapshots.list();
  assert.ok(list.some((s) => s.id === snap.id));
  const info = await sb.rollback(snap);
  assert.equal(info.state, "running");
  assert.equal(await sb.files.read("/tmp/state"), "before");
  await sb.snapshots.create({ name: "s2" });
  await sb.rollback("s2");
  await sb.snapshots.delete(snap);
  await sb.snapshots.delete("s2");
  assert.deepEqual((await sb.snapshots.list()).filter((s) => !s.scheduled).map((s) => s.name), []);
});

test("fork: count children with the parent's files", async () => {
  await sb.files.write("/tmp/forked", "from parent");
  const kids = await sb.fork(2);
  for (const k of kids) made.push(k.sandboxId);
  assert.equal(kids.length, 2);
  for (const k of kids) {
    assert.equal(k.info.parent, sb.sandboxId);
    assert.notEqual(k.sandboxId, sb.sandboxId);
    assert.equal(await k.files.read("/tmp/forked"), "from parent");
  }
  await kids[0].files.write("/tmp/forked", "child");
  assert.equal(await sb.files.read("/tmp/forked"), "from parent");
  const one = await sb.fork({ count: 1 });
  made.push(one[0].sandboxId);
  assert.equal(one.length, 1);
});

test("network: get, set, log", async (t) => {
  let net;
  try {
    net = await sb.network.get();
  } catch (e) {
    if (e.status === 501) return t.skip("the node runs without a network");
    throw e;
  }
  // the canonical form of "allow-all"
  assert.equal(net.network.default, "allow");
  assert.deepEqual(net.network.allow.domains, []);
  assert.match(net.addr, /^\d+\.\d+\.\d+\.\d+$/);
  const policy = { default: "deny", allow: { domains: ["example.com"] } };
  const set = await sb.network.set(policy);
  assert.equal(set.network.default, "deny");
  assert.deepEqual(set.network.allow.domains, ["example.com"]);
  assert.equal((await sb.network.get()).network.default, "deny");
  assert.ok(Array.isArray(await sb.network.log()));
  const open = await sb.network.set("allow-all");
  assert.equal(open.network.default, "allow");
});

test("getUrl reaches a service in the sandbox; portToken", async () => {
  await sb.files.write("/www/index.html", "served from the sandbox\n");
  const srv = await sb.commands.run(["busybox", "httpd", "-f", "-p", "8080", "-h", "/www"], { background: true });
  try {
    const url = sb.getUrl(8080);
    assert.equal(url, `${API_URL}/v1/sandboxes/${sb.sandboxId}/ports/8080/`);
    let body = "";
    for (let i = 0; i < 100; i++) {
      const r = await fetch(url + "index.html", { headers: { Authorization: `Bearer ${API_KEY}` } });
      body = await r.text();
      if (r.status === 200) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    assert.equal(body, "served from the sandbox\n");
  } finally {
    await srv.kill();
  }
  const tok = await sb.portToken(8080, { ttlSeconds: 600 });
  assert.equal(tok.port, 8080);
  assert.equal(tok.sandbox_id, sb.sandboxId);
  assert.ok(tok.token.length > 16);
  const left = (Date.parse(tok.expires_at) - Date.now()) / 1000;
  assert.ok(left > 500 && left <= 601, `expires in ${left} s`);
  assert.equal(tok.host, null, "no ports_domain on this server");
});

test("suspend and restore (and resume of a suspended one)", async (t) => {
  const s = await create();
  if (s.info.suspend == null) return t.skip(`the ${s.info.backend} backend cannot suspend here`);
  await s.files.write("/tmp/kept", "across suspend");
  const sus = await s.suspend();
  assert.equal(sus.state, "suspended");
  assert.ok(sus.snapshot_id);
  const back = await s.restore();
  assert.equal(back.state, "running");
  assert.equal(await s.files.read("/tmp/kept"), "across suspend");
  await s.suspend();
  assert.equal((await s.resume()).state, "running");
  assert.equal(await s.files.read("/tmp/kept"), "across suspend");
});

test("kill deletes; a second kill of an unknown id says false", async () => {
  const s = await create();
  assert.equal(await s.kill(), true);
  const st = await s.isRunning();
  assert.equal(st, false);
  assert.equal(await Sandbox.kill("sb-does-not-exist"), false);
});

test("BACKEND is honoured", async () => {
  if (BACKEND) assert.equal(sb.info.backend, BACKEND);
  else assert.ok(sb.info.backend);
});
