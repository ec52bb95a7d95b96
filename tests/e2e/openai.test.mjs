// tests/e2e/openai.test.mjs — gantry-router through the official `openai` npm client.
// Started by run.sh (GANTRY_URL, GANTRY_MODEL, GANTRY_ENGINE_KIND=real|fake). Format checks run
// against both engines; scripted behaviours (reasoning, tool calls, mid-stream failure) only
// against the fake engine, whose answers are known.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const URL = process.env.GANTRY_URL;
const MODEL = process.env.GANTRY_MODEL || 'tiny';
const FAKE = process.env.GANTRY_ENGINE_KIND !== 'real';
const client = new OpenAI({ baseURL: `${URL}/v1`, apiKey: process.env.GANTRY_API_KEY || 'none', maxRetries: 0 });

test('models lists the configured model', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert.ok(ids.includes(MODEL), `models: ${ids}`);
});

test('chat completion, not streamed', async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 8, temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  if (FAKE) assert.equal(r.choices[0].message.content, 'Hello world');
});

test('chat completion streamed with include_usage', async () => {
  const stream = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Count to three' }], max_tokens: 6, temperature: 0,
    stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  let sawRole = false;
  for await (const c of stream) {
    chunks++;
    assert.equal(c.object, 'chat.completion.chunk');
    if (c.usage) {
      assert.equal(c.choices.length, 0, 'the usage chunk has empty choices');
      usage = c.usage;
      continue;
    }
    const ch = c.choices[0];
    if (ch.delta.role) sawRole = true;
    text += ch.delta.content ?? '';
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.ok(chunks >= 2);
  assert.ok(sawRole);
  assert.ok(['stop', 'length'].includes(finish));
  assert.ok(usage, 'final usage chunk');
  assert.ok(usage.completion_tokens > 0);
  assert.ok(usage.prompt_tokens_details && typeof usage.prompt_tokens_details.cached_tokens === 'number');
  if (FAKE) assert.equal(text, 'Hello world');
});

test('completions, streamed and not', async () => {
  const prompt = 'def fibonacci(n):\n    ';
  const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.usage.completion_tokens > 0);
  const s = await client.completions.create({ model: MODEL, prompt, max_tokens: 8, temperature: 0, stream: true });
  let text = '';
  for await (const c of s) if (c.choices.length) text += c.choices[0].text;
  assert.equal(text, r.choices[0].text, 'greedy: streamed text equals the non-streamed one');
});

test('cached tokens on a repeated prompt', async () => {
  const long = 'The quick brown fox jumps over the lazy dog. '.repeat(20);
  const ask = () => client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: long }], max_tokens: 2, temperature: 0,
  });
  await ask();
  const second = await ask();
  assert.ok(second.usage.prompt_tokens_details.cached_tokens > 0,
    `cached_tokens ${second.usage.prompt_tokens_details.cached_tokens}`);
});

test('reasoning is sent as reasoning and reasoning_content', { skip: !FAKE && 'needs scripted reasoning' }, async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'THINK' }] });
  const m = r.choices[0].message;
  assert.equal(m.reasoning, 'let me think');
  assert.equal(m.reasoning_content, 'let me think');
  assert.equal(m.content, '42');
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 2);
  const s = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'THINK' }], stream: true });
  let reasoning = '';
  let content = '';
  for await (const c of s) {
    const d = c.choices[0]?.delta ?? {};
    reasoning += d.reasoning_content ?? '';
    content += d.content ?? '';
  }
  assert.equal(reasoning, 'let me think');
  assert.equal(content, '42');
});

test('tool calls: id, type and name first, then argument fragments', { skip: !FAKE && 'needs a scripted tool call' }, async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  const s = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'TOOL: weather in Paris?' }], tools, stream: true,
  });
  const deltas = [];
  let finish = null;
  for await (const c of s) {
    const ch = c.choices[0];
    if (ch?.delta?.tool_calls) deltas.push(...ch.delta.tool_calls);
    if (ch?.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(deltas[0].id, 'call_abc');
  assert.equal(deltas[0].type, 'function');
  assert.equal(deltas[0].function.name, 'get_weather');
  const args = deltas.map((d) => d.function?.arguments ?? '').join('');
  assert.deepEqual(JSON.parse(args), { city: 'Paris' });
  assert.equal(finish, 'tool_calls');
  // the tool result goes back as a message
  const r = await client.chat.completions.create({
    model: MODEL,
    messages: [
      { role: 'user', content: 'weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: args } }] },
      { role: 'tool', tool_call_id: 'call_abc', content: '{"temp_c": 21}' },
    ],
    tools,
  });
  assert.equal(r.choices[0].message.content, 'Hello world');
});

test('error objects: OpenAI-style with the right status', async () => {
  const cases = [
    [{ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }, 404, 'model_not_found'],
    [{ model: MODEL, messages: [] }, 400, 'empty_array'],
    [{ model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 0 }, 400, 'invalid_value'],
    [{ model: MODEL, messages: [{ role: 'user', content: 'x' }], n: 2 }, 400, 'invalid_value'],
    [{ model: MODEL, messages: [{ role: 'user', content: 'x' }], temperature: 'hot' }, 400, 'invalid_type'],
  ];
  for (const [body, status, code] of cases) {
    await assert.rejects(client.chat.completions.create(body), (e) => {
      assert.ok(e instanceof OpenAI.APIError, String(e));
      assert.equal(e.status, status, JSON.stringify(body));
      assert.equal(e.code, code);
      assert.equal(typeof e.message, 'string');
      return true;
    });
  }
});

test('prompt longer than the context: 400 with the numbers', async () => {
  const prompt = FAKE ? 'TOOLONG' : 'word '.repeat(200000);
  await assert.rejects(client.completions.create({ model: MODEL, prompt, max_tokens: 1 }), (e) => {
    assert.ok(e instanceof OpenAI.APIError);
    assert.ok(e.status === 400 || e.status === 413, `status ${e.status}: ${e.message}`);
    if (e.status === 400) assert.match(e.message, /\d+/);
    return true;
  });
});

test('engine failure mid-stream surfaces as an error', { skip: !FAKE && 'needs a scripted failure' }, async () => {
  const s = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'DIE' }], stream: true });
  await assert.rejects((async () => { for await (const c of s) void c; })(), (e) => {
    assert.match(String(e.message), /engine/);
    return true;
  });
});
