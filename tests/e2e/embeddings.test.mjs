// tests/e2e/embeddings.test.mjs — POST /v1/embeddings through the official `openai` client and
// LangChain's OpenAIEmbeddings. With GANTRY_EMBED_GGUF (run.sh GANTRY_ENGINE_TASK=embed) the engine
// serves an embedding copy of qwen3-tiny (`serve --task embed`); otherwise, against the real
// generation engine, the endpoint must refuse with a 400 naming the model.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { OpenAIEmbeddings } from '@langchain/openai';

const URL = process.env.GANTRY_URL;
const MODEL = process.env.GANTRY_MODEL || 'tiny';
const EMBED = !!process.env.GANTRY_EMBED_GGUF;
const REAL = process.env.GANTRY_ENGINE_KIND === 'real';
const client = new OpenAI({ baseURL: `${URL}/v1`, apiKey: 'none', maxRetries: 0 });
const DIM = 256; // qwen3-tiny's hidden size

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const maxDiff = (a, b) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);
async function raw(body) {
  const r = await fetch(`${URL}/v1/embeddings`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

test('embeddings: one string, unit length, usage', { skip: !EMBED }, async () => {
  const r = await client.embeddings.create({ model: MODEL, input: 'The quick brown fox' });
  assert.equal(r.object, 'list');
  assert.equal(r.model, MODEL);
  assert.equal(r.data.length, 1);
  assert.equal(r.data[0].object, 'embedding');
  assert.equal(r.data[0].index, 0);
  assert.equal(r.data[0].embedding.length, DIM);
  assert.ok(Math.abs(norm(r.data[0].embedding) - 1) < 1e-5);
  // text gets EOS appended (add_eos_token): the tokenizer's count + 1
  const t = await (await fetch(`${URL}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: 'The quick brown fox' }),
  })).json();
  assert.equal(r.usage.prompt_tokens, t.count + 1);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens);
});

test('embeddings: batch == one at a time; different texts differ', { skip: !EMBED }, async () => {
  const texts = ['alpha beta', 'a much longer sentence about something else entirely', 'alpha beta'];
  const b = await client.embeddings.create({ model: MODEL, input: texts, encoding_format: 'float' });
  assert.deepEqual(b.data.map((d) => d.index), [0, 1, 2]);
  for (let i = 0; i < texts.length; i++) {
    const one = await client.embeddings.create({ model: MODEL, input: texts[i], encoding_format: 'float' });
    assert.ok(maxDiff(b.data[i].embedding, one.data[0].embedding) < 1e-6, `input ${i}`);
  }
  assert.ok(maxDiff(b.data[0].embedding, b.data[2].embedding) < 1e-6);
  assert.ok(maxDiff(b.data[0].embedding, b.data[1].embedding) > 1e-3);
});

test('embeddings: dimensions truncates then renormalizes', { skip: !EMBED }, async () => {
  const full = (await client.embeddings.create({ model: MODEL, input: 'hello', encoding_format: 'float' })).data[0].embedding;
  const r = await client.embeddings.create({ model: MODEL, input: 'hello', dimensions: 64, encoding_format: 'float' });
  const v = r.data[0].embedding;
  assert.equal(v.length, 64);
  assert.ok(Math.abs(norm(v) - 1) < 1e-5);
  const head = full.slice(0, 64), n = norm(head);
  assert.ok(maxDiff(v, head.map((x) => x / n)) < 1e-5);
});

test('embeddings: base64 (explicit, and the client default) carries little-endian float32', { skip: !EMBED }, async () => {
  const f = (await client.embeddings.create({ model: MODEL, input: 'base64 me', encoding_format: 'float' })).data[0].embedding;
  const b = await client.embeddings.create({ model: MODEL, input: 'base64 me', encoding_format: 'base64' });
  assert.equal(typeof b.data[0].embedding, 'string');
  const buf = Buffer.from(b.data[0].embedding, 'base64');
  assert.equal(buf.length, 4 * DIM);
  const dec = Array.from({ length: DIM }, (_, i) => buf.readFloatLE(4 * i));
  assert.ok(maxDiff(dec, f) < 1e-6);
  // without encoding_format the client asks for base64 itself and decodes it to numbers
  const d = await client.embeddings.create({ model: MODEL, input: 'base64 me' });
  assert.ok(Array.isArray(d.data[0].embedding));
  assert.ok(maxDiff(d.data[0].embedding, f) < 1e-6);
});

test('embeddings: token-id inputs (one array, array of arrays)', { skip: !EMBED }, async () => {
  const one = await client.embeddings.create({ model: MODEL, input: [11, 22, 33], encoding_format: 'float' });
  assert.equal(one.data.length, 1);
  assert.equal(one.usage.prompt_tokens, 3);
  const two = await client.embeddings.create({ model: MODEL, input: [[11, 22, 33], [44, 55]], encoding_format: 'float' });
  assert.equal(two.data.length, 2);
  assert.equal(two.usage.prompt_tokens, 5);
  assert.ok(maxDiff(two.data[0].embedding, one.data[0].embedding) < 1e-6);
  assert.ok(Math.abs(norm(two.data[1].embedding) - 1) < 1e-5);
});

test('embeddings: bad input is a 400 naming the parameter', { skip: !EMBED }, async () => {
  for (const [body, param] of [
    [{ model: MODEL, input: '' }, 'input'],
    [{ model: MODEL, input: [] }, 'input'],
    [{ model: MODEL, input: 'x', dimensions: 0 }, 'dimensions'],
    [{ model: MODEL, input: 'x', encoding_format: 'int8' }, 'encoding_format'],
    [{ model: MODEL, input: 'x', temperature: 1 }, 'temperature'],
    [{ model: MODEL, input: [[1, 2], 'x'] }, 'input'],
  ]) {
    const r = await raw(body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.body.error.param, param, JSON.stringify(r.body));
  }
  const big = await raw({ model: MODEL, input: 'x', dimensions: DIM + 1 });
  assert.equal(big.status, 400);
  assert.match(big.body.error.message, /dimensions/);
  const unknown = await raw({ model: 'no-such-model', input: 'x' });
  assert.equal(unknown.status, 404);
});

test('embeddings: more inputs than the engine can queue is a 400 saying so, not an engine failure', { skip: !EMBED }, async () => {
  // run.sh starts the engine with the default --max-waiting (256): 300 inputs could never all wait
  const input = Array.from({ length: 300 }, (_, i) => [1 + (i % 50), 2]);
  const r = await raw({ model: MODEL, input });
  assert.equal(r.status, 400, JSON.stringify(r.body));
  assert.match(r.body.error.message, /at most 256 inputs.*--max-waiting/);
  // 256 of them are served
  const ok = await raw({ model: MODEL, input: input.slice(0, 256) });
  assert.equal(ok.status, 200, JSON.stringify(ok.body).slice(0, 300));
  assert.equal(ok.body.data.length, 256);
});

test('embeddings: chat against an embedding model is a 400 naming it', { skip: !EMBED }, async () => {
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    (e) => e.status === 400 && /embedding model/.test(e.message) && e.message.includes(MODEL) || assert.fail(String(e)));
});

test('embeddings: LangChain OpenAIEmbeddings', { skip: !EMBED }, async () => {
  const lc = new OpenAIEmbeddings({ model: MODEL, apiKey: 'none', configuration: { baseURL: `${URL}/v1` }, maxRetries: 0 });
  const q = await lc.embedQuery('hello');
  const docs = await lc.embedDocuments(['hello', 'world']);
  assert.equal(q.length, DIM);
  assert.equal(docs.length, 2);
  assert.ok(maxDiff(q, docs[0]) < 1e-6);
  const lc64 = new OpenAIEmbeddings({ model: MODEL, apiKey: 'none', dimensions: 64, configuration: { baseURL: `${URL}/v1` } });
  assert.equal((await lc64.embedQuery('hello')).length, 64);
});

test('embeddings against a generation model: 400 naming the model', { skip: EMBED || !REAL }, async () => {
  await assert.rejects(client.embeddings.create({ model: MODEL, input: 'x' }),
    (e) => e.status === 400 && /not an embedding model/.test(e.message) && e.message.includes(MODEL) || assert.fail(String(e)));
});
