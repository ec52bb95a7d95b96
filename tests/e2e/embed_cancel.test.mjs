// tests/e2e/embed_cancel.test.mjs — a cancelled Embed call stops its work on the engine (run.sh real
// embed_cancel.test.mjs with GANTRY_ENGINE_TASK=embed, alone on its stack: it reads the engine-wide
// running / waiting gauges). A large batch (64 inputs of 1000 token ids, about a minute of CPU work
// on qwen3-tiny) three ways: its HTTP client disconnects; it goes straight to the engine with a
// short gRPC deadline; it goes to the router's Router.Embed with a short deadline. Each time the
// engine must drop the inputs still waiting or running (cancelled inputs counted in
// gantry_engine_request_success_total{finished_reason="cancelled"}, then 0 running and 0 waiting,
// within a bound far below the batch's compute time; the deadline case logs one line naming its
// status), and a following request must be served at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';
import OpenAI from 'openai';

const URL = process.env.GANTRY_URL;
const MODEL = process.env.GANTRY_MODEL || 'tiny';
const EMBED = !!process.env.GANTRY_EMBED_GGUF;
const METRICS = process.env.GANTRY_ENGINE_METRICS;
const ENGINE = process.env.GANTRY_ENGINE_GRPC;
const LOG = process.env.GANTRY_ENGINE_LOG;
const SKIP = !EMBED || !METRICS || !ENGINE;
const client = new OpenAI({ baseURL: `${URL}/v1`, apiKey: 'none', maxRetries: 0 });

const N_INPUTS = 64, LEN = 1000;
const BOUND_MS = 8000; // one step (512 tokens) is well under this; the whole batch takes many times it
const bigInput = () => Array.from({ length: N_INPUTS }, (_, i) =>
  Array.from({ length: LEN }, (_, k) => 100 + ((i * 7919 + k * 31) % 900)));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function metrics() {
  const t = await (await fetch(METRICS)).text();
  const val = (re) => {
    const m = t.match(re);
    return m ? Number(m[1]) : 0;
  };
  return {
    running: val(/^gantry_engine_requests_running(?:\{[^}]*\})? (\S+)$/m),
    waiting: val(/^gantry_engine_requests_waiting(?:\{[^}]*\})? (\S+)$/m),
    cancelled: val(/^gantry_engine_request_success_total\{[^}]*finished_reason="cancelled"[^}]*\} (\S+)$/m),
  };
}

// polls until pred(metrics) holds; returns the milliseconds it took, or Infinity past limitMs
async function until(pred, limitMs) {
  const t0 = Date.now();
  while (Date.now() - t0 < limitMs) {
    if (pred(await metrics())) return Date.now() - t0;
    await sleep(50);
  }
  return Infinity;
}

async function idleAndServing(before, label) {
  // the cancelled inputs counted (the call may still be on its way into the scheduler when the
  // client sees its status), then nothing left running or waiting
  const ms = await until((m) => m.cancelled > before.cancelled && m.running === 0 && m.waiting === 0, BOUND_MS);
  assert.ok(ms < BOUND_MS, `${label}: after ${BOUND_MS} ms no input was cancelled or the engine still computes ` +
    `the batch (${JSON.stringify(await metrics())}, before ${JSON.stringify(before)})`);
  const t0 = Date.now();
  const r = await client.embeddings.create({ model: MODEL, input: 'after the cancel', encoding_format: 'float' });
  assert.equal(r.data.length, 1);
  assert.ok(Date.now() - t0 < 2000, `${label}: the next request took ${Date.now() - t0} ms`);
  const after = await metrics();
  assert.equal(after.running, 0);
  assert.equal(after.waiting, 0);
}

test('embed cancel: the HTTP client disconnects during a large batch', { skip: SKIP }, async () => {
  const before = await metrics();
  const ac = new AbortController();
  const p = fetch(`${URL}/v1/embeddings`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ac.signal,
    body: JSON.stringify({ model: MODEL, input: bigInput(), encoding_format: 'float' }),
  }).catch((e) => e);
  // the batch reached the scheduler
  assert.ok(await until((m) => m.running > 0, 30000) < 30000, 'the batch never ran');
  ac.abort();
  assert.equal((await p).name, 'AbortError');
  await idleAndServing(before, 'disconnect');
});

test('embed cancel: a deadline on the engine\'s Embed call', { skip: SKIP }, async () => {
  const PROTOS = process.env.GANTRY_PROTOS;
  const def = protoLoader.loadSync(path.join(PROTOS, 'gantry/v1/engine.proto'), {
    includeDirs: [PROTOS], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
  });
  const engine = new (grpc.loadPackageDefinition(def).gantry.v1.Engine)(ENGINE, grpc.credentials.createInsecure());
  const before = await metrics();
  const md = new grpc.Metadata();
  md.set('x-request-id', 'embed-deadline-1');
  const err = await new Promise((resolve) => engine.Embed(
    { tokens: bigInput().map((ids) => ({ ids })), request_id: 'embed-deadline-1' }, md,
    { deadline: Date.now() + 1500 }, (e) => resolve(e)));
  assert.ok(err, 'the batch finished within its deadline: make it larger');
  assert.equal(err.code, grpc.status.DEADLINE_EXCEEDED, String(err));
  await idleAndServing(before, 'deadline');
  if (LOG) {
    const log = fs.readFileSync(LOG, 'utf8');
    assert.match(log, /request_id=embed-deadline-1 embed cancelled code=DEADLINE_EXCEEDED/);
  }
  engine.close();
});

test('embed cancel: a deadline on the router\'s Router.Embed', { skip: SKIP }, async () => {
  const PROTOS = process.env.GANTRY_PROTOS;
  const def = protoLoader.loadSync(path.join(PROTOS, 'gantry/v1/router.proto'), {
    includeDirs: [PROTOS], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
  });
  const router = new (grpc.loadPackageDefinition(def).gantry.v1.Router)(process.env.GANTRY_GRPC,
    grpc.credentials.createInsecure());
  const before = await metrics();
  const err = await new Promise((resolve) => router.Embed(
    { model: MODEL, request: { tokens: bigInput().map((ids) => ({ ids })) } }, new grpc.Metadata(),
    { deadline: Date.now() + 1500 }, (e) => resolve(e)));
  assert.equal(err?.code, grpc.status.DEADLINE_EXCEEDED, String(err));
  await idleAndServing(before, 'router deadline');
  router.close();
});
