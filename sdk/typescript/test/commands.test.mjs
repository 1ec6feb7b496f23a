// sb.commands and sb.pty against a real server: foreground and background
// runs, callbacks, stdin, kill, abort, connect by pid, iteration over the
// output, a stream broken in the middle and picked up by offset, and a PTY.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";

import { Sandbox, CommandHandle, AbortError, NotFoundError } from "../dist/index.js";
import { sbOpts, cuttingProxy, API_KEY, API_URL } from "./helpers.mjs";

let sb;
before(async () => {
  sb = await Sandbox.create(sbOpts());
});
after(async () => {
  if (sb) await sb.kill();
});

test("run: stdout, stderr, exit code, cwd, envs, user", async () => {
  const r = await sb.commands.run("echo out; echo err >&2; exit 3");
  assert.equal(r.stdout, "out\n");
  assert.equal(r.stderr, "err\n");
  assert.equal(r.exitCode, 3);
  assert.ok(r.pid > 0);

  const ok = await sb.commands.run(["/bin/sh", "-c", 'pwd; echo "$GREETING"; id -u'], {
    cwd: "/tmp",
    envs: { GREETING: "hello there" },
    user: "root",
  });
  assert.equal(ok.stdout, "/tmp\nhello there\n0\n");
  assert.equal(ok.exitCode, 0);
});

test("run: streaming callbacks see every byte, in order", async () => {
  let out = "";
  let err = "";
  let calls = 0;
  const r = await sb.commands.run("for i in 1 2 3 4 5; do echo o$i; echo e$i >&2; sleep 0.1; done", {
    onStdout: (t) => {
      out += t;
      calls++;
    },
    onStderr: (t) => (err += t),
  });
  assert.equal(out, "o1\no2\no3\no4\no5\n");
  assert.equal(err, "e1\ne2\ne3\ne4\ne5\n");
  assert.equal(r.stdout, out);
  assert.ok(calls >= 2, `output came in pieces as it was written (${calls} calls)`);
});

test("run: stdin given as data is written and closed", async () => {
  const r = await sb.commands.run("cat | tr a-z A-Z", { stdin: "piped in\n" });
  assert.equal(r.stdout, "PIPED IN\n");
  assert.equal(r.exitCode, 0);
});

test("run: timeoutMs has the server kill the process", async () => {
  const t0 = Date.now();
  const r = await sb.commands.run("sleep 30", { timeoutMs: 1000 });
  assert.equal(r.exitCode, null);
  assert.equal(r.signal, 9);
  assert.ok(Date.now() - t0 < 20000);
});

test("background: handle with pid, wait, sendStdin, iteration", async () => {
  const h = await sb.commands.run("while read l; do echo got:$l; done; echo bye", {
    background: true,
    stdin: true,
  });
  assert.ok(h instanceof CommandHandle);
  assert.ok(h.pid > 0);
  await h.sendStdin("a\n");
  await h.sendStdin("b\n", { eof: true });
  const r = await h.wait();
  assert.equal(r.stdout, "got:a\ngot:b\nbye\n");
  assert.equal(r.exitCode, 0);
  // Iteration after the end still gives the whole output from the start.
  let seen = "";
  for await (const c of h) {
    assert.equal(c.stream, "stdout");
    assert.ok(c.data instanceof Uint8Array);
    seen += c.text;
  }
  assert.equal(seen, r.stdout);
});

test("background: iterate live output; kill", async () => {
  const h = await sb.commands.run("i=0; while true; do echo tick$i; i=$((i+1)); sleep 0.2; done", {
    background: true,
  });
  const got = [];
  for await (const c of h) {
    got.push(c.text);
    if (got.join("").includes("tick2")) break;
  }
  assert.match(got.join(""), /^tick0\ntick1\ntick2\n/);
  assert.equal(await h.kill(), true);
  const r = await h.wait();
  assert.equal(r.signal, 9);
  assert.equal(r.exitCode, null);
  // The process table says so too.
  const procs = await sb.commands.list();
  const p = procs.find((x) => x.pid === h.pid);
  assert.ok(p, "the process is listed");
  assert.equal(p.running, false);
  assert.equal(p.signal, 9);
});

test("connect: follow a running process by pid from the start", async () => {
  const h = await sb.commands.run("echo first; sleep 1; echo second", { background: true });
  const again = await sb.commands.connect(h.pid);
  const r = await again.wait();
  assert.equal(r.stdout, "first\nsecond\n");
  assert.equal(r.exitCode, 0);
  assert.equal((await h.wait()).stdout, "first\nsecond\n");
  await assert.rejects(sb.commands.connect(999999), NotFoundError);
  // kill by pid: an ended process is still known, an unknown one is not
  assert.equal(await sb.commands.kill(999999), false);
});

test("AbortSignal: aborting a foreground run kills the process and rejects", async () => {
  const ac = new AbortController();
  const started = Date.now();
  setTimeout(() => ac.abort(), 700);
  await assert.rejects(sb.commands.run("echo started; sleep 60", { signal: ac.signal }), AbortError);
  assert.ok(Date.now() - started < 15000);
  // the abort killed it in the sandbox
  let running = true;
  for (let i = 0; i < 50 && running; i++) {
    const procs = await sb.commands.list();
    const p = procs.find((x) => x.cmd.join(" ").includes("sleep 60"));
    running = p ? p.running : false;
    if (running) await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(running, false, "the aborted process was killed");
});

test("a stream broken in the middle is resumed by offset: all output, once", async () => {
  // 400 lines on stdout and 100 on stderr, written over ~2 s so that the cut
  // lands while the process still runs.
  const script =
    'i=0; while [ $i -lt 400 ]; do echo "line-$i-abcdefghijklmnopqrstuvwxyz"; ' +
    '[ $((i % 4)) = 0 ] && echo "err-$i" >&2; i=$((i+1)); ' +
    "[ $((i % 40)) = 0 ] && sleep 0.2; done; echo done";
  const want = Array.from({ length: 400 }, (_, i) => `line-${i}-abcdefghijklmnopqrstuvwxyz\n`).join("") + "done\n";
  const wantErr = Array.from({ length: 100 }, (_, i) => `err-${i * 4}\n`).join("");
  const proxy = await cuttingProxy(/^POST \/v1\/sandboxes\/[^/]+\/exec /, 1500);
  try {
    const viaProxy = await Sandbox.connect(sb.sandboxId, { apiUrl: proxy.url, apiKey: API_KEY });
    let cbOut = "";
    const h = await viaProxy.commands.run(script, { background: true, onStdout: (t) => (cbOut += t) });
    const r = await h.wait();
    assert.equal(proxy.state.cuts, 1, "the proxy cut the exec stream once");
    assert.ok(h.reconnects >= 1, "the SDK reconnected");
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, want);
    assert.equal(r.stderr, wantErr);
    assert.equal(cbOut, want, "callbacks saw each byte exactly once");
    assert.equal(r.droppedBytes, 0);
  } finally {
    await proxy.close();
  }
});

test("pty: output, input, resize, kill, wait", async () => {
  let data = Buffer.alloc(0);
  const term = await sb.pty.create({
    rows: 24,
    cols: 80,
    onData: (d) => (data = Buffer.concat([data, d])),
  });
  assert.ok(term.pid > 0);
  const waitFor = async (re) => {
    for (let i = 0; i < 200; i++) {
      if (re.test(data.toString())) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.fail(`no ${re} in ${JSON.stringify(data.toString())}`);
  };
  await term.sendInput("stty size; tty\n");
  await waitFor(/24 80/);
  await waitFor(/\/dev\/pts\//);
  await term.resize({ rows: 40, cols: 120 });
  await term.sendInput("stty size\n");
  await waitFor(/40 120/);
  const procs = await sb.commands.list();
  assert.equal(procs.find((p) => p.pid === term.pid).pty, true);
  assert.equal(await term.kill(), true);
  const r = await term.wait();
  assert.equal(r.signal, 9);
  // a shell that exits by itself
  const t2 = await sb.pty.create({ cmd: ["/bin/sh"] });
  await t2.sendInput("exit 7\n");
  assert.equal((await t2.wait()).exitCode, 7);
});

test("the output route replays each stream from its own offset (what reconnects use)", async () => {
  const r = await sb.commands.run("printf 0123456789; printf abcdefghij >&2");
  const url = `${API_URL}/v1/sandboxes/${sb.sandboxId}/processes/${r.pid}/output?offset=4&stderr_offset=7&follow=0`;
  const res = await fetch(url, { headers: { Authorization: `Bearer ${API_KEY}` } });
  assert.equal(res.status, 200);
  const lines = (await res.text()).trim().split("\n").map((l) => JSON.parse(l));
  const data = (t) => lines.filter((l) => l.type === t).map((l) => Buffer.from(l.data, "base64").toString()).join("");
  assert.equal(data("stdout"), "456789");
  assert.equal(data("stderr"), "hij");
  assert.equal(lines.find((l) => l.type === "stderr").offset, 7);
  assert.equal(lines.at(-1).type, "exit");
});
