// interop.js - Airlock's s3 driver (through build/bin/airlock-objstore-tool)
// and the official AWS JavaScript client (@aws-sdk/client-s3) against the
// same real S3-compatible server (s3rver, started by run.sh, port in
// AIRLOCK_S3_PORT, credentials in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY).
//
//  1. the driver writes objects (a 40 MiB multipart one in 8 MiB parts,
//     nested prefixes, an empty one); the AWS client lists them (pages of 2)
//     and reads each back: same keys, sizes and sha256 byte for byte, and
//     the x-amz-meta-sha256 the driver stored
//  2. the driver lists them in pages of 2 too, in key order
//  3. an object the AWS client wrote (with its sha256 as metadata) is read
//     and HEADed by the driver; one without that metadata is refused
//  4. corruption: the AWS client overwrites an object with other bytes but
//     the old metadata: the driver's get fails with EBADMSG naming the key
//  5. errors: 404 ENOENT, a wrong secret EACCES with S3's error code, a
//     closed port EHOSTUNREACH and a silent server ETIMEDOUT, each within
//     its bound; 503 SlowDown twice then success is retried through
'use strict';
const assert = require('assert');
const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const net = require('net');
const os = require('os');
const path = require('path');
const { spawnSync, spawn } = require('child_process');
const {
  S3Client, ListObjectsV2Command, GetObjectCommand, HeadObjectCommand, PutObjectCommand,
} = require('@aws-sdk/client-s3');

const port = process.env.AIRLOCK_S3_PORT;
const tool = path.join(process.env.AIRLOCK_BIN, 'airlock-objstore-tool');
const url = `s3://airlock?endpoint=http://127.0.0.1:${port}&region=us-east-1&path_style=1`;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'airlock-interop-'));
const client = new S3Client({
  endpoint: `http://127.0.0.1:${port}`,
  region: 'us-east-1',
  forcePathStyle: true,
  credentials: {
    accessKeyId: process.env.AWS_ACCESS_KEY_ID,
    secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY,
  },
});

const sha256 = (b) => crypto.createHash('sha256').update(b).digest('hex');

// the tool, synchronously (for the servers in this process: asynchronously)
function runTool(args, env = {}) {
  const r = spawnSync(tool, args, { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}
function runToolAsync(args, env = {}) {
  return new Promise((resolve) => {
    const p = spawn(tool, args, { env: { ...process.env, ...env } });
    let out = '', err = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    p.on('close', (code) => resolve({ code, out, err }));
  });
}
const errnoOf = (r) => (r.err.match(/errno (\w+)\s*$/) || [])[1];

async function body(key) {
  const r = await client.send(new GetObjectCommand({ Bucket: 'airlock', Key: key }));
  return Buffer.from(await r.Body.transformToByteArray());
}

let checks = 0;
function ok(cond, what) {
  assert.ok(cond, what);
  checks++;
}

async function main() {
  // 1. written by the driver
  const objs = {
    'interop/a': crypto.randomBytes(1000),
    'interop/empty': Buffer.alloc(0),
    'interop/nested/c': crypto.randomBytes(3 << 20),
    'interop/nested/deep/b': crypto.randomBytes(77777),
    'interop/big/blob': crypto.randomBytes(40 << 20),
  };
  for (const [key, data] of Object.entries(objs)) {
    const f = path.join(tmp, 'in');
    fs.writeFileSync(f, data);
    const r = runTool(['put', url, key, f],
      { OBJSTORE_PART_SIZE: String(8 << 20), OBJSTORE_PARALLEL: '4' });
    ok(r.code === 0, `put ${key}: ${r.err}`);
    ok(r.out.split(' ')[1] === sha256(data), `put ${key} digest`);
  }
  const listed = {};
  let token;
  let pages = 0;
  do {
    const r = await client.send(new ListObjectsV2Command({
      Bucket: 'airlock', Prefix: 'interop/', MaxKeys: 2, ContinuationToken: token,
    }));
    for (const c of r.Contents || []) listed[c.Key] = c.Size;
    token = r.IsTruncated ? r.NextContinuationToken : undefined;
    pages++;
  } while (token);
  ok(pages >= 3, 'the AWS client listed in several pages');
  assert.deepStrictEqual(Object.keys(listed).sort(), Object.keys(objs).sort());
  for (const [key, data] of Object.entries(objs)) {
    ok(listed[key] === data.length, `size of ${key} as listed`);
    const got = await body(key);
    ok(got.length === data.length && sha256(got) === sha256(data), `bytes of ${key}`);
    const h = await client.send(new HeadObjectCommand({ Bucket: 'airlock', Key: key }));
    ok(h.Metadata.sha256 === sha256(data), `x-amz-meta-sha256 of ${key}`);
  }
  // 2. the driver's own list, in pages of 2
  {
    const r = runTool(['ls', `${url}&max_keys=2`, 'interop/']);
    ok(r.code === 0, `ls: ${r.err}`);
    const want = Object.keys(objs).sort().map((k) => `${k} ${objs[k].length}`).join('\n') + '\n';
    ok(r.out === want, `ls output:\n${r.out}`);
  }

  // 3. written by the AWS client
  {
    const data = crypto.randomBytes(5 << 20);
    await client.send(new PutObjectCommand({
      Bucket: 'airlock', Key: 'interop/from-aws/x', Body: data,
      Metadata: { sha256: sha256(data) },
    }));
    const f = path.join(tmp, 'out');
    const r = runTool(['get', url, 'interop/from-aws/x', f]);
    ok(r.code === 0, `get of the AWS client's object: ${r.err}`);
    ok(sha256(fs.readFileSync(f)) === sha256(data), 'its bytes');
    const h = runTool(['head', url, 'interop/from-aws/x']);
    ok(h.code === 0 && h.out.trim() === `${data.length} ${sha256(data)}`, `head: ${h.out}`);
    await client.send(new PutObjectCommand({
      Bucket: 'airlock', Key: 'interop/from-aws/nosum', Body: data.subarray(0, 100),
    }));
    const n = runTool(['get', url, 'interop/from-aws/nosum', f]);
    ok(n.code === 1 && errnoOf(n) === 'EBADMSG' && /no stored sha256/.test(n.err),
      `an object without x-amz-meta-sha256: ${n.err}`);
  }

  // 4. corrupted behind the driver's back
  {
    const key = 'interop/nested/c';
    const other = crypto.randomBytes(objs[key].length);
    await client.send(new PutObjectCommand({
      Bucket: 'airlock', Key: key, Body: other, Metadata: { sha256: sha256(objs[key]) },
    }));
    const r = runTool(['get', url, key, path.join(tmp, 'out')]);
    ok(r.code === 1 && errnoOf(r) === 'EBADMSG' && r.err.includes(key) &&
       r.err.includes('checksum mismatch'), `corrupted get: ${r.err}`);
  }

  // 5. errors
  {
    const f = path.join(tmp, 'out');
    let r = runTool(['get', url, 'interop/none', f]);
    ok(r.code === 1 && errnoOf(r) === 'ENOENT', `404: ${r.err}`);
    r = runTool(['head', url, 'interop/none']);
    ok(r.code === 1 && errnoOf(r) === 'ENOENT', `404 on HEAD: ${r.err}`);
    r = runTool(['rm', url, 'interop/none']);
    ok(r.code === 0, `delete of an absent key: ${r.err}`);
    r = runTool(['get', url, 'interop/a', f], { AWS_SECRET_ACCESS_KEY: 'wrong' });
    ok(r.code === 1 && errnoOf(r) === 'EACCES' && /SignatureDoesNotMatch/.test(r.err),
      `wrong secret (exit ${r.code}, ${r.out}): ${r.err}`);

    // a closed port: refused at once, retried 4 times with backoff
    const closed = await new Promise((res) => {
      const s = net.createServer().listen(0, '127.0.0.1', () => {
        const p = s.address().port;
        s.close(() => res(p));
      });
    });
    let t0 = Date.now();
    r = runTool(['get', `s3://airlock?endpoint=http://127.0.0.1:${closed}`, 'interop/a', f],
      { OBJSTORE_TIMEOUT_MS: '2000' });
    let dt = Date.now() - t0;
    ok(r.code === 1 && errnoOf(r) === 'EHOSTUNREACH' && dt < 5000,
      `closed port (${dt} ms): ${r.err}`);

    // a server that accepts and never answers: each try ends at the timeout
    const held = [];
    const silent = net.createServer((c) => held.push(c));
    await new Promise((res) => silent.listen(0, '127.0.0.1', res));
    t0 = Date.now();
    r = await runToolAsync(['get', `s3://airlock?endpoint=http://127.0.0.1:${silent.address().port}`,
      'interop/a', f], { OBJSTORE_TIMEOUT_MS: '700', OBJSTORE_RETRIES: '1' });
    dt = Date.now() - t0;
    ok(r.code === 1 && errnoOf(r) === 'ETIMEDOUT' && dt >= 1400 && dt < 4000,
      `silent server (${dt} ms): ${r.err}`);
    held.forEach((c) => c.destroy());
    silent.close();

    // 503 SlowDown twice, then the object: retried through
    let n = 0;
    const hello = Buffer.from('hello');
    const flaky = http.createServer((req, res) => {
      n++;
      if (n <= 2) {
        res.writeHead(503, { 'Content-Type': 'application/xml' });
        res.end('<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>');
        return;
      }
      res.writeHead(200, { 'Content-Length': '5', 'x-amz-meta-sha256': sha256(hello) });
      res.end(hello);
    });
    await new Promise((res) => flaky.listen(0, '127.0.0.1', res));
    r = await runToolAsync(['get', `s3://airlock?endpoint=http://127.0.0.1:${flaky.address().port}`,
      'k', f]);
    ok(r.code === 0 && n === 3 && fs.readFileSync(f).equals(hello),
      `503 twice then 200 (${n} requests): ${r.err}`);
    // and always 503: the error names the code after retries + 1 tries
    n = -100;
    r = await runToolAsync(['get', `s3://airlock?endpoint=http://127.0.0.1:${flaky.address().port}`,
      'k', f], { OBJSTORE_RETRIES: '2' });
    ok(r.code === 1 && errnoOf(r) === 'EHOSTUNREACH' && /503 SlowDown/.test(r.err) && n === -97,
      `503 for ever (${n + 100} requests): ${r.err}`);
    flaky.close();
  }
  console.log(`interop: ok (${checks} checks)`);
}

main().then(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
  process.exit(0);
}, (e) => {
  console.error(`interop: FAIL: ${e.message}`);
  fs.rmSync(tmp, { recursive: true, force: true });
  process.exit(1);
});
