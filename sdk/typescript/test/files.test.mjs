// sb.files against a real server: read/write (text and bytes, mode),
// list, stat, exists, makeDir, rename, remove, and watch (events as the
// sandbox changes files; stopped by close() and by an AbortSignal).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";

import { Sandbox, NotFoundError, WatchHandle } from "../dist/index.js";
import { sbOpts } from "./helpers.mjs";

let sb;
before(async () => {
  sb = await Sandbox.create(sbOpts());
});
after(async () => {
  if (sb) await sb.kill();
});

test("write and read text and bytes; mode", async () => {
  await sb.files.write("/tmp/f/deep/a.txt", "héllo\n");
  assert.equal(await sb.files.read("/tmp/f/deep/a.txt"), "héllo\n");
  const bytes = new Uint8Array(256).map((_, i) => i);
  await sb.files.write("/tmp/f/b.bin", bytes, { mode: "0755" });
  const back = await sb.files.read("/tmp/f/b.bin", { format: "bytes" });
  assert.ok(back instanceof Uint8Array);
  assert.deepEqual(Buffer.from(back), Buffer.from(bytes));
  const st = await sb.files.stat("/tmp/f/b.bin");
  assert.equal(st.type, "file");
  assert.equal(st.size, 256);
  assert.match(st.mode, /^0?755$/);
  // the process in the sandbox sees the same bytes
  const r = await sb.commands.run("cat /tmp/f/deep/a.txt; ls -l /tmp/f/b.bin");
  assert.match(r.stdout, /^héllo\n-rwxr-xr-x/);
});

test("list, makeDir, exists, rename, remove", async () => {
  await sb.files.makeDir("/tmp/d/x/y");
  assert.equal((await sb.files.stat("/tmp/d/x/y")).type, "dir");
  await sb.files.write("/tmp/d/one", "1");
  const names = (await sb.files.list("/tmp/d")).map((e) => `${e.name}:${e.type}`).sort();
  assert.deepEqual(names, ["one:file", "x:dir"]);
  assert.equal(await sb.files.exists("/tmp/d/one"), true);
  assert.equal(await sb.files.exists("/tmp/d/nope"), false);
  await sb.files.rename("/tmp/d/one", "/tmp/d/two");
  assert.equal(await sb.files.exists("/tmp/d/one"), false);
  assert.equal(await sb.files.read("/tmp/d/two"), "1");
  await sb.files.remove("/tmp/d/two");
  assert.equal(await sb.files.exists("/tmp/d/two"), false);
  await sb.files.remove("/tmp/d", { recursive: true });
  assert.equal(await sb.files.exists("/tmp/d"), false);
  await assert.rejects(sb.files.read("/tmp/d/two"), NotFoundError);
  await assert.rejects(sb.files.list("/nonexistent"), NotFoundError);
  // makeDir without parents needs the parent
  await assert.rejects(sb.files.makeDir("/tmp/no/such/parent", { parents: false }));
});

test("watch: create, write, rename, remove events; close() ends it", async () => {
  await sb.files.makeDir("/tmp/w");
  const seen = [];
  const w = await sb.files.watch("/tmp/w", { onEvent: (e) => seen.push(e) });
  assert.ok(w instanceof WatchHandle);
  await sb.commands.run("mkdir /tmp/w/sub && echo x > /tmp/w/a && mv /tmp/w/a /tmp/w/b && rm /tmp/w/b && echo y > /tmp/w/sub/c");
  // c is made right after sub. When the agent's watch of sub comes after c's
  // write, c is reported by its scan of the new directory, right after sub's
  // "create" and before the events of a that the kernel queued behind it; else
  // c comes last, as "create" (then "write"). So wait for every expected event,
  // in any order. A miss fails in 30 s rather than at the HTTP client's body
  // timeout.
  const want = [
    ["create sub", (e) => e.type === "create" && e.path === "/tmp/w/sub" && e.dir === true],
    ["create a", (e) => e.type === "create" && e.path === "/tmp/w/a"],
    ["rename a->b", (e) => e.type === "rename" && e.from === "/tmp/w/a" && e.path === "/tmp/w/b"],
    ["remove b", (e) => e.type === "remove" && e.path === "/tmp/w/b"],
    ["c in the new subdirectory (recursive)",
      (e) => (e.type === "write" || e.type === "create") && e.path === "/tmp/w/sub/c"],
  ];
  const got = [];
  const timer = setTimeout(() => w.close(), 30000);
  for await (const ev of w) {
    got.push(ev);
    if (want.every(([, pred]) => got.some(pred))) break;
  }
  clearTimeout(timer);
  for (const [what, pred] of want) assert.ok(got.some(pred), `${what} in ${JSON.stringify(got)}`);
  assert.ok(seen.length >= got.length, "onEvent saw them too");
  w.close();
  // after close the iterator ends (no error)
  const rest = [];
  for await (const ev of w) rest.push(ev);
  assert.ok(rest.length >= 0);
});

test("watch: an AbortSignal stops it; a missing path is NotFoundError", async () => {
  await sb.files.makeDir("/tmp/w2");
  const ac = new AbortController();
  const w = await sb.files.watch("/tmp/w2", { signal: ac.signal, recursive: false });
  await sb.files.write("/tmp/w2/f", "z");
  const it = w[Symbol.asyncIterator]();
  // files.write is atomic (a temporary file renamed over f): f shows up as
  // the rename's target
  for (;;) {
    const n = await it.next();
    assert.equal(n.done, false, "the watch saw f");
    if (n.value.path === "/tmp/w2/f") break;
  }
  ac.abort();
  const t0 = Date.now();
  for (;;) {
    const n = await it.next();
    if (n.done) break;
  }
  assert.ok(Date.now() - t0 < 5000, "the watch ended soon after the abort");
  await assert.rejects(sb.files.watch("/tmp/does-not-exist"), NotFoundError);
});
