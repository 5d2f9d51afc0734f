// The TypeScript SDK's tool runner (`client.beta.messages.toolRunner`) with its
// default settings (a message thread) against a Missive, for
// tests/clients/test_ts_tool_runner.py.
//
//   node ts_tool_runner.mjs BASE_URL MODEL SDK_DIR STREAM FIRST_MESSAGE
//
// Prints one JSON object: the tool calls made and every reply.
import { pathToFileURL } from 'node:url';

const [url, model, sdkDir, stream, first] = process.argv.slice(2);
const load = (path) => import(pathToFileURL(`${sdkDir}/${path}`).href);
const { default: Anthropic } = await load('index.mjs');
const { betaTool } = await load('helpers/beta/json-schema.mjs');

const client = new Anthropic({ baseURL: url, apiKey: 'sk-test', maxRetries: 0 });
const calls = [];
const lookup = betaTool({
  name: 'lookup',
  description: 'Look a word up',
  inputSchema: { type: 'object', properties: { word: { type: 'string' } }, required: ['word'] },
  run: async ({ word }) => {
    calls.push(word);
    return `${word}: found`;
  },
});
const runner = client.beta.messages.toolRunner({
  model,
  max_tokens: 100,
  system: 'Use the tool.',
  tools: [lookup],
  messages: [{ role: 'user', content: first }],
  stream: stream === 'stream',
});
const replies = [];
for await (const item of runner) {
  replies.push(stream === 'stream' ? await item.finalMessage() : item);
}
console.log(JSON.stringify({ calls, replies }));
