// tests/e2e/grpc_embed.test.mjs — gantry.v1.Router.Embed on the router's gRPC front through
// @grpc/grpc-js (run.sh real, GANTRY_ENGINE_TASK=embed): the vectors equal what POST
// /v1/embeddings returns for the same input; bad input is INVALID_ARGUMENT naming the field in
// "gantry-param", with the HTTP route's messages (one validation: oa_embed_check).
// UNAUTHENTICATED needs keys in Redis: tests/integration/test_router_limits.c.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

const URL = process.env.GANTRY_URL;
const MODEL = process.env.GANTRY_MODEL || 'tiny';
const EMBED = !!process.env.GANTRY_EMBED_GGUF;
const PROTOS = process.env.GANTRY_PROTOS;

const def = protoLoader.loadSync(path.join(PROTOS, 'gantry/v1/router.proto'), {
  includeDirs: [PROTOS], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
});
const router = new (grpc.loadPackageDefinition(def).gantry.v1.Router)(process.env.GANTRY_GRPC,
  grpc.credentials.createInsecure());
// err.metadata: the status's trailing metadata
const embed = (req) => new Promise((resolve) => router.Embed(req, (err, r) => resolve({ err, r })));
async function http(body) {
  const r = await fetch(`${URL}/v1/embeddings`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL, encoding_format: 'float', ...body }),
  });
  return { status: r.status, body: await r.json() };
}
const maxDiff = (a, b) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);

test('Router.Embed: texts and token ids equal the HTTP route', { skip: !EMBED }, async () => {
  const texts = ['alpha beta', 'a longer sentence about something else'];
  const g = await embed({ model: MODEL, request: { texts, dimensions: 64 } });
  assert.ifError(g.err);
  const h = await http({ input: texts, dimensions: 64 });
  assert.equal(h.status, 200);
  assert.equal(g.r.data.length, 2);
  assert.equal(g.r.prompt_tokens, h.body.usage.prompt_tokens);
  for (let i = 0; i < 2; i++) {
    assert.equal(g.r.data[i].values.length, 64);
    // HTTP prints 9 significant digits
    assert.ok(maxDiff(g.r.data[i].values, h.body.data[i].embedding) < 1e-7, `input ${i}`);
  }
  const gt = await embed({ model: MODEL, request: { tokens: [{ ids: [11, 22, 33] }, { ids: [44, 55] }] } });
  assert.ifError(gt.err);
  const ht = await http({ input: [[11, 22, 33], [44, 55]] });
  for (let i = 0; i < 2; i++) assert.ok(maxDiff(gt.r.data[i].values, ht.body.data[i].embedding) < 1e-7);
});

test('Router.Embed: bad input is INVALID_ARGUMENT naming the field, as HTTP', { skip: !EMBED }, async () => {
  for (const [req, body, param] of [
    [{ texts: [] }, { input: [] }, 'input'],
    [{ texts: ['x', ''] }, { input: ['x', ''] }, 'input'],
    [{ tokens: [{ ids: [] }] }, { input: [[]] }, 'input'],
    [{ texts: Array(2049).fill('x') }, { input: Array(2049).fill('x') }, 'input'],
    [{ texts: ['x'], dimensions: (1 << 20) + 1 }, { input: 'x', dimensions: (1 << 20) + 1 }, 'dimensions'],
  ]) {
    const g = await embed({ model: MODEL, request: req });
    assert.equal(g.err?.code, grpc.status.INVALID_ARGUMENT, JSON.stringify(req).slice(0, 80));
    assert.deepEqual(g.err.metadata.get('gantry-param'), [param]);
    const h = await http(body);
    assert.equal(h.status, 400);
    assert.equal(h.body.error.param, param);
    assert.equal(g.err.details, h.body.error.message);
  }
  const both = await embed({ model: MODEL, request: { texts: ['x'], tokens: [{ ids: [1] }] } });
  assert.equal(both.err?.code, grpc.status.INVALID_ARGUMENT);
  const none = await embed({ model: MODEL });
  assert.equal(none.err?.code, grpc.status.INVALID_ARGUMENT);
  const nomodel = await embed({ model: '', request: { texts: ['x'] } });
  assert.equal(nomodel.err?.code, grpc.status.INVALID_ARGUMENT);
  // the engine's own checks come back as statuses too: larger than the model's size
  const big = await embed({ model: MODEL, request: { texts: ['x'], dimensions: 257 } });
  assert.equal(big.err?.code, grpc.status.INVALID_ARGUMENT, String(big.err));
  const unknown = await embed({ model: 'no-such-model', request: { texts: ['x'] } });
  assert.equal(unknown.err?.code, grpc.status.NOT_FOUND, String(unknown.err));
});
