// s3server.js - a real S3-compatible server for the object store tests:
// s3rver (from tests/s3/node_modules, see setup.sh) on 127.0.0.1, a free
// port, a fresh temporary directory, with the buckets named on the command
// line (default "airlock") created. Prints the port on one line once it
// listens; runs until stdin closes or SIGTERM, then removes its directory.
// Credentials: s3rver's built-in account, access key S3RVER, secret S3RVER;
// it checks every request's Signature V4.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const S3rver = require('s3rver');

const buckets = process.argv.length > 2 ? process.argv.slice(2) : ['airlock'];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'airlock-s3rver-'));
const server = new S3rver({
  address: '127.0.0.1',
  port: 0,
  silent: true,
  directory: dir,
  configureBuckets: buckets.map((name) => ({ name, configs: [] })),
});

let stopping = false;
function stop() {
  if (stopping) return;
  stopping = true;
  server.close().catch(() => {}).finally(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  });
}

server.run().then(({ port }) => {
  process.stdout.write(`${port}\n`);
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
