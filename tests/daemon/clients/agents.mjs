// SPDX-License-Identifier: MIT
// agents.mjs - the OpenAI Agents SDK (@openai/agents) runs an agent with
// two function tools against the real kvarenad through its Responses
// model, to a final output. The first turn must call a tool
// (toolChoice "required": the structured decoder writes a valid call of
// one of them, the SDK runs it and sends its output back); the SDK then
// resets the choice to auto and the model's next reply is the final
// output.
//
// env: KVD_API_BASE_URL, KVD_API_KEY, KVD_API_MODEL, KVD_NODE_DIR
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import assert from 'node:assert/strict';

const req = createRequire(`${process.env.KVD_NODE_DIR}/package.json`);
const { default: OpenAI } = await import(pathToFileURL(req.resolve('openai')).href);
const agents = await import(pathToFileURL(req.resolve('@openai/agents')).href);
const { z } = await import(pathToFileURL(req.resolve('zod')).href);

agents.setDefaultOpenAIClient(new OpenAI({ baseURL: process.env.KVD_API_BASE_URL,
  apiKey: process.env.KVD_API_KEY, maxRetries: 0, timeout: 300000 }));
agents.setOpenAIAPI('responses');
agents.setTracingDisabled(true);

const ran = [];
const add = agents.tool({ name: 'add', description: 'Add two integers.',
  parameters: z.object({ a: z.number().int(), b: z.number().int() }),
  execute: async ({ a, b }) => { ran.push('add'); return String(a + b); } });
const multiply = agents.tool({ name: 'multiply', description: 'Multiply two integers.',
  parameters: z.object({ a: z.number().int(), b: z.number().int() }),
  execute: async ({ a, b }) => { ran.push('multiply'); return String(a * b); } });
const agent = new agents.Agent({ name: 'calculator', instructions: 'Use the tools to compute.',
  model: process.env.KVD_API_MODEL, tools: [add, multiply],
  modelSettings: { toolChoice: 'required', parallelToolCalls: false, temperature: 0.7, maxTokens: 4096,
    providerData: { kvarena: { close_in_budget: true } } } });

const result = await agents.run(agent, 'What is (2 + 3) * 4?', { maxTurns: 6 });
const kinds = result.newItems.map((i) => i.type);
console.log(`     items: ${kinds.join(', ')}; tools run: ${ran.join(', ')}`);
assert.ok(ran.length >= 1, 'a tool ran');
assert.ok(kinds.includes('tool_call_item') && kinds.includes('tool_call_output_item'));
assert.equal(typeof result.finalOutput, 'string');
console.log(`ok   agent with two tools ran ${ran.length} tool call(s) to a final output (${result.finalOutput.length} chars)`);
