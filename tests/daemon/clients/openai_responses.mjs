// SPDX-License-Identifier: MIT
// openai_responses.mjs - the official openai npm client's Responses API
// against the real kvarenad (a random-weight model: tool_choice
// "required" makes the structured decoder write a valid call): create
// with function tools, a tool round trip by previous_response_id whose
// cached_tokens prove the session's KV was kept, stream with the SDK's
// event helper, text.format json_schema validated with ajv, retrieve,
// input_items, delete.
//
// env: KVD_API_BASE_URL, KVD_API_KEY, KVD_API_MODEL, KVD_NODE_DIR
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import assert from 'node:assert/strict';

const req = createRequire(`${process.env.KVD_NODE_DIR}/package.json`);
const { default: OpenAI } = await import(pathToFileURL(req.resolve('openai')).href);
const { default: Ajv } = await import(pathToFileURL(req.resolve('ajv')).href);

const model = process.env.KVD_API_MODEL;
const client = new OpenAI({ baseURL: process.env.KVD_API_BASE_URL,
  apiKey: process.env.KVD_API_KEY, maxRetries: 0, timeout: 300000 });
const tools = [{ type: 'function', name: 'get_weather', description: 'Weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } },
    required: ['city'], additionalProperties: false }, strict: true }];

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

let first;
await test('responses.create with a function tool (tool_choice required)', async () => {
  first = await client.responses.create({ model, instructions: 'You help with the weather.',
    input: 'What is the weather in Paris?', tools, tool_choice: 'required', parallel_tool_calls: false,
    max_output_tokens: 300, temperature: 0.7, kvarena: { close_in_budget: true } });
  assert.equal(first.object, 'response');
  const calls = first.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length >= 1, true);
  assert.equal(calls[0].name, 'get_weather');
  assert.equal(typeof JSON.parse(calls[0].arguments).city, 'string');
  assert.match(calls[0].call_id, /^call_/);
});

await test('tool round trip by previous_response_id: the KV was kept', async () => {
  const call = first.output.find((o) => o.type === 'function_call');
  const second = await client.responses.create({ model, instructions: 'You help with the weather.',
    previous_response_id: first.id, tools, max_output_tokens: 16, temperature: 0,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '18C and sunny' }] });
  const cached = second.usage.input_tokens_details.cached_tokens;
  const before = first.usage.input_tokens + first.usage.output_tokens;
  assert.equal(second.previous_response_id, first.id);
  assert.ok(cached >= before - 1, `cached ${cached} of ${second.usage.input_tokens}, turn 1 ${before}`);
  assert.ok(second.usage.input_tokens - cached < 128, 'only the new item prefilled');
  console.log(`     cached_tokens ${cached} of ${second.usage.input_tokens} (turn 1: ${before})`);
});

await test('responses.stream: typed events, the final response', async () => {
  const stream = client.responses.stream({ model, input: 'Weather in Rome?', tools,
    tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 300, temperature: 0.7,
    kvarena: { close_in_budget: true } });
  const types = [];
  let args = '';
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
  }
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), 'response.completed');
  const call = final.output.find((o) => o.type === 'function_call');
  assert.equal(call.arguments, args);
  assert.equal(typeof JSON.parse(args).city, 'string');
});

await test('text.format json_schema, validated with ajv', async () => {
  const schema = { type: 'object', properties: { answer: { type: 'integer', minimum: 0, maximum: 99 },
    unit: { type: 'string', enum: ['ms', 's'] } }, required: ['answer', 'unit'],
  additionalProperties: false };
  const r = await client.responses.create({ model, input: 'How long? Answer in JSON.',
    text: { format: { type: 'json_schema', name: 'duration', schema, strict: true } },
    max_output_tokens: 96, temperature: 0.8, kvarena: { close_in_budget: true } });
  const v = JSON.parse(r.output_text);
  const ok = new Ajv().compile(schema)(v);
  assert.ok(ok, `not valid: ${r.output_text}`);
});

await test('retrieve, inputItems.list, delete', async () => {
  const got = await client.responses.retrieve(first.id);
  assert.equal(got.id, first.id);
  const items = await client.responses.inputItems.list(first.id);
  assert.ok(items.data.length >= 1);
  // the SDK's auto-paging (after = the last id, while has_more) over three items
  const three = await client.responses.create({ model, max_output_tokens: 4,
    input: [{ role: 'user', content: 'one' }, { role: 'assistant', content: 'two' },
      { role: 'user', content: 'three' }] });
  const seen = [];
  for await (const it of client.responses.inputItems.list(three.id, { limit: 1, order: 'asc' }))
    seen.push(`${it.role}:${it.content[0].type}:${it.content[0].text}`);
  assert.deepEqual(seen, ['user:input_text:one', 'assistant:output_text:two', 'user:input_text:three']);
  await client.responses.delete(first.id);
  await assert.rejects(client.responses.retrieve(first.id), (e) => e.status === 404);
});

console.log(`openai_responses: ${failed} failed`);
process.exit(failed ? 1 : 0);
