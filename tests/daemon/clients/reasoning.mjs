// SPDX-License-Identifier: MIT
// reasoning.mjs - the official clients parse a thinking family's
// reasoning as kvarenad sends it apart: the openai client's chat stream
// (reasoning_content deltas) and responses.stream (a reasoning item the
// SDK assembles from content_part.added and reasoning_text.delta, or
// throws), the Anthropic SDK's messages.stream (a thinking block from
// thinking_delta and signature_delta). Against the API test server
// rendering as qwen3 (--chat-template qwen3): the scripted orchestrator
// replies "say TEXT" with TEXT, so the reply opens with a think block; the
// front ends and their wire format are kvarenad's own (daemon/api).
//
// env: KVD_API_BASE_URL (http://HOST:PORT, no /v1), KVD_NODE_DIR
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import assert from 'node:assert/strict';

const req = createRequire(`${process.env.KVD_NODE_DIR}/package.json`);
const { default: OpenAI } = await import(pathToFileURL(req.resolve('openai')).href);
const { default: Anthropic } = await import(pathToFileURL(req.resolve('@anthropic-ai/sdk')).href);

const base = process.env.KVD_API_BASE_URL;
const model = 'kvarena-test';
const say = 'say <think>\nLet me see.\n</think>\n\nHello there.';
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: 'unused', maxRetries: 0 });

let failed = 0;
async function test(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
  }
}

await test('openai chat.completions stream: reasoning_content deltas, then content', async () => {
  const stream = await openai.chat.completions.create({ model, stream: true,
    messages: [{ role: 'user', content: say }] });
  let reasoning = '', content = '';
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    if (d.reasoning_content) {
      assert.equal(content, '', 'reasoning after content');
      reasoning += d.reasoning_content;
    }
    content += d.content ?? '';
  }
  assert.equal(reasoning, 'Let me see.');
  assert.equal(content, 'Hello there.');
});

await test('openai responses.stream: the reasoning item assembled by the SDK', async () => {
  const stream = openai.responses.stream({ model, input: say, store: false });
  let deltas = '';
  stream.on('response.reasoning_text.delta', (e) => { deltas += e.delta; });
  const r = await stream.finalResponse();
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(r.output[0].content[0].type, 'reasoning_text');
  assert.equal(r.output[0].content[0].text, 'Let me see.');
  assert.equal(deltas, 'Let me see.');
  assert.equal(r.output[1].content[0].text, 'Hello there.');
  assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
});

await test('anthropic messages.stream: a thinking block assembled by the SDK', async () => {
  let thinking = '';
  const stream = anthropic.messages.stream({ model, max_tokens: 100,
    messages: [{ role: 'user', content: say }] });
  stream.on('thinking', (delta) => { thinking += delta; });
  const m = await stream.finalMessage();
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(m.content[0].thinking, 'Let me see.');
  assert.equal(m.content[0].signature, '');
  assert.equal(m.content[1].text, 'Hello there.');
  assert.equal(thinking, 'Let me see.');
});

process.exit(failed ? 1 : 0);
