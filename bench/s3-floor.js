// s3-floor.js - the floor of a suspend's upload and a restore's download
// on an S3-compatible store: the official AWS client (@aws-sdk/client-s3,
// from tests/s3/node_modules) reads every object under a prefix, side by
// side, then writes the same bytes back under floor/<key>, side by side,
// and deletes those. Prints one line of JSON: {"get_ms", "put_ms", "bytes"}.
// Used by bench/suspend --store s3.
//
//   node bench/s3-floor.js PORT PREFIX   (credentials in AWS_ACCESS_KEY_ID /
//                                         AWS_SECRET_ACCESS_KEY, bucket airlock)
'use strict';
const {
  S3Client, ListObjectsV2Command, GetObjectCommand, PutObjectCommand, DeleteObjectCommand,
} = require('@aws-sdk/client-s3');

const [port, prefix] = process.argv.slice(2);
const Bucket = 'airlock';
const client = new S3Client({
  endpoint: `http://127.0.0.1:${port}`,
  region: 'us-east-1',
  forcePathStyle: true,
  credentials: {
    accessKeyId: process.env.AWS_ACCESS_KEY_ID,
    secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY,
  },
});

async function main() {
  const list = await client.send(new ListObjectsV2Command({ Bucket, Prefix: prefix }));
  const keys = (list.Contents || []).map((o) => o.Key);
  let t0 = process.hrtime.bigint();
  const bodies = await Promise.all(keys.map(async (Key) => {
    const r = await client.send(new GetObjectCommand({ Bucket, Key }));
    return Buffer.from(await r.Body.transformToByteArray());
  }));
  const getMs = Number(process.hrtime.bigint() - t0) / 1e6;
  t0 = process.hrtime.bigint();
  await Promise.all(keys.map((Key, i) => client.send(new PutObjectCommand({
    Bucket, Key: `floor/${Key}`, Body: bodies[i],
  }))));
  const putMs = Number(process.hrtime.bigint() - t0) / 1e6;
  await Promise.all(keys.map((Key) => client.send(new DeleteObjectCommand({
    Bucket, Key: `floor/${Key}`,
  }))));
  const bytes = bodies.reduce((a, b) => a + b.length, 0);
  console.log(JSON.stringify({ get_ms: getMs, put_ms: putMs, bytes, objects: keys.length }));
}

main().catch((e) => { console.error(e); process.exit(1); });
