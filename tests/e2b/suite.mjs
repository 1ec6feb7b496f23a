// tests/e2b/suite.mjs - the unmodified e2b SDK against Airlock's E2B API.
// Settings only: E2B_API_URL=<api>/e2b, E2B_SANDBOX_URL=<api>/e2b/envd,
// E2B_API_KEY=<an Airlock key>, E2B_DOMAIN=<ports_domain>; E2B_TEMPLATE names
// the Airlock template (default busybox); AIRLOCK_TEST_API_ADDR (host:port
// of the api) lets the getHost check send its request there with that Host.
// Every step asserts its result; the first failure exits non-zero.
import assert from 'node:assert/strict'
import http from 'node:http'
import { Sandbox, AuthenticationError, CommandExitError, FileNotFoundError, NotFoundError } from 'e2b'

const TEMPLATE = process.env.E2B_TEMPLATE || 'busybox'
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
let step = ''
const ok = (what) => console.log(`ok - ${what}`)

async function until(what, fn, ms = 15000) {
  const end = Date.now() + ms
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await sleep(100)
  }
}

// GET / of a service in the sandbox through its host-routed URL (getHost):
// the request goes to the api with the Host header the SDK built.
function getViaHost(host, headers) {
  const [h, p] = process.env.AIRLOCK_TEST_API_ADDR.split(':')
  return new Promise((resolve, reject) => {
    const req = http.request({ host: h, port: Number(p), path: '/index.html', headers: { Host: host, ...headers } }, (res) => {
      let body = ''
      res.on('data', (d) => (body += d))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

async function main() {
  step = 'create'
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 600_000, metadata: { suite: 'e2b' }, envs: { GREETING: 'hi' } })
  assert.match(sbx.sandboxId, /^sb-/)
  ok(`Sandbox.create(${TEMPLATE}) -> ${sbx.sandboxId}`)
  try {
    step = 'run echo'
    const r = await sbx.commands.run('echo hello $GREETING')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'hello hi\n')
    assert.equal(r.stderr, '')
    ok('commands.run(echo): exit 0, stdout, the create envs')

    step = 'run failing'
    await assert.rejects(sbx.commands.run('echo oops >&2; exit 3'), (e) => {
      assert.ok(e instanceof CommandExitError, `${e}`)
      assert.equal(e.exitCode, 3)
      assert.equal(e.stderr, 'oops\n')
      return true
    })
    ok('commands.run(exit 3): CommandExitError with exitCode 3 and stderr')

    step = 'run with cwd and envs'
    const rc = await sbx.commands.run('pwd; echo $X', { cwd: '/tmp', envs: { X: 'y' } })
    assert.equal(rc.stdout, '/tmp\ny\n')
    ok('commands.run with cwd and envs')

    step = 'stream'
    const chunks = []
    const at = []
    const t0 = Date.now()
    const rs = await sbx.commands.run('for i in 1 2 3 4; do echo line$i; sleep 0.4; done; echo err >&2', {
      onStdout: (d) => { chunks.push(d); at.push(Date.now() - t0) },
      onStderr: (d) => chunks.push(`E:${d}`),
    })
    assert.equal(rs.stdout, 'line1\nline2\nline3\nline4\n')
    assert.deepEqual(chunks.join('').replace(/E:err\n/, ''), 'line1\nline2\nline3\nline4\n')
    assert.ok(chunks.includes('E:err\n'), JSON.stringify(chunks))
    assert.ok(chunks.length >= 4, `output came in ${chunks.length} callbacks: ${JSON.stringify(chunks)}`)
    // streamed as produced: the first line arrived well before the end
    assert.ok(at[at.length - 1] - at[0] >= 900, `callbacks at ${at}`)
    ok(`output streamed through onStdout/onStderr (${chunks.length} callbacks over ${at[at.length - 1] - at[0]} ms)`)

    step = 'background + wait'
    const bg = await sbx.commands.run('sleep 1; echo done', { background: true })
    assert.ok(bg.pid > 0)
    const procs = await sbx.commands.list()
    assert.ok(procs.some((p) => p.pid === bg.pid), JSON.stringify(procs))
    const bgr = await bg.wait()
    assert.equal(bgr.exitCode, 0)
    assert.equal(bgr.stdout, 'done\n')
    ok('background command: pid in commands.list, wait() gives its output')

    step = 'kill'
    const k = await sbx.commands.run('sleep 600', { background: true })
    assert.equal(await sbx.commands.kill(k.pid), true)
    await assert.rejects(k.wait(), (e) => {
      assert.ok(e instanceof CommandExitError, `${e}`)
      assert.equal(e.exitCode, -1)
      return true
    })
    assert.ok(!(await sbx.commands.list()).some((p) => p.pid === k.pid))
    assert.equal(await sbx.commands.kill(999999), false)
    ok('commands.kill: the process ends (exitCode -1); an unknown pid is false')

    step = 'stdin'
    const cat = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(cat.pid, 'piped\n')
    await sbx.commands.closeStdin(cat.pid)
    const cr = await cat.wait()
    assert.equal(cr.stdout, 'piped\n')
    ok('sendStdin + closeStdin')

    step = 'connect to a command'
    const slow = await sbx.commands.run('sleep 1; echo late', { background: true })
    const again = await sbx.commands.connect(slow.pid)
    assert.equal(again.pid, slow.pid)
    const ar = await again.wait()
    assert.equal(ar.stdout, 'late\n')
    ok('commands.connect(pid) follows a running command to its end')

    step = 'pty'
    let screen = ''
    const dec = new TextDecoder()
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { screen += dec.decode(d) } })
    assert.ok(term.pid > 0)
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo pty-$((1+2))\n'))
    await until('the terminal to echo pty-3', () => screen.includes('pty-3'))
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'))
    await until('stty size to show 30 100', () => screen.includes('30 100'))
    // a second handle on the same terminal: its output arrives as pty data
    let screen2 = ''
    const term2 = await sbx.pty.connect(term.pid, { onData: (d) => { screen2 += dec.decode(d) } })
    assert.equal(term2.pid, term.pid)
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo again-$((2+2))\n'))
    await until('the connected handle to see again-4', () => screen2.includes('again-4'))
    assert.equal(await sbx.pty.kill(term.pid), true)
    await assert.rejects(term.wait())
    await assert.rejects(term2.wait())
    ok('pty: create, sendInput, output through onData, resize (stty size 30 100), connect, kill')

    step = 'files'
    assert.equal(await sbx.files.makeDir('/tmp/e2b/sub'), true)
    assert.equal(await sbx.files.makeDir('/tmp/e2b/sub'), false)
    const w = await sbx.files.write('/tmp/e2b/a.txt', 'alpha\n')
    assert.equal(w.path, '/tmp/e2b/a.txt')
    assert.equal(w.name, 'a.txt')
    assert.equal(await sbx.files.read('/tmp/e2b/a.txt'), 'alpha\n')
    const bytes = Uint8Array.from({ length: 256 }, (_, i) => i)
    await sbx.files.write('/tmp/e2b/bin', bytes)
    assert.deepEqual(await sbx.files.read('/tmp/e2b/bin', { format: 'bytes' }), bytes)
    // a stream body: the SDK uploads it as application/octet-stream, chunked
    const big = 'z'.repeat(300_000)
    await sbx.files.write('/tmp/e2b/stream.txt', new Blob([big]).stream())
    assert.equal(await sbx.files.read('/tmp/e2b/stream.txt'), big)
    await sbx.files.remove('/tmp/e2b/stream.txt')
    const multi = await sbx.files.write([{ path: '/tmp/e2b/b.txt', data: 'beta' }, { path: '/tmp/e2b/sub/c.txt', data: 'gamma' }])
    assert.deepEqual(multi.map((f) => f.path), ['/tmp/e2b/b.txt', '/tmp/e2b/sub/c.txt'])
    assert.equal((await sbx.commands.run('cat /tmp/e2b/sub/c.txt')).stdout, 'gamma')
    const list = await sbx.files.list('/tmp/e2b')
    const byName = Object.fromEntries(list.map((e) => [e.name, e]))
    assert.deepEqual(Object.keys(byName).sort(), ['a.txt', 'b.txt', 'bin', 'sub'])
    assert.equal(byName['a.txt'].type, 'file')
    assert.equal(byName['a.txt'].size, 6)
    assert.equal(byName['a.txt'].path, '/tmp/e2b/a.txt')
    assert.equal(byName.sub.type, 'dir')
    const deep = await sbx.files.list('/tmp/e2b', { depth: 2 })
    assert.ok(deep.some((e) => e.path === '/tmp/e2b/sub/c.txt'), JSON.stringify(deep.map((e) => e.path)))
    const info = await sbx.files.getInfo('/tmp/e2b/a.txt')
    assert.equal(info.size, 6)
    assert.equal(info.permissions.length, 10)
    assert.equal(await sbx.files.exists('/tmp/e2b/a.txt'), true)
    const moved = await sbx.files.rename('/tmp/e2b/b.txt', '/tmp/e2b/b2.txt')
    assert.equal(moved.path, '/tmp/e2b/b2.txt')
    await sbx.files.remove('/tmp/e2b/b2.txt')
    assert.equal(await sbx.files.exists('/tmp/e2b/b2.txt'), false)
    await assert.rejects(sbx.files.read('/tmp/e2b/missing'), (e) => {
      assert.ok(e instanceof FileNotFoundError || e instanceof NotFoundError, `${e}`)
      return true
    })
    ok('files: makeDir, write (text, bytes, a stream, several), read, list (depth 1 and 2), getInfo, exists, rename, remove, missing file')

    step = 'watch'
    const events = []
    const h = await sbx.files.watchDir('/tmp/e2b', (e) => events.push(e))
    await sbx.files.write('/tmp/e2b/new.txt', 'x')
    await until('a watch event for new.txt', () => events.some((e) => e.name === 'new.txt' && (e.type === 'create' || e.type === 'write')))
    await sbx.files.remove('/tmp/e2b/new.txt')
    await until('a remove event for new.txt', () => events.some((e) => e.name === 'new.txt' && e.type === 'remove'))
    await sbx.files.rename('/tmp/e2b/a.txt', '/tmp/e2b/a2.txt')
    await until('rename events for a.txt', () => events.some((e) => e.name === 'a.txt' && e.type === 'rename') &&
      events.some((e) => e.name === 'a2.txt' && e.type === 'create'))
    await sbx.files.rename('/tmp/e2b/a2.txt', '/tmp/e2b/a.txt')
    // the temporary file of Airlock's atomic write is not the client's business
    assert.ok(!events.some((e) => e.name.includes('.airlock-tmp-')), JSON.stringify(events))
    await h.stop()
    ok(`files.watchDir: ${events.map((e) => `${e.type} ${e.name}`).join(', ')}`)

    step = 'getHost'
    await sbx.files.write('/tmp/www/index.html', 'served\n')
    await sbx.commands.run('busybox httpd -f -p 8080 -h /tmp/www', { background: true })
    const host = sbx.getHost(8080)
    assert.equal(host, `8080-${sbx.sandboxId}.${process.env.E2B_DOMAIN}`)
    const res = await until('the service behind getHost(8080)', async () => {
      const x = await getViaHost(host, { Authorization: `Bearer ${process.env.E2B_API_KEY}` })
      return x.status === 200 ? x : null
    })
    assert.equal(res.body, 'served\n')
    assert.equal((await getViaHost(host, {})).status, 401)
    ok(`getHost(8080) = ${host}: the service answers with the owner's key, 401 without`)

    step = 'getMetrics'
    {
      await sbx.commands.run('dd if=/dev/zero of=/root/m bs=1M count=4 2>/dev/null; sync; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done')
      const ms = await sbx.getMetrics()
      assert.equal(ms.length, 1, 'one sample')
      const m = ms[0]
      assert.ok(m.timestamp instanceof Date && Math.abs(Date.now() - m.timestamp.getTime()) < 60_000, `timestamp ${m.timestamp}`)
      assert.ok(m.cpuCount >= 1 && m.cpuUsedPct > 0 && m.cpuUsedPct <= 100, `cpu ${m.cpuUsedPct}% of ${m.cpuCount}`)
      assert.ok(m.memUsed > 0 && m.memTotal >= m.memUsed, `memory ${m.memUsed} of ${m.memTotal}`)
      assert.ok(m.diskUsed >= 4 << 20 && m.diskTotal > m.diskUsed, `disk ${m.diskUsed} of ${m.diskTotal}`)
      ok(`getMetrics: cpu ${m.cpuUsedPct.toFixed(1)}% of ${m.cpuCount}, memory ${m.memUsed} of ${m.memTotal}, disk ${m.diskUsed} of ${m.diskTotal}`)
    }

    step = 'setTimeout + getInfo'
    await sbx.setTimeout(120_000)
    const gi = await sbx.getInfo()
    assert.equal(gi.sandboxId, sbx.sandboxId)
    assert.equal(gi.state, 'running')
    assert.equal(gi.metadata.suite, 'e2b')
    assert.equal(gi.templateId, TEMPLATE)
    const left = gi.endAt.getTime() - Date.now()
    assert.ok(left > 100_000 && left <= 125_000, `endAt is ${left} ms away after setTimeout(120 s)`)
    ok(`setTimeout(120 s): getInfo's endAt is ${Math.round(left / 1000)} s away`)

    step = 'list'
    const page = await Sandbox.list().nextItems()
    assert.ok(page.some((s) => s.sandboxId === sbx.sandboxId && s.state === 'running'), JSON.stringify(page))
    const mine = await Sandbox.list({ query: { metadata: { suite: 'e2b' } } }).nextItems()
    assert.deepEqual(mine.map((s) => s.sandboxId), [sbx.sandboxId])
    const none = await Sandbox.list({ query: { metadata: { suite: 'other' } } }).nextItems()
    assert.deepEqual(none, [])
    ok('Sandbox.list, with and without a metadata filter')

    step = 'pause + connect'
    assert.equal(await sbx.pause(), true)
    assert.equal((await sbx.getInfo()).state, 'paused')
    const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
    assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId), JSON.stringify(paused))
    const running = await Sandbox.list({ query: { state: ['running'] } }).nextItems()
    assert.ok(!running.some((s) => s.sandboxId === sbx.sandboxId), JSON.stringify(running))
    const both = await Sandbox.list({ query: { state: ['running', 'paused'] } }).nextItems()
    assert.ok(both.some((s) => s.sandboxId === sbx.sandboxId), JSON.stringify(both))
    const same = await Sandbox.connect(sbx.sandboxId)
    assert.equal(same.sandboxId, sbx.sandboxId)
    assert.equal((await same.getInfo()).state, 'running')
    assert.equal((await same.commands.run('cat /tmp/e2b/a.txt')).stdout, 'alpha\n')
    ok('pause (listed under state paused only), then Sandbox.connect resumes it and its files are there')

    step = 'kill'
    assert.equal(await Sandbox.kill(sbx.sandboxId), true)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false)
    assert.ok(!(await Sandbox.list().nextItems()).some((s) => s.sandboxId === sbx.sandboxId))
    await assert.rejects(Sandbox.connect(sbx.sandboxId))
    ok('Sandbox.kill: true, then false; gone from the list; connect fails')
  } catch (e) {
    await Sandbox.kill(sbx.sandboxId).catch(() => {})
    throw e
  }
  step = 'bad key'
  await assert.rejects(Sandbox.list({ apiKey: 'al_00000000000000000000000000000000' }).nextItems())
  ok('a wrong API key is refused')

  // AIRLOCK_TEST_KEY2 (another key of the same tenant, id AIRLOCK_TEST_KEY2_ID)
  // and AIRLOCK_TEST_ADMIN_KEY: the envd tokens a key got end with the key.
  if (process.env.AIRLOCK_TEST_KEY2) {
    step = 'revoked key'
    const key2 = process.env.AIRLOCK_TEST_KEY2
    const s2 = await Sandbox.create(TEMPLATE, { apiKey: key2, timeoutMs: 300_000 })
    try {
      assert.equal((await s2.commands.run('echo two')).stdout, 'two\n')
      const s2b = await Sandbox.connect(s2.sandboxId, { apiKey: key2 })
      assert.notEqual(s2b.envdAccessToken, s2.envdAccessToken)
      assert.equal((await s2b.commands.run('echo renewed')).stdout, 'renewed\n')
      const res = await fetch(`http://${process.env.AIRLOCK_TEST_API_ADDR}/v1/keys/${process.env.AIRLOCK_TEST_KEY2_ID}`,
        { method: 'DELETE', headers: { Authorization: `Bearer ${process.env.AIRLOCK_TEST_ADMIN_KEY}` } })
      assert.equal(res.status, 204)
      const refused = (e) => {
        assert.ok(e instanceof AuthenticationError, `${e?.constructor?.name}: ${e}`)
        return true
      }
      await assert.rejects(s2.commands.run('echo no'), refused)
      await assert.rejects(s2b.commands.run('echo no'), refused)
      await assert.rejects(s2b.files.read('/etc/hostname'), refused)
      await assert.rejects(Sandbox.connect(s2.sandboxId, { apiKey: key2 }))
      // the tenant's other key still gets a token that works
      const s2c = await Sandbox.connect(s2.sandboxId)
      assert.equal((await s2c.commands.run('echo still')).stdout, 'still\n')
      ok('a key revoked: the envd tokens it got (create and connect) are refused at once; another key connects')
    } finally {
      await Sandbox.kill(s2.sandboxId).catch(() => {})
    }
  }
  console.log('e2b suite: all passed')
}

main().catch((e) => {
  console.error(`FAILED at step "${step}":`, e)
  process.exit(1)
})
