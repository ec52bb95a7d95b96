// tests/e2e/grpc.test.mjs — a client in another language (@grpc/grpc-js + @grpc/proto-loader)
// calling gantry.v1.Router.Generate and ListModels on the router's gRPC front.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

const PROTOS = process.env.GANTRY_PROTOS;
const TARGET = process.env.GANTRY_GRPC;
const MODEL = process.env.GANTRY_MODEL || 'tiny';
const FAKE = process.env.GANTRY_ENGINE_KIND !== 'real';

const def = protoLoader.loadSync(path.join(PROTOS, 'gantry/v1/router.proto'), {
  includeDirs: [PROTOS], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
});
const gantry = grpc.loadPackageDefinition(def).gantry.v1;
const router = new gantry.Router(TARGET, grpc.credentials.createInsecure());

function generate(req, md = new grpc.Metadata()) {
  return new Promise((resolve, reject) => {
    const msgs = [];
    const call = router.Generate(req, md);
    call.on('data', (m) => msgs.push(m));
    call.on('error', reject);
    call.on('end', () => resolve(msgs));
  });
}

test('Router.ListModels', async () => {
  const r = await new Promise((res, rej) => router.ListModels({}, (e, v) => (e ? rej(e) : res(v))));
  const m = r.models.find((x) => x.id === MODEL);
  assert.ok(m, JSON.stringify(r));
  assert.ok(m.engines_ready >= 1);
  assert.ok(m.context_length > 0);
});

test('Router.Generate streams deltas then one final', async () => {
  const md = new grpc.Metadata();
  md.set('x-request-id', 'node-grpc-1');
  const msgs = await generate({
    model: MODEL,
    request: { prompt: 'def add(a, b):\n    return', max_tokens: 5, sampling: { temperature: 0 } },
  }, md);
  assert.ok(msgs.length >= 2, `messages: ${msgs.length}`);
  const finals = msgs.filter((m) => m.kind === 'final');
  assert.equal(finals.length, 1);
  assert.equal(msgs[msgs.length - 1].kind, 'final');
  const f = finals[0].final;
  assert.ok(['FINISH_REASON_STOP', 'FINISH_REASON_LENGTH'].includes(f.finish_reason), f.finish_reason);
  const tokens = msgs.filter((m) => m.kind === 'delta').reduce((n, m) => n + m.delta.token_ids.length, 0);
  assert.equal(tokens, f.usage.completion_tokens);
  if (FAKE) assert.equal(msgs.filter((m) => m.kind === 'delta').map((m) => m.delta.text).join(''), 'Hello world');
});

test('Router.Generate with a chat input', async () => {
  const msgs = await generate({
    model: MODEL,
    request: { chat: { messages: [{ role: 'user', content: 'hi' }] }, max_tokens: 4 },
  });
  assert.equal(msgs[msgs.length - 1].kind, 'final');
});

test('Router.Generate errors are gRPC statuses', async () => {
  await assert.rejects(generate({ model: 'no-such-model', request: { prompt: 'x' } }), (e) => {
    assert.equal(e.code, grpc.status.NOT_FOUND);
    return true;
  });
  await assert.rejects(generate({ model: MODEL, request: {} }), (e) => {
    assert.equal(e.code, grpc.status.INVALID_ARGUMENT);
    return true;
  });
});

test('Admin.GetLimits / SetLimits', async () => {
  const admin = new gantry.Admin(TARGET, grpc.credentials.createInsecure());
  const call = (m, req) => new Promise((res, rej) => admin[m](req, (e, v) => (e ? rej(e) : res(v))));
  const set = await call('SetLimits', { model: MODEL, max_queued: 77 });
  assert.equal(Number(set.max_queued), 77);
  const got = await call('GetLimits', { model: MODEL });
  assert.equal(Number(got.max_queued), 77);
  await call('SetLimits', { model: MODEL, max_queued: 1024 });
  admin.close();
});

async function poolInflight() {
  const r = await fetch(`${process.env.GANTRY_URL}/admin/queues?model=${MODEL}`);
  const j = await r.json();
  return j.queues.find((q) => q.tenant === null)?.inflight ?? 0;
}

test('a cancelled Router.Generate releases its slot', { skip: !FAKE && 'needs a slow scripted stream' }, async () => {
  const call = router.Generate({ model: MODEL, request: { prompt: 'SLOW', max_tokens: 500 } });
  await new Promise((resolve, reject) => {
    call.once('data', resolve);
    call.once('error', reject);
  });
  assert.equal(await poolInflight(), 1);
  call.on('error', () => {}); // CANCELLED, expected
  call.cancel();
  const t0 = Date.now();
  while ((await poolInflight()) !== 0 && Date.now() - t0 < 5000) await new Promise((r) => setTimeout(r, 20));
  assert.equal(await poolInflight(), 0);
});

test.after(() => router.close());
