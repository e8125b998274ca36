// The API through the official OpenAI client: models, completions and chat, streaming and not;
// greedy (and seeded sampling) outputs equal `loom run` on stories260K and on a synthetic model;
// usage counts; logprobs; stop strings.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

import { loomRun, readSse, requireShared, startServer, storiesModel, synthModel } from "./helpers.mjs";

const PROMPTS = ["Once upon a time", "The little dog", "Lily wanted to"];

for (const which of ["stories260K", "synthetic q8_0"]) {
  describe(`OpenAI API on ${which}`, () => {
    let server;
    let client;
    let model;
    let skip = false;

    before(async (t) => {
      if (which === "stories260K") {
        model = storiesModel();
        if (!model) {
          skip = true;
          return;
        }
      } else {
        model = await synthModel("q8_0");
      }
      server = await startServer(model, ["--parallel", "4"]);
      client = new OpenAI({ baseURL: server.base, apiKey: "unused", maxRetries: 0 });
    });
    after(async () => server && (await server.stop()));

    const name = () => (which === "stories260K" ? "stories260K" : "tiny-q8_0");
    const guard = (t) => (skip ? (requireShared(t), false) : true);

    test("lists the served model", async (t) => {
      if (!guard(t)) return;
      const list = await client.models.list();
      const ids = [];
      for await (const m of list) ids.push(m.id);
      assert.deepEqual(ids, [name()]);
      const m = await client.models.retrieve(name());
      assert.equal(m.object, "model");
      assert.equal(m.owned_by, "loom");
    });

    test("greedy completions equal loom run, with usage", async (t) => {
      if (!guard(t)) return;
      for (const prompt of PROMPTS) {
        const want = await loomRun(model, prompt, 24);
        const got = await client.completions.create({
          model: name(), prompt, max_tokens: 24, temperature: 0,
        });
        assert.equal(got.object, "text_completion");
        assert.equal(got.choices[0].text, want.text, prompt);
        assert.equal(got.usage.prompt_tokens, want.prompt_token_ids.length);
        assert.equal(got.usage.completion_tokens, want.generated_token_ids.length);
        assert.equal(got.usage.total_tokens,
                     want.prompt_token_ids.length + want.generated_token_ids.length);
        assert.equal(got.choices[0].finish_reason, want.finish_reason === "stop" ? "stop" : "length");
        // The same prompt as token ids gives the same tokens.
        const byIds = await client.completions.create({
          model: name(), prompt: want.prompt_token_ids, max_tokens: 24, temperature: 0,
        });
        assert.equal(byIds.choices[0].text, want.text);
      }
    });

    test("seeded sampling equals loom run with the same sampler settings", async (t) => {
      if (!guard(t)) return;
      const want = await loomRun(model, PROMPTS[0], 20, [
        "--temp", "0.9", "--seed", "1234", "--top-k", "0", "--top-p", "0.9", "--min-p", "0"]);
      const got = await client.completions.create({
        model: name(), prompt: PROMPTS[0], max_tokens: 20, temperature: 0.9, top_p: 0.9,
        seed: 1234,
      });
      assert.equal(got.choices[0].text, want.text);
      assert.equal(got.usage.completion_tokens, want.generated_token_ids.length);
    });

    test("chat (plain template) equals the completion of the message, streamed or not", async (t) => {
      if (!guard(t)) return;
      const prompt = PROMPTS[1];
      const want = await loomRun(model, prompt, 16);
      const whole = await client.chat.completions.create({
        model: name(), messages: [{ role: "user", content: prompt }], max_tokens: 16,
        temperature: 0,
      });
      assert.equal(whole.object, "chat.completion");
      assert.equal(whole.choices[0].message.role, "assistant");
      assert.equal(whole.choices[0].message.content, want.text);
      assert.equal(whole.usage.completion_tokens, want.generated_token_ids.length);

      const stream = await client.chat.completions.create({
        model: name(), messages: [{ role: "user", content: prompt }], max_tokens: 16,
        temperature: 0, stream: true, stream_options: { include_usage: true },
      });
      let text = "";
      let finish = null;
      let usage = null;
      let chunks = 0;
      let role = null;
      for await (const chunk of stream) {
        chunks++;
        assert.equal(chunk.object, "chat.completion.chunk");
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices[0];
        if (!choice) continue;
        if (choice.delta.role) role = choice.delta.role;
        text += choice.delta.content ?? "";
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      assert.equal(role, "assistant");
      assert.equal(text, want.text);
      assert.equal(finish, whole.choices[0].finish_reason);
      assert.deepEqual(usage, whole.usage);
      assert.ok(chunks >= 3);
    });

    test("streamed completions end with [DONE] and carry no usage unless asked", async (t) => {
      if (!guard(t)) return;
      const res = await fetch(server.base + "/completions", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ model: name(), prompt: PROMPTS[2], max_tokens: 8, temperature: 0,
                               stream: true }),
      });
      assert.equal(res.status, 200);
      assert.match(res.headers.get("content-type"), /^text\/event-stream/);
      const events = await readSse(res);
      assert.equal(events.at(-1), "[DONE]");
      const chunks = events.slice(0, -1);
      assert.ok(chunks.every((c) => c.object === "text_completion" && !("usage" in c)));
      const want = await loomRun(model, PROMPTS[2], 8);
      assert.equal(chunks.map((c) => c.choices[0].text).join(""), want.text);
      assert.ok(chunks.at(-1).choices[0].finish_reason);
    });

    test("the final chunk and whole responses carry the server's timings", async (t) => {
      if (!guard(t)) return;
      const body = { model: name(), prompt: PROMPTS[0], max_tokens: 12, temperature: 0,
                     ignore_eos: true };
      const post = (b) => fetch(server.base + "/completions", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(b),
      });
      const events = await readSse(await post({ ...body, stream: true }));
      const chunks = events.slice(0, -1);
      // Only the chunk that carries finish_reason has them.
      assert.deepEqual(chunks.map((c) => "timings" in c), chunks.map((c, i) => i === chunks.length - 1));
      const whole = await (await post(body)).json();
      for (const timings of [chunks.at(-1).timings, whole.timings]) {
        assert.equal(timings.predicted_n, 12);
        assert.ok(timings.prompt_n > 0);
        assert.ok(timings.ttft_ms > 0 && timings.ttft_ms >= timings.queue_ms, JSON.stringify(timings));
        assert.ok(timings.predicted_ms > 0);
        const rate = 11 / (timings.predicted_ms / 1000);
        assert.ok(Math.abs(timings.predicted_per_second - rate) <= 1e-6 * rate, JSON.stringify(timings));
      }
    });

    test("return_token_ids: the ids of prompt and reply, and a continuation from them is exact", async (t) => {
      if (!guard(t)) return;
      const want = await loomRun(model, PROMPTS[1], 16);
      const post = (b) => fetch(server.base + "/completions", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ model: name(), max_tokens: 16, temperature: 0, return_token_ids: true, ...b }),
      });
      const whole = await (await post({ prompt: PROMPTS[1] })).json();
      assert.deepEqual(whole.prompt_token_ids, want.prompt_token_ids);
      assert.deepEqual(whole.choices[0].token_ids, want.generated_token_ids);
      const events = (await readSse(await post({ prompt: PROMPTS[1], stream: true }))).slice(0, -1);
      assert.deepEqual(events[0].prompt_token_ids, want.prompt_token_ids);
      assert.deepEqual(events.flatMap((c) => c.choices[0].token_ids), want.generated_token_ids);
      assert.equal(events.map((c) => c.choices[0].text).join(""), want.text);
      // Resuming from the prompt plus the first k generated ids gives the rest of the same text.
      const k = 5;
      const rest = await (await post({
        prompt: [...want.prompt_token_ids, ...want.generated_token_ids.slice(0, k)], max_tokens: 16 - k,
      })).json();
      assert.deepEqual(rest.choices[0].token_ids, want.generated_token_ids.slice(k));
    });

    test("log-probabilities: one entry per token, the greedy choice on top", async (t) => {
      if (!guard(t)) return;
      const r = await client.chat.completions.create({
        model: name(), messages: [{ role: "user", content: PROMPTS[0] }], max_tokens: 6,
        temperature: 0, logprobs: true, top_logprobs: 3,
      });
      const content = r.choices[0].logprobs.content;
      assert.equal(content.length, r.usage.completion_tokens);
      for (const e of content) {
        assert.ok(e.logprob <= 0);
        assert.equal(e.top_logprobs.length, 3);
        assert.equal(e.top_logprobs[0].token, e.token);
        assert.ok(Array.isArray(e.bytes));
      }
      const c = await client.completions.create({
        model: name(), prompt: PROMPTS[0], max_tokens: 6, temperature: 0, logprobs: 2,
      });
      assert.equal(c.choices[0].logprobs.tokens.length, c.usage.completion_tokens);
      assert.equal(Object.keys(c.choices[0].logprobs.top_logprobs[0]).length, 2);
    });

    test("a stop string ends the text before it", async (t) => {
      if (!guard(t)) return;
      const want = await loomRun(model, PROMPTS[0], 40);
      const stop = want.text.slice(Math.floor(want.text.length / 2)).slice(0, 3);
      const got = await client.completions.create({
        model: name(), prompt: PROMPTS[0], max_tokens: 40, temperature: 0, stop: [stop],
      });
      assert.equal(got.choices[0].text, want.text.slice(0, want.text.indexOf(stop)));
      assert.equal(got.choices[0].finish_reason, "stop");
    });
  });
}
