// tests/e2e/tp.test.mjs — an engine serving with tensor parallelism (`serve --tp N` on CPU ranks,
// started by run.sh with GANTRY_ENGINE_TP=N) behind the router, through the official `openai`
// client: the greedy completion equals what one rank generates (GANTRY_TP_EXPECT, from
// `gantry-engine generate` without --tp), and logprobs (which need the whole vocabulary: the
// ranks' logits gathered) come back for every token.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const TP = process.env.GANTRY_ENGINE_TP;
const client = new OpenAI({ baseURL: `${process.env.GANTRY_URL}/v1`, apiKey: 'none', maxRetries: 0 });

test('greedy completion at --tp N equals one rank; logprobs gathered over the vocabulary',
  { skip: !TP && 'needs run.sh with GANTRY_ENGINE_TP' }, async () => {
    const r = await client.completions.create({
      model: process.env.GANTRY_MODEL || 'tiny', prompt: 'The quick brown fox', max_tokens: 8, temperature: 0,
      logprobs: 2, ignore_eos: true,
    });
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].text, process.env.GANTRY_TP_EXPECT);
    assert.equal(r.usage.completion_tokens, 8);
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 8);
    for (let i = 0; i < 8; i++) {
      assert.ok(lp.token_logprobs[i] <= 0, `logprob ${lp.token_logprobs[i]}`);
      assert.equal(Object.keys(lp.top_logprobs[i]).length, 2);
    }
  });

// A tensor-parallel group has no logits_mask op: its constrained rows are masked on the host
// after the ranks' logits are gathered. Greedy and sampled requests both stay inside the choices.
test('guided_choice at --tp N: every choice is one of the strings',
  { skip: !TP && 'needs run.sh with GANTRY_ENGINE_TP' }, async () => {
    const choices = ['alpha beta', 'gamma', 'delta epsilon zeta'];
    for (const temperature of [0, 1]) {
      const r = await client.completions.create({
        model: process.env.GANTRY_MODEL || 'tiny', prompt: 'Pick one:', max_tokens: 16, temperature, seed: 7, n: 2,
        guided_choice: choices,
      });
      assert.equal(r.choices.length, 2);
      for (const c of r.choices) assert.ok(choices.includes(c.text), `temperature ${temperature}: ${JSON.stringify(c.text)}`);
    }
  });
