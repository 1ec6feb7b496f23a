// tests/e2b/lifecycle.mjs - the unmodified e2b SDK on a sandbox that is
// paused, suspended (Airlock's suspend to the object store) and deleted:
// every envd call and every control call, each asserting the SDK's return
// value or the class of its exception (docs/E2B.md has the same table).
// Settings as suite.mjs: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY,
// E2B_TEMPLATE; AIRLOCK_TEST_API_ADDR (host:port of the api) for the one
// call the SDK has no word for: Airlock's suspend.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

const TEMPLATE = process.env.E2B_TEMPLATE || 'busybox'
let step = ''
const ok = (what) => console.log(`ok - ${what}`)

// The outcome of a call: its value, or the name of its exception's class.
async function outcome(fn) {
  try {
    const v = await fn()
    return v === undefined ? 'ok' : v
  } catch (e) {
    return e?.constructor?.name || String(e)
  }
}

async function airlock(method, path) {
  const res = await fetch(`http://${process.env.AIRLOCK_TEST_API_ADDR}${path}`,
    { method, headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}` } })
  return { status: res.status, body: await res.json().catch(() => null) }
}

// Every envd call of the SDK on sbx; pid: a process that existed (or not).
function envdCalls(sbx, pid) {
  const enc = new TextEncoder()
  return {
    'isRunning': () => sbx.isRunning(),
    'commands.run': () => sbx.commands.run('echo hi'),
    'commands.run background': () => sbx.commands.run('sleep 5', { background: true }),
    'commands.list': () => sbx.commands.list(),
    'commands.kill': () => sbx.commands.kill(pid),
    'commands.sendStdin': () => sbx.commands.sendStdin(pid, 'x\n'),
    'commands.closeStdin': () => sbx.commands.closeStdin(pid),
    'commands.connect': () => sbx.commands.connect(pid),
    'files.read': () => sbx.files.read('/etc/hostname'),
    'files.write': () => sbx.files.write('/tmp/lc.txt', 'x'),
    'files.list': () => sbx.files.list('/tmp'),
    'files.exists': () => sbx.files.exists('/etc/hostname'),
    'files.makeDir': () => sbx.files.makeDir('/tmp/lc-dir'),
    'files.remove': () => sbx.files.remove('/tmp/lc-none'),
    'files.rename': () => sbx.files.rename('/tmp/lc-a', '/tmp/lc-b'),
    'files.getInfo': () => sbx.files.getInfo('/etc/hostname'),
    'files.watchDir': () => sbx.files.watchDir('/tmp', () => {}),
    'pty.create': () => sbx.pty.create({ cols: 80, rows: 24, onData: () => {} }),
    'pty.sendInput': () => sbx.pty.sendInput(pid, enc.encode('x')),
    'pty.resize': () => sbx.pty.resize(pid, { cols: 90, rows: 20 }),
    'pty.kill': () => sbx.pty.kill(pid),
  }
}

// What every envd call gives on a sandbox E2B's proxy cannot route to
// (502): isRunning false, a stream's start SandboxNotFoundError, the rest
// TimeoutError ("likely due to sandbox timeout").
const NOT_ROUTED = {
  'isRunning': false,
  'commands.run': 'SandboxNotFoundError',
  'commands.run background': 'SandboxNotFoundError',
  'commands.list': 'TimeoutError',
  'commands.kill': 'TimeoutError',
  'commands.sendStdin': 'TimeoutError',
  'commands.closeStdin': 'TimeoutError',
  'commands.connect': 'SandboxNotFoundError',
  'files.read': 'TimeoutError',
  'files.write': 'TimeoutError',
  'files.list': 'TimeoutError',
  'files.exists': 'TimeoutError',
  'files.makeDir': 'TimeoutError',
  'files.remove': 'TimeoutError',
  'files.rename': 'TimeoutError',
  'files.getInfo': 'TimeoutError',
  'files.watchDir': 'SandboxNotFoundError',
  'pty.create': 'SandboxNotFoundError',
  'pty.sendInput': 'TimeoutError',
  'pty.resize': 'TimeoutError',
  'pty.kill': 'TimeoutError',
}

async function checkEnvd(sbx, pid, state) {
  const calls = envdCalls(sbx, pid)
  const got = {}
  for (const [name, fn] of Object.entries(calls))
    got[name] = await outcome(fn)
  assert.deepEqual(got, NOT_ROUTED, `envd calls on a ${state} sandbox`)
  ok(`${state}: every envd call as on E2B for a sandbox it cannot route to (isRunning false, ` +
    'streams SandboxNotFoundError, the rest TimeoutError)')
}

async function inList(id, states) {
  const page = await Sandbox.list({ query: { state: states } }).nextItems()
  return page.some((s) => s.sandboxId === id)
}

async function checkParked(sbx, pid, state) {
  const id = sbx.sandboxId
  await checkEnvd(sbx, pid, state)
  // none of those calls woke it
  const gi = await sbx.getInfo()
  assert.equal(gi.state, 'paused')
  const own = await airlock('GET', `/v1/sandboxes/${id}`)
  assert.equal(own.body.state, state, `Airlock's state after the envd calls: ${JSON.stringify(own.body)}`)
  assert.equal(await sbx.pause(), false, 'pause of a paused one is false')
  assert.equal(await inList(id, ['paused']), true)
  assert.equal(await inList(id, ['running']), false)
  if (state === 'paused') {
    await sbx.setTimeout(300_000)
    const left = (await sbx.getInfo()).endAt.getTime() - Date.now()
    assert.ok(left > 280_000 && left <= 305_000, `endAt ${left} ms away after setTimeout(300 s)`)
  } else {
    // Airlock's timeout takes running and paused sandboxes only (409)
    assert.equal(await outcome(() => sbx.setTimeout(300_000)), 'SandboxError')
  }
  // a suspended one is in the object store: nothing to measure, no sample
  const m = await outcome(() => sbx.getMetrics())
  assert.ok(Array.isArray(m) && m.length === (state === 'paused' ? 1 : 0), `getMetrics: ${JSON.stringify(m)}`)
  assert.equal((await airlock('GET', `/v1/sandboxes/${id}`)).body.state, state, 'still ' + state)
  ok(`${state}: getInfo state paused, pause false, listed under paused only, ` +
    `setTimeout ${state === 'paused' ? 'moves endAt' : 'SandboxError (409)'}, getMetrics ` +
    `${state === 'paused' ? 'one sample' : '[]'}, and it stays ${state}`)
  // Sandbox.connect brings it back, with what it had
  const back = await Sandbox.connect(id)
  assert.equal(await back.isRunning(), true)
  assert.equal((await back.getInfo()).state, 'running')
  assert.equal((await back.commands.run('cat /tmp/kept')).stdout, 'kept\n')
  // the old object's token works again too
  assert.equal(await sbx.isRunning(), true)
  ok(`${state}: Sandbox.connect resumes it (isRunning true, its files there)`)
}

async function main() {
  step = 'create'
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: 600_000 })
  const id = sbx.sandboxId
  try {
    assert.equal(await sbx.isRunning(), true)
    await sbx.files.write('/tmp/kept', 'kept\n')
    const bg = await sbx.commands.run('sleep 600', { background: true })
    const pid = bg.pid

    step = 'paused'
    assert.equal(await sbx.pause(), true)
    await checkParked(sbx, pid, 'paused')

    step = 'suspended'
    const s = await airlock('POST', `/v1/sandboxes/${id}/suspend`)
    assert.equal(s.status, 200, JSON.stringify(s.body))
    assert.equal(s.body.state, 'suspended')
    await checkParked(sbx, pid, 'suspended')

    step = 'deleted'
    await sbx.kill()
    await checkEnvd(sbx, pid, 'deleted')
    // computed by the SDK, no request: the same whatever the state
    assert.equal(sbx.getHost(8080), `8080-${id}.${process.env.E2B_DOMAIN}`)
    const control = {
      'getInfo': await outcome(() => sbx.getInfo()),
      'getMetrics': await outcome(() => sbx.getMetrics()),
      'setTimeout': await outcome(() => sbx.setTimeout(60_000)),
      'pause': await outcome(() => sbx.pause()),
      'Sandbox.connect': await outcome(() => Sandbox.connect(id)),
      'kill': await outcome(() => sbx.kill()),
      'listed': await inList(id, ['running', 'paused']),
    }
    assert.deepEqual(control, {
      'getInfo': 'SandboxNotFoundError',
      'getMetrics': 'SandboxNotFoundError',
      'setTimeout': 'SandboxNotFoundError',
      'pause': 'SandboxNotFoundError',
      'Sandbox.connect': 'SandboxNotFoundError',
      'kill': false,
      'listed': false,
    })
    ok('deleted: getInfo, getMetrics, setTimeout, pause and Sandbox.connect SandboxNotFoundError; ' +
      'kill false; not listed')
  } catch (e) {
    await Sandbox.kill(id).catch(() => {})
    throw e
  }

  step = 'kill parked'
  const parked = []
  try {
    for (const how of ['paused', 'suspended']) {
      const p = await Sandbox.create(TEMPLATE, { timeoutMs: 300_000 })
      parked.push(p.sandboxId)
      assert.equal(await p.betaPause(), true)
      if (how === 'suspended')
        assert.equal((await airlock('POST', `/v1/sandboxes/${p.sandboxId}/suspend`)).status, 200)
      assert.equal(await Sandbox.kill(p.sandboxId), true)
      assert.equal(await p.isRunning(), false)
      assert.equal(await outcome(() => p.getInfo()), 'SandboxNotFoundError')
      assert.equal(await Sandbox.kill(p.sandboxId), false)
      assert.equal((await airlock('GET', `/v1/sandboxes/${p.sandboxId}`)).status, 404)
    }
    ok('kill of a paused (betaPause) and of a suspended sandbox: true, then isRunning false, ' +
      'getInfo SandboxNotFoundError, kill false')
  } finally {
    for (const p of parked)
      await Sandbox.kill(p).catch(() => {})
  }
  console.log('e2b lifecycle: all passed')
}

main().catch((e) => {
  console.error(`FAILED at step "${step}":`, e)
  process.exit(1)
})
