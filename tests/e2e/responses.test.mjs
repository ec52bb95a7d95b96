// tests/e2e/responses.test.mjs — POST /v1/responses (and GET / DELETE /v1/responses/{id})
// through the official `openai` client: plain and streamed, the event sequence, reasoning items,
// a function-tool round trip (with previous_response_id and with the items resent), text.format.
// Started by run.sh like openai.test.mjs; scripted answers (tool calls, reasoning) only against
// the fake engine, structured ones on the demo model (test_router_e2e_demo).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv from 'ajv';

const URL = process.env.GANTRY_URL;
const MODEL = process.env.GANTRY_MODEL || 'tiny';
const FAKE = process.env.GANTRY_ENGINE_KIND !== 'real';
const DEMO = { skip: !(process.env.GANTRY_E2E_MODEL || '').includes('demo') && 'runs on the demo model (test_router_e2e_demo)' };
const client = new OpenAI({ baseURL: `${URL}/v1`, apiKey: process.env.GANTRY_API_KEY || 'none', maxRetries: 0 });
const ajv = new Ajv({ strict: false });
const WEATHER = { type: 'object', properties: { city: { type: 'string', maxLength: 10 } }, required: ['city'] };
const TOOLS = [{ type: 'function', name: 'get_weather', description: 'weather of a city', parameters: WEATHER, strict: true }];

const checkUsage = (u) => {
  assert.ok(u.input_tokens > 0 && u.output_tokens > 0, JSON.stringify(u));
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  assert.equal(typeof u.input_tokens_details.cached_tokens, 'number');
  assert.equal(typeof u.output_tokens_details.reasoning_tokens, 'number');
};

test('responses: plain create, retrieve, delete', async () => {
  const r = await client.responses.create({ model: MODEL, input: 'Say hello', instructions: 'Be brief.', max_output_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_[0-9a-f]{32}$/);
  assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
  assert.equal(r.instructions, 'Be brief.');
  assert.equal(r.max_output_tokens, 8);
  const msg = r.output.find((o) => o.type === 'message');
  assert.ok(msg, JSON.stringify(r.output));
  assert.equal(msg.role, 'assistant');
  assert.equal(typeof r.output_text, 'string'); // the SDK joins the output_text parts
  checkUsage(r.usage);
  if (FAKE) assert.equal(r.output_text, 'Hello world');
  if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  const got = await client.responses.retrieve(r.id);
  assert.deepEqual(got.output, r.output);
  assert.equal(got.id, r.id);
  await client.responses.del(r.id);
  await assert.rejects(client.responses.retrieve(r.id), (e) => e.status === 404);
  await assert.rejects(client.responses.del(r.id), (e) => e.status === 404);
});

test('responses: store false is not kept; an unknown previous_response_id is a 404', async () => {
  const r = await client.responses.create({ model: MODEL, input: 'x', max_output_tokens: 2, store: false });
  assert.equal(r.store, false);
  await assert.rejects(client.responses.retrieve(r.id), (e) => e.status === 404);
  await assert.rejects(client.responses.create({ model: MODEL, input: 'x', previous_response_id: r.id }), (e) => {
    assert.equal(e.status, 404);
    assert.equal(e.param, 'previous_response_id');
    return true;
  });
});

test('responses: streamed, the event sequence and the text equal to the non-streamed one', async () => {
  const body = { model: MODEL, input: [{ role: 'user', content: 'Count to three' }], max_output_tokens: 6, temperature: 0 };
  const plain = await client.responses.create(body);
  const s = await client.responses.create({ ...body, stream: true });
  const types = [];
  let text = '';
  let done = null;
  let last = -1;
  for await (const ev of s) {
    types.push(ev.type);
    assert.equal(ev.sequence_number, last + 1, 'sequence numbers count up');
    last = ev.sequence_number;
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.output_text.done') assert.equal(ev.text, text);
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') done = ev.response;
  }
  assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
  assert.ok(types.includes('response.output_text.delta'));
  const tail = types.slice(-4);
  assert.deepEqual(tail.slice(0, 3), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done']);
  assert.ok(done, `ends with completed/incomplete: ${types.at(-1)}`);
  checkUsage(done.usage);
  assert.equal(text, plain.output_text, 'greedy: streamed text equals the non-streamed one');
  assert.equal(done.output.find((o) => o.type === 'message').content[0].text, text);
});

test('responses: reasoning items and the SDK stream helper', { skip: !FAKE && 'needs scripted reasoning' }, async () => {
  const r = await client.responses.create({ model: MODEL, input: 'THINK' });
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(r.output[0].content[0].text, 'let me think');
  assert.equal(r.output_text, '42');
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, 2);
  const s = client.responses.stream({ model: MODEL, input: 'THINK' });
  let reasoning = '';
  for await (const ev of s) if (ev.type === 'response.reasoning_text.delta') reasoning += ev.delta;
  const fin = await s.finalResponse();
  assert.equal(reasoning, 'let me think');
  // the helper's final response, accumulated by the SDK from our events (it adds no output_text)
  assert.deepEqual(fin.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(fin.output[1].content[0].text, '42');
});

test('responses: a function-tool round trip, with previous_response_id and with the items resent', { skip: !FAKE && 'needs a scripted tool call' }, async () => {
  const r = await client.responses.create({ model: MODEL, input: 'TOOL: weather in Paris?', tools: TOOLS });
  const call = r.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
  assert.ok(call.call_id);
  const result = { type: 'function_call_output', call_id: call.call_id, output: 'sunny' };
  const r2 = await client.responses.create({ model: MODEL, previous_response_id: r.id, input: [result], tools: TOOLS });
  assert.equal(r2.previous_response_id, r.id);
  assert.equal(r2.output_text, 'Hello world');
  const r3 = await client.responses.create({
    model: MODEL, store: false, tools: TOOLS,
    input: [{ role: 'user', content: 'TOOL: weather in Paris?' }, call, result],
  });
  assert.equal(r3.output_text, 'Hello world');
  // streamed: the call's arguments come as deltas, then .done with the whole arguments
  const s = await client.responses.create({ model: MODEL, input: 'TOOL', tools: TOOLS, stream: true });
  let args = '';
  let doneArgs = null;
  let added = null;
  for await (const ev of s) {
    if (ev.type === 'response.output_item.added') added = ev.item;
    if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
    if (ev.type === 'response.function_call_arguments.done') doneArgs = ev.arguments;
  }
  assert.equal(added.type, 'function_call');
  assert.equal(added.name, 'get_weather');
  assert.equal(args, '{"city":"Paris"}');
  assert.equal(doneArgs, args);
});

test('responses: refused parameters are 400s naming them', async () => {
  const cases = [
    [{ tools: [{ type: 'web_search' }] }, 'tools'],
    [{ background: true }, 'background'],
    [{ truncation: 'auto' }, 'truncation'],
    [{ text: { format: { type: 'xml' } } }, 'text.format'],
    [{ input: [{ type: 'item_reference', id: 'x' }] }, 'input[0]'], // no stored item of that id
    [{ max_output_tokens: 0 }, 'max_output_tokens'],
  ];
  for (const [extra, param] of cases) {
    await assert.rejects(client.responses.create({ model: MODEL, input: 'x', ...extra }), (e) => {
      assert.equal(e.status, 400, JSON.stringify(extra));
      assert.equal(e.param, param, `${JSON.stringify(extra)}: ${e.message}`);
      return true;
    });
  }
});

test('structured: responses text.format json_schema and a forced function call validate', DEMO, async () => {
  const validate = ajv.compile(WEATHER);
  const r = await client.responses.create({
    model: MODEL, input: 'The weather in Paris as JSON.', max_output_tokens: 200, temperature: 0,
    text: { format: { type: 'json_schema', name: 'weather', schema: WEATHER, strict: true } },
  });
  assert.ok(validate(JSON.parse(r.output_text)), r.output_text);
  const c = await client.responses.create({
    model: MODEL, input: 'What is the weather in Paris?', tools: TOOLS, tool_choice: 'required', max_output_tokens: 200, temperature: 0,
  });
  const call = c.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(c.output));
  assert.ok(validate(JSON.parse(call.arguments)), call.arguments);
  const back = await client.responses.create({
    model: MODEL, previous_response_id: c.id, tools: TOOLS, max_output_tokens: 16, temperature: 0,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"sky":"clear"}' }],
  });
  assert.equal(back.status === 'completed' || back.status === 'incomplete', true);
});
