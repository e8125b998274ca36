// Many clients at once: 32 simultaneous streaming clients (more than there are slots) get
// correct, complete, independent outputs; a client that disconnects mid-stream frees its slot at
// once; a full queue answers 503 with Retry-After.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

import {
  loomRun, metric, requireShared, startServer, storiesModel, synthModel, waitFor,
} from "./helpers.mjs";

const PROMPTS = [
  "Once upon a time", "The little dog", "Lily wanted to", "One day, Tom", "The sun was",
  "A big red ball", "Sam and his mom", "There was a cat",
];

describe("concurrency on stories260K", () => {
  let model;
  before(() => {
    model = storiesModel();
  });

  test("32 concurrent streams each get exactly their own greedy output", async (t) => {
    if (!requireShared(t)) return;
    const n = 40;
    const want = await Promise.all(PROMPTS.map((p) => loomRun(model, p, n)));
    const server = await startServer(model, ["--parallel", "8", "--queue", "64"]);
    t.after(() => server.stop());
    const client = new OpenAI({ baseURL: server.base, apiKey: "unused", maxRetries: 0 });
    const clients = Array.from({ length: 32 }, async (_, i) => {
      const prompt = PROMPTS[i % PROMPTS.length];
      const chat = i % 2 === 0;
      let text = "";
      let finish = null;
      let usage = null;
      const stream = chat
          ? await client.chat.completions.create({
              model: "stories260K", messages: [{ role: "user", content: prompt }], max_tokens: n,
              temperature: 0, stream: true, stream_options: { include_usage: true } })
          : await client.completions.create({
              model: "stories260K", prompt, max_tokens: n, temperature: 0, stream: true,
              stream_options: { include_usage: true } });
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        const c = chunk.choices[0];
        if (!c) continue;
        text += chat ? (c.delta.content ?? "") : c.text;
        if (c.finish_reason) finish = c.finish_reason;
      }
      return { i, prompt, text, finish, usage };
    });
    const results = await Promise.all(clients);
    for (const r of results) {
      const w = want[r.i % PROMPTS.length];
      assert.equal(r.text, w.text, `client ${r.i} (${r.prompt})`);
      assert.equal(r.finish, w.finish_reason === "stop" ? "stop" : "length");
      assert.equal(r.usage.completion_tokens, w.generated_token_ids.length);
      assert.equal(r.usage.prompt_tokens, w.prompt_token_ids.length);
    }
    // Every slot was used and nothing is left running.
    const health = await (await fetch(server.url + "health")).json();
    assert.equal(health.slots, 8);
    assert.equal(health.slots_busy, 0);
    assert.equal(health.queue, 0);
    assert.equal(await metric(server, "loom_completions_total"), 32);
    const steps = await metric(server, "loom_engine_steps_total");
    const tokens = await metric(server, "loom_engine_batch_tokens_total");
    assert.ok(tokens / steps > 2, `batches averaged ${tokens / steps} tokens: no batching?`);
  });

  test("a client that disconnects mid-stream frees its slot at once", async (t) => {
    if (!requireShared(t)) return;
    const server = await startServer(model, ["--parallel", "1"]);
    t.after(() => server.stop());
    const client = new OpenAI({ baseURL: server.base, apiKey: "unused", maxRetries: 0 });
    const controller = new AbortController();
    const stream = await client.completions.create(
        { model: "stories260K", prompt: "Once upon a time", max_tokens: 2000, ignore_eos: true,
          temperature: 0, stream: true },
        { signal: controller.signal });
    let pieces = 0;
    try {
      for await (const chunk of stream) {
        if (++pieces === 3) controller.abort();
      }
    } catch (e) {
      // The client library reports the abort (or just ends the stream), depending on its version.
    }
    assert.ok(pieces >= 3);
    const freed = await waitFor(async () => {
      const h = await (await fetch(server.url + "health")).json();
      return h.slots_busy === 0;
    }, { timeoutMs: 2000 });
    assert.ok(freed, "the slot is still busy after the client left");
    assert.equal(await metric(server, "loom_requests_cancelled_total"), 1);
    // The slot serves the next request right away.
    const started = Date.now();
    const r = await client.completions.create(
        { model: "stories260K", prompt: "Hi", max_tokens: 4, temperature: 0 });
    assert.equal(r.usage.completion_tokens, 4);
    assert.ok(Date.now() - started < 2000);
  });

  test("a full queue answers 503 with Retry-After", async (t) => {
    // The slot and the queue must stay taken until the third request arrives: stories260K streams
    // its whole context in 0.3-0.4 s, which a loaded machine can let pass; a 30M-parameter float
    // model takes seconds for 2000 tokens.
    const server = await startServer(await synthModel("f32", "small"),
                                     ["--parallel", "1", "--queue", "1"]);
    t.after(() => server.stop());
    const long = (signal) => fetch(server.base + "/completions", {
      method: "POST", headers: { "Content-Type": "application/json" }, signal,
      body: JSON.stringify({ model: "small-f32", prompt: "Once", max_tokens: 2000,
                             ignore_eos: true, stream: true }),
    });
    const controller = new AbortController();
    const health = async () => (await fetch(server.url + "health")).json();
    // The holder's 200 comes when it is queued, before it takes the slot; until it does, the
    // queue is full and the next request gets the 503 (a loaded machine took that long).
    const running = await long(controller.signal);  // holds the slot
    assert.equal(running.status, 200);
    assert.ok(await waitFor(async () => (await health()).slots_busy === 1));
    const waiting = long(controller.signal);        // waits in the queue
    const queued = await waitFor(async () => {
      const h = await health();
      return h.slots_busy === 1 && h.queue === 1;
    });
    assert.ok(queued);
    const client = new OpenAI({ baseURL: server.base, apiKey: "unused", maxRetries: 0 });
    await assert.rejects(
        client.completions.create({ model: "small-f32", prompt: "x", max_tokens: 2 }),
        (e) => e.status === 503 && e.code === "server_busy" && e.headers.get("retry-after") === "1");
    controller.abort();
    await waiting.catch(() => {});
    await running.body?.cancel().catch(() => {});
    const idle = await waitFor(async () => {
      const h = await health();
      return h.slots_busy === 0 && h.queue === 0;
    });
    assert.ok(idle);
  });
});
