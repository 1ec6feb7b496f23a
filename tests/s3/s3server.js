// s3server.js - a real S3-compatible server for the object store tests:
// s3rver (from tests/s3/node_modules, see setup.sh) with a fresh temporary
// directory and the buckets named on the command line (default "airlock"),
// behind a front on 127.0.0.1 and a free port that checks every request's
// AWS Signature V4 with the AWS SDK's own signer (@smithy/signature-v4):
// s3rver checks only that the access key exists, not the signature. A
// request whose signature or payload hash does not match is answered 403
// SignatureDoesNotMatch / 400 XAmzContentSHA256Mismatch, as S3 does; the
// rest goes to s3rver unchanged. Prints the front's port on one line once
// it listens; runs until stdin closes or SIGTERM, then removes its
// directory. Credentials: s3rver's built-in account, S3RVER / S3RVER.
//
// AIRLOCK_S3_NO_CHECK=1 prints s3rver's own port instead (no front), for
// throughput measurements without the front's buffering.
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const S3rver = require('s3rver');
const { SignatureV4 } = require('@smithy/signature-v4');
const { Hash } = require('@smithy/hash-node');
const { HttpRequest } = require('@smithy/protocol-http');

const SECRETS = { S3RVER: 'S3RVER' };
const REGION = 'us-east-1';
const buckets = process.argv.length > 2 ? process.argv.slice(2) : ['airlock'];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'airlock-s3rver-'));
const server = new S3rver({
  address: '127.0.0.1',
  port: 0,
  silent: true,
  directory: dir,
  configureBuckets: buckets.map((name) => ({ name, configs: [] })),
});
let front = null;

function s3error(res, status, code, message) {
  const body = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code>`
    + `<Message>${message}</Message></Error>`;
  res.writeHead(status, { 'Content-Type': 'application/xml', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

// null when the request's Authorization is the one the AWS SDK computes for
// it, else why not
async function checkSignature(req, body) {
  const auth = req.headers.authorization || '';
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/.exec(auth);
  if (!m) return `not a Signature V4 Authorization header: ${auth}`;
  const [, ak, , region, service, signedHeaders] = m;
  if (!(ak in SECRETS)) return `unknown access key ${ak}`;
  if (region !== REGION || service !== 's3') return `credential scope ${region}/${service}, not ${REGION}/s3`;
  const date = req.headers['x-amz-date'] || '';
  const d = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(date);
  if (!d) return `bad x-amz-date ${date}`;
  const headers = {};
  for (const name of signedHeaders.split(';')) {
    if (!(name in req.headers)) return `signed header ${name} missing`;
    headers[name] = req.headers[name];
  }
  const url = new URL(req.url, 'http://placeholder');
  const query = {};
  for (const [k, v] of url.searchParams) {
    if (k in query) query[k] = [].concat(query[k], v);
    else query[k] = v;
  }
  const signer = new SignatureV4({
    credentials: { accessKeyId: ak, secretAccessKey: SECRETS[ak] },
    region, service, sha256: Hash.bind(null, 'sha256'), uriEscapePath: false,
  });
  const signed = await signer.sign(new HttpRequest({
    method: req.method, protocol: 'http:', hostname: (req.headers.host || '').split(':')[0],
    path: url.pathname, query, headers, body,
  }), {
    signingDate: new Date(Date.UTC(+d[1], +d[2] - 1, +d[3], +d[4], +d[5], +d[6])),
    signingRegion: region, signingService: service,
  });
  return signed.headers.authorization === auth ? null
    : `signature mismatch: got ${auth}, want ${signed.headers.authorization}`;
}

function startFront(backendPort) {
  front = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks);
      try {
        const why = await checkSignature(req, body);
        if (why) {
          process.stderr.write(`s3server: ${req.method} ${req.url}: ${why}\n`);
          s3error(res, 403, 'SignatureDoesNotMatch', 'The request signature we calculated does not match the signature you provided.');
          return;
        }
        const claimed = req.headers['x-amz-content-sha256'] || '';
        if (/^[0-9a-f]{64}$/.test(claimed)
            && crypto.createHash('sha256').update(body).digest('hex') !== claimed) {
          s3error(res, 400, 'XAmzContentSHA256Mismatch', 'The provided x-amz-content-sha256 header does not match what was computed.');
          return;
        }
      } catch (e) {
        s3error(res, 500, 'InternalError', `front: ${e.message}`);
        return;
      }
      const headers = { ...req.headers };
      delete headers['transfer-encoding'];
      headers['content-length'] = String(body.length);
      const up = http.request({
        host: '127.0.0.1', port: backendPort, method: req.method, path: req.url, headers,
      }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
      });
      up.on('error', (e) => s3error(res, 502, 'BadGateway', e.message));
      up.end(body);
    });
  });
  return new Promise((resolve) => front.listen(0, '127.0.0.1', () => resolve(front.address().port)));
}

let stopping = false;
function stop() {
  if (stopping) return;
  stopping = true;
  if (front) front.close();
  server.close().catch(() => {}).finally(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  });
}

server.run().then(async ({ port }) => {
  const shown = process.env.AIRLOCK_S3_NO_CHECK === '1' ? port : await startFront(port);
  process.stdout.write(`${shown}\n`);
  process.stdin.on('end', stop);
  process.stdin.on('close', stop);
  process.stdin.resume();
}, (e) => {
  console.error(`s3server: ${e.message}`);
  fs.rmSync(dir, { recursive: true, force: true });
  process.exit(1);
});
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
