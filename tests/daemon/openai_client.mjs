// SPDX-License-Identifier: MIT
// openai_client.mjs - the official openai npm client against kvarenad's
// API: a completion, a stream with usage, a streamed tool-call round trip
// (through the SDK's own stream helper, which assembles tool_calls deltas
// strictly) and the SDK's error classes for 400, 401 and 404.
//
// env: KVD_API_BASE_URL (http://HOST:PORT/v1), KVD_API_KEY, KVD_API_MODEL,
//      KVD_NODE_DIR (where `npm install openai` put node_modules),
//      KVD_API_SCRIPTED=1 when the server is the scripted test server (its
//      replies are then checked exactly; against a real model only their
//      shape is).
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import assert from 'node:assert/strict';

const req = createRequire(`${process.env.KVD_NODE_DIR ?? '.'}/package.json`);
const { default: OpenAI } = await import(pathToFileURL(req.resolve('openai')).href);

const baseURL = process.env.KVD_API_BASE_URL;
const apiKey = process.env.KVD_API_KEY;
const model = process.env.KVD_API_MODEL ?? 'kvarena-test';
const scripted = process.env.KVD_API_SCRIPTED === '1';
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];

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

await test('non-streamed completion', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'say Hello from kvarena' }], max_tokens: 40,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  if (scripted) assert.equal(r.choices[0].message.content, 'Hello from kvarena');
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

await test('streamed completion with include_usage', async () => {
  const s = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'say streaming works, caf\u00e9 \u2615' }],
    stream: true, stream_options: { include_usage: true }, max_tokens: 40,
  });
  let text = '', usage = null, finish = null, chunks = 0;
  for await (const c of s) {
    chunks++;
    if (c.usage) {
      usage = c.usage;
      assert.equal(c.choices.length, 0);
    }
    for (const ch of c.choices) {
      text += ch.delta.content ?? '';
      finish = ch.finish_reason ?? finish;
    }
  }
  assert.ok(chunks > 2);
  assert.ok(usage && usage.completion_tokens > 0);
  assert.ok(finish === 'stop' || finish === 'length');
  if (scripted) assert.equal(text, 'streaming works, caf\u00e9 \u2615');
});

await test('streamed tool-call round trip', async () => {
  if (!scripted) {
    console.log('     (skipped: needs a model that calls the tool on request)');
    return;
  }
  const messages = [
    { role: 'system', content: 'You call tools.' },
    { role: 'user', content: 'call get_weather {"city": "Paris"}' },
  ];
  // the SDK's stream helper assembles tool_calls deltas by index
  const helper = client.chat.completions.stream ?? client.beta.chat.completions.stream;
  const runner = helper.call(client.chat.completions.stream ? client.chat.completions
    : client.beta.chat.completions, {
    model, messages, tools, stream_options: { include_usage: true },
  });
  let deltas = 0;
  runner.on('chunk', (c) => { deltas += (c.choices[0]?.delta?.tool_calls ?? []).length; });
  const final = await runner.finalChatCompletion();
  const msg = final.choices[0].message;
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  assert.ok(deltas >= 2, `tool_calls deltas: ${deltas}`);
  assert.equal(msg.tool_calls.length, 1);
  const call = msg.tool_calls[0];
  assert.match(call.id, /^call_/);
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
  const firstPrompt = final.usage.prompt_tokens;
  // the client runs the tool and sends the result back
  messages.push({ role: 'assistant', content: msg.content ?? null, tool_calls: msg.tool_calls });
  messages.push({ role: 'tool', tool_call_id: call.id, content: '18C and sunny' });
  const r = await client.chat.completions.create({ model, messages, tools });
  assert.equal(r.choices[0].message.content, 'Tool said: 18C and sunny');
  // the second prompt reuses the first prompt and the generated call
  // byte for byte (the scripted server counts bytes)
  const generated = `<tool_call>\n{"name": "get_weather", "arguments": ${call.function.arguments}}\n</tool_call>`;
  assert.equal(r.usage.prompt_tokens_details.cached_tokens,
    firstPrompt + Buffer.byteLength(generated));
});

await test('400 as BadRequestError', async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], n: 17 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'n'
      && e.type === 'invalid_request_error');
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }],
      tool_choice: { type: 'function', function: { name: 'no_such_tool' } }, tools }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice.function.name');
});

await test('401 as AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'not-a-valid-key-0000', maxRetries: 0 });
  await assert.rejects(
    bad.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === 'invalid_api_key');
});

await test('404 for an unknown model', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  const list = await client.models.list();
  assert.ok(list.data.some((m) => m.id === model));
});

console.log(`openai_client: ${failed} failed`);
process.exit(failed ? 1 : 0);
