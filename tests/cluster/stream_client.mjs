// Streams one completion from a `loom cluster serve` endpoint with the official OpenAI client and
// prints one JSON line per chunk ({"text": ...}), then {"done": true, "finish": ...}.  Run inside
// a test namespace: node stream_client.mjs URL MODEL PROMPT MAX_TOKENS
import OpenAI from "../serve/node_modules/openai/index.mjs";

const [url, model, prompt, maxTokens] = process.argv.slice(2);
const client = new OpenAI({ baseURL: url, apiKey: "unused", maxRetries: 0, timeout: 120000 });
const stream = await client.completions.create({
  model, prompt, max_tokens: Number(maxTokens), temperature: 0, stream: true,
});
let finish = null;
for await (const chunk of stream) {
  const c = chunk.choices[0];
  if (c.text) process.stdout.write(JSON.stringify({ text: c.text }) + "\n");
  if (c.finish_reason) finish = c.finish_reason;
}
process.stdout.write(JSON.stringify({ done: true, finish }) + "\n");
