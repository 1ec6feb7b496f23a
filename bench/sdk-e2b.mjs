// bench/sdk-e2b.mjs - create -> commands.run("true") -> kill through the
// unmodified e2b SDK (tests/e2b/node_modules; `sh tests/e2b/setup.sh`
// installs it) against Airlock's E2B API, N times one after another.
// Env: AIRLOCK_E2B_API_URL (<api>/e2b), AIRLOCK_E2B_SANDBOX_URL
// (<api>/e2b/envd), AIRLOCK_E2B_KEY (an Airlock API key), AIRLOCK_E2B_N
// (default 10), AIRLOCK_E2B_TEMPLATE (default busybox).
// Prints one JSON line: {"ms":[per-iteration wall ms]}. Asserts nothing
// about speed; a failed step exits non-zero.
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const require = createRequire(path.join(here, '..', 'tests', 'e2b', 'package.json'))
const { Sandbox } = require('e2b')

const env = process.env
for (const k of ['AIRLOCK_E2B_API_URL', 'AIRLOCK_E2B_SANDBOX_URL', 'AIRLOCK_E2B_KEY']) {
  if (!env[k]) {
    console.error(`bench/sdk-e2b.mjs: ${k} is not set`)
    process.exit(2)
  }
}
const n = Number(env.AIRLOCK_E2B_N || 10)
if (!Number.isInteger(n) || n < 1) {
  console.error('bench/sdk-e2b.mjs: AIRLOCK_E2B_N must be a positive integer')
  process.exit(2)
}
const opts = {
  apiUrl: env.AIRLOCK_E2B_API_URL,
  sandboxUrl: env.AIRLOCK_E2B_SANDBOX_URL,
  apiKey: env.AIRLOCK_E2B_KEY,
}
const template = env.AIRLOCK_E2B_TEMPLATE || 'busybox'

const ms = []
for (let i = 0; i < n; i++) {
  const t0 = performance.now()
  const sbx = await Sandbox.create(template, opts)
  try {
    const r = await sbx.commands.run('true')
    if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode}`)
  } finally {
    await sbx.kill()
  }
  ms.push(Math.round((performance.now() - t0) * 100) / 100)
}
console.log(JSON.stringify({ ms }))
