// tests/e2b/code.mjs - the unmodified @e2b/code-interpreter SDK (2.8.0)
// against Airlock's E2B API. Settings only: E2B_API_URL=<api>/e2b,
// E2B_SANDBOX_URL=<api>/e2b/envd, E2B_API_KEY=<an Airlock key>. The default
// template (code-interpreter-v1) is Airlock's code-interpreter. Every step
// asserts its result; the first failure exits non-zero.
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

let step = ''
const ok = (what) => console.log(`ok - ${what}`)

async function main() {
  step = 'create'
  const sbx = await Sandbox.create({ timeoutMs: 600_000 })
  assert.match(sbx.sandboxId, /^sb-/)
  ok(`Sandbox.create() (default template) -> ${sbx.sandboxId}`)
  try {
    step = 'runCode state and callbacks'
    await sbx.runCode('x = 41')
    const out = [], err = [], res = [], errs = []
    let ex = await sbx.runCode('import sys\nprint("hello")\nprint("warn", file=sys.stderr)\nx + 1', {
      onStdout: (m) => out.push(m.line), onStderr: (m) => err.push(m.line),
      onResult: (r) => res.push(r), onError: (e) => errs.push(e),
    })
    assert.equal(ex.text, '42')
    assert.deepEqual(ex.logs.stdout, ['hello\n'])
    assert.deepEqual(ex.logs.stderr, ['warn\n'])
    assert.deepEqual(out, ['hello\n'])
    assert.deepEqual(err, ['warn\n'])
    assert.equal(res.length, 1)
    assert.equal(res[0].isMainResult, true)
    assert.equal(errs.length, 0)
    assert.ok(ex.executionCount >= 2)
    ok('runCode: state across cells, onStdout/onStderr/onResult, executionCount')

    step = 'error'
    const seen = []
    ex = await sbx.runCode('raise ValueError("bad value")', { onError: (e) => seen.push(e) })
    assert.equal(ex.error.name, 'ValueError')
    assert.equal(ex.error.value, 'bad value')
    assert.match(ex.error.traceback, /ValueError/)
    assert.equal(seen.length, 1)
    ok('runCode: an error with name, value, traceback; onError')

    step = 'chart'
    ex = await sbx.runCode('import matplotlib.pyplot as plt\nplt.bar(["a", "b"], [3, 5])\nplt.title("t")\nplt.show()')
    const pngs = ex.results.filter((r) => r.png)
    assert.equal(pngs.length, 1)
    const png = Buffer.from(pngs[0].png, 'base64')
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
    ok(`runCode: a matplotlib chart as a PNG result (${png.length} bytes)`)

    step = 'dataframe'
    ex = await sbx.runCode('import pandas as pd\npd.DataFrame({"city": ["Oslo", "Lima"], "n": [1, 2]})')
    assert.match(ex.results[0].html, /<table/)
    assert.match(ex.results[0].html, /Oslo/)
    assert.match(ex.text, /Lima/)
    ok('runCode: a pandas DataFrame as HTML')

    step = 'envs'
    ex = await sbx.runCode('import os\nos.environ["ONLY_NOW"]', { envs: { ONLY_NOW: 'yes' } })
    assert.equal(ex.text, "'yes'")
    ex = await sbx.runCode('import os\nos.environ.get("ONLY_NOW", "gone")')
    assert.equal(ex.text, "'gone'")
    ok('runCode: envs for one cell')

    step = 'language'
    ex = await sbx.runCode('const a = [1, 2, 3]; a.map((v) => v * 2)', { language: 'javascript' })
    assert.equal(ex.text, '[ 2, 4, 6 ]')
    ex = await sbx.runCode('echo "$((6 * 7))"', { language: 'bash' })
    assert.deepEqual(ex.logs.stdout, ['42\n'])
    ok('runCode: language javascript and bash')

    step = 'contexts'
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    assert.equal(ctx.cwd, '/tmp')
    assert.equal(ctx.language, 'python')
    ex = await sbx.runCode('import os\nos.getcwd()', { context: ctx })
    assert.equal(ex.text, "'/tmp'")
    await sbx.runCode('in_ctx = 1', { context: ctx })
    ex = await sbx.runCode('"in_ctx" in globals()')
    assert.equal(ex.text, 'False')
    let list = await sbx.listCodeContexts()
    assert.ok(list.some((c) => c.id === ctx.id))
    await sbx.restartCodeContext(ctx)
    ex = await sbx.runCode('"in_ctx" in globals()', { context: ctx })
    assert.equal(ex.text, 'False')
    await sbx.removeCodeContext(ctx.id)
    list = await sbx.listCodeContexts()
    assert.ok(!list.some((c) => c.id === ctx.id))
    const jsctx = await sbx.createCodeContext({ language: 'javascript' })
    await sbx.runCode('var kept = "js"', { context: jsctx })
    ex = await sbx.runCode('kept', { context: jsctx })
    assert.equal(ex.text, "'js'")
    ok('createCodeContext/listCodeContexts/restartCodeContext/removeCodeContext')

    step = 'timeoutMs'
    await sbx.runCode('survivor = "yes"')
    const t0 = Date.now()
    await assert.rejects(sbx.runCode('while True:\n    pass', { timeoutMs: 2000 }), (e) => {
      assert.match(`${e}`, /timed out|timeout/i)
      return true
    })
    assert.ok(Date.now() - t0 < 20000)
    // the kernel was interrupted (the client went away) and kept its state
    ex = await sbx.runCode('survivor')
    assert.equal(ex.text, "'yes'")
    ok('runCode timeoutMs: the cell is interrupted, the context usable')

    step = 'commands beside code'
    const r = await sbx.commands.run('echo from-envd')
    assert.equal(r.stdout, 'from-envd\n')
    ok('the base SDK beside it: commands.run')
  } finally {
    step = 'kill'
    await sbx.kill()
  }
  ok('kill')
  console.log('code suite: all passed')
}

main().catch((e) => {
  console.error(`FAILED at step "${step}":`, e)
  process.exit(1)
})
