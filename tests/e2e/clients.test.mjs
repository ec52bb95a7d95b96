// tests/e2e/clients.test.mjs — the clients people use, against the real router (run.sh):
// - the Vercel AI SDK's default provider (`openai(model)` from @ai-sdk/openai: the Responses API):
//   generateText, streamText, a tool round trip (two steps), structured output (Output.object
//   with a Zod schema);
// - LangChain's ChatOpenAI (chat completions, and useResponsesApi): invoke, bindTools,
//   withStructuredOutput.
// Scripted answers (tool calls) only against the fake engine; structured ones on the demo model
// (test_router_e2e_demo runs the "structured" tests).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { generateText, streamText, tool, Output, stepCountIs } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { z } from 'zod';

const URL = process.env.GANTRY_URL;
const MODEL = process.env.GANTRY_MODEL || 'tiny';
const FAKE = process.env.GANTRY_ENGINE_KIND !== 'real';
const DEMO = { skip: !(process.env.GANTRY_E2E_MODEL || '').includes('demo') && 'runs on the demo model (test_router_e2e_demo)' };
const SCRIPTED = { skip: !FAKE && 'needs the scripted fake engine' };
const KEY = process.env.GANTRY_API_KEY || 'none';
const openai = createOpenAI({ baseURL: `${URL}/v1`, apiKey: KEY });
const lc = (extra = {}) => new ChatOpenAI({ model: MODEL, apiKey: KEY, configuration: { baseURL: `${URL}/v1` }, maxRetries: 0, ...extra });

test('AI SDK: generateText and streamText on the default provider (Responses API)', async () => {
  const r = await generateText({ model: openai(MODEL), prompt: 'Say hello', maxOutputTokens: 8, temperature: 0 });
  assert.equal(typeof r.text, 'string');
  assert.ok(r.usage.inputTokens > 0 && r.usage.outputTokens > 0, JSON.stringify(r.usage));
  if (FAKE) assert.equal(r.text, 'Hello world');
  const s = streamText({ model: openai(MODEL), prompt: 'Say hello', maxOutputTokens: 8, temperature: 0 });
  let text = '';
  for await (const t of s.textStream) text += t;
  assert.equal(text, r.text, 'greedy: streamed text equals the generated one');
  assert.ok(['stop', 'length'].includes(await s.finishReason), await s.finishReason);
});

test('AI SDK: a tool round trip in two steps', SCRIPTED, async () => {
  const calls = [];
  const r = await generateText({
    model: openai(MODEL),
    prompt: 'TOOL: what is the weather in Paris?',
    tools: {
      get_weather: tool({
        description: 'The weather of a city',
        inputSchema: z.object({ city: z.string() }),
        execute: async ({ city }) => { calls.push(city); return 'sunny'; },
      }),
    },
    stopWhen: stepCountIs(2),
  });
  assert.deepEqual(calls, ['Paris']);
  assert.equal(r.steps.length, 2);
  assert.equal(r.steps[0].toolCalls[0].toolName, 'get_weather');
  assert.equal(r.text, 'Hello world'); // the answer after the tool result
});

test('LangChain: invoke, bindTools, and the Responses API', async () => {
  const m = await lc({ temperature: 0, maxTokens: 8 }).invoke('Say hello');
  assert.equal(typeof m.content, 'string');
  if (FAKE) assert.equal(m.content, 'Hello world');
  if (FAKE) {
    const withTools = lc().bindTools([{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }]);
    const t = await withTools.invoke('TOOL: weather in Paris?');
    assert.equal(t.tool_calls.length, 1);
    assert.equal(t.tool_calls[0].name, 'get_weather');
    assert.deepEqual(t.tool_calls[0].args, { city: 'Paris' });
  }
  const resp = await lc({ useResponsesApi: true, temperature: 0, maxTokens: 8 }).invoke('Say hello');
  const text = typeof resp.content === 'string' ? resp.content : resp.content.map((c) => c.text ?? '').join('');
  if (FAKE) assert.equal(text, 'Hello world');
});

const PROGRAM = z.object({ name: z.string().max(12), lines: z.number().int().min(1).max(500), score: z.number().min(0).max(1) });

test('structured: AI SDK Output.object and LangChain withStructuredOutput with Zod schemas', DEMO, async () => {
  const r = await generateText({
    model: openai(MODEL), output: Output.object({ schema: PROGRAM }), prompt: 'Describe a small program as JSON.',
    maxOutputTokens: 200, temperature: 0,
  });
  assert.ok(PROGRAM.safeParse(r.output).success, JSON.stringify(r.output));
  const s = lc({ temperature: 0, maxTokens: 200 }).withStructuredOutput(PROGRAM, { name: 'program' });
  const v = await s.invoke('Describe a small program as JSON.');
  assert.ok(PROGRAM.safeParse(v).success, JSON.stringify(v));
});
