// SPDX-License-Identifier: MIT
// anthropic.mjs - the official Anthropic SDK (@anthropic-ai/sdk) against
// the real kvarenad's Messages API (a random-weight model: tool_choice
// "any" makes the structured decoder write a valid tool_use):
// messages.create with tools, a tool_result round trip whose
// cache_read_input_tokens prove the KV was kept, messages.stream with
// tools (the SDK assembles input_json_delta into the input), countTokens.
//
// env: KVD_API_BASE_URL (http://HOST:PORT, no /v1), KVD_API_KEY,
//      KVD_API_MODEL, KVD_NODE_DIR
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import assert from 'node:assert/strict';

const req = createRequire(`${process.env.KVD_NODE_DIR}/package.json`);
const { default: Anthropic } = await import(pathToFileURL(req.resolve('@anthropic-ai/sdk')).href);

const model = process.env.KVD_API_MODEL;
const client = new Anthropic({ baseURL: process.env.KVD_API_BASE_URL,
  apiKey: process.env.KVD_API_KEY, maxRetries: 0, timeout: 300000 });
const tools = [{ name: 'get_weather', description: 'Weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } },
    required: ['city'] } }];

let failed = 0;
async function test(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
  }
}

const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
let first;
await test('messages.create with tools (tool_choice any)', async () => {
  first = await client.messages.create({ model, max_tokens: 300, system: 'You help with the weather.',
    messages, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, temperature: 0.7, kvarena: { close_in_budget: true } });
  assert.equal(first.type, 'message');
  assert.equal(first.stop_reason, 'tool_use');
  const tu = first.content.find((c) => c.type === 'tool_use');
  assert.equal(tu.name, 'get_weather');
  assert.equal(typeof tu.input.city, 'string');
});

await test('tool_result round trip: cache_read_input_tokens cover turn 1', async () => {
  const tu = first.content.find((c) => c.type === 'tool_use');
  const second = await client.messages.create({ model, max_tokens: 16, temperature: 0,
    system: 'You help with the weather.', tools,
    messages: [...messages, { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: '18C' }] }] });
  const u1 = first.usage, u2 = second.usage;
  const before = u1.input_tokens + u1.cache_read_input_tokens + u1.output_tokens;
  assert.ok(u2.cache_read_input_tokens >= before - 1,
    `cache_read ${u2.cache_read_input_tokens}, turn 1 ${before}`);
  console.log(`     cache_read_input_tokens ${u2.cache_read_input_tokens}, input_tokens ${u2.input_tokens} (turn 1: ${before})`);
});

await test('messages.stream with tools: the SDK assembles the tool input', async () => {
  const stream = client.messages.stream({ model, max_tokens: 300, messages, tools,
    tool_choice: { type: 'any', disable_parallel_tool_use: true }, temperature: 0.7, kvarena: { close_in_budget: true } });
  const kinds = [];
  stream.on('streamEvent', (ev) => kinds.push(ev.type));
  const msg = await stream.finalMessage();
  assert.equal(kinds[0], 'message_start');
  assert.equal(kinds.at(-1), 'message_stop');
  const tu = msg.content.find((c) => c.type === 'tool_use');
  assert.equal(typeof tu.input.city, 'string');
  assert.equal(msg.stop_reason, 'tool_use');
});

await test('countTokens', async () => {
  const c = await client.messages.countTokens({ model, messages, tools, system: 'You help with the weather.' });
  assert.ok(c.input_tokens > 0);
  assert.equal(c.input_tokens, first.usage.input_tokens + first.usage.cache_read_input_tokens);
});

await test('an error in Anthropic\'s shape', async () => {
  await assert.rejects(client.messages.create({ model, messages, max_tokens: 8, thinking: { type: 'enabled', budget_tokens: 0 } }),
    (e) => e instanceof Anthropic.BadRequestError && e.error?.type === 'error' &&
      e.error.error.type === 'invalid_request_error');
});

console.log(`anthropic: ${failed} failed`);
process.exit(failed ? 1 : 0);
