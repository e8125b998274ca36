// A hub and four nodes with different memory limits, through the official OpenAI client: each
// request is placed whole on a node that can hold its model (a model too big for node A runs on
// B; a model too big for any one node runs on a two-rank pod), greedy output through the hub is
// `loom run`'s, and a node killed mid-stream is replaced by another that continues the stream
// with exactly the text an uninterrupted run gives.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

import { loomRun, requireShared, storiesModel, synthModel, waitFor } from "../serve/helpers.mjs";
import { decisions, hubJobs, hubStatus, loom, makeKey, startHub, startNode } from "./helpers.mjs";

describe("hub placement and failover", () => {
  let hub;
  const nodes = {};
  let client;
  let small;  // 31 MB of weights (small-q8_0)
  let big;    // 118 MB (small-f32)

  before(async () => {
    if (!storiesModel()) return;
    small = await synthModel("q8_0", "small");
    big = await synthModel("f32", "small");
    hub = await startHub();
    client = new OpenAI({ baseURL: hub.base, apiKey: await makeKey(hub.db), maxRetries: 0 });
    // KV cache per model: 2 sequences x 512 positions x 16 KiB.
    const all = [storiesModel(), small, big];
    nodes.a = await startNode(hub, "a", all, { args: ["--max-memory", "20M"] });
    nodes.b = await startNode(hub, "b", all, { args: ["--max-memory", "60M"] });
    // Two local ranks, split as the cost model predicts fastest for the model.
    nodes.pod = await startNode(hub, "pod", [big], { args: ["--max-memory", "300M", "--ranks", "2"] });
  });
  after(async () => {
    for (const n of Object.values(nodes)) await n.stop("SIGKILL");
    if (hub) await hub.stop();
  });

  const guard = (t) => requireShared(t);

  test("lists the models the network can serve, with their capacity", async (t) => {
    if (!guard(t)) return;
    const ids = [];
    for await (const m of await client.models.list()) {
      ids.push(m.id);
      assert.ok(m.capacity.targets >= 1, JSON.stringify(m));
    }
    assert.deepEqual(ids.sort(), ["small-f32", "small-q8_0", "stories260K"]);
  });

  test("a model too big for node A runs on B, and equals loom run", async (t) => {
    if (!guard(t)) return;
    const want = await loomRun(small, "Once upon a time", 24);
    const got = await client.completions.create({
      model: "small-q8_0", prompt: "Once upon a time", max_tokens: 24, temperature: 0,
    });
    assert.equal(got.choices[0].text, want.text);
    assert.equal(got.usage.completion_tokens, want.generated_token_ids.length);
    assert.equal(got.usage.prompt_tokens, want.prompt_token_ids.length);
    const d = (await decisions(hub)).findLast((x) => x.job_id === got.id);
    assert.ok(d.placed && d.target_id === nodes.b.id, JSON.stringify(d));
    const a = d.candidates.find((c) => c.target_id === nodes.a.id);
    assert.ok(a && !a.eligible && /GB/.test(a.rejected), JSON.stringify(d.candidates));
  });

  test("a model too big for any one node runs on the two-rank pod, streamed, equal to loom run", async (t) => {
    if (!guard(t)) return;
    const want = await loomRun(big, "The little dog", 32, ["--temp", "0", "--chat"]);
    const stream = await client.chat.completions.create({
      model: "small-f32", messages: [{ role: "user", content: "The little dog" }],
      max_tokens: 32, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let text = "";
    let usage = null;
    let id = "";
    for await (const chunk of stream) {
      id = chunk.id;
      if (chunk.usage) usage = chunk.usage;
      text += chunk.choices[0]?.delta?.content ?? "";
    }
    assert.equal(text, want.text);
    assert.equal(usage.completion_tokens, want.generated_token_ids.length);
    const d = (await decisions(hub)).findLast((x) => x.job_id === id);
    assert.equal(d.target_id, nodes.pod.id, JSON.stringify(d));
    // The pod's split came from the cost model, over both ranks.
    const split = nodes.pod.err.match(/small-f32 on 2 ranks: tp=(\d) pp=(\d)/);
    assert.ok(split && Number(split[1]) * Number(split[2]) === 2, nodes.pod.err);
    const pod = (await hubStatus(hub)).nodes.find((n) => n.node_id === nodes.pod.id);
    assert.equal(pod.ranks, 2);
    for (const other of [nodes.a.id, nodes.b.id]) {
      const c = d.candidates.find((x) => x.target_id === other);
      assert.ok(c && !c.eligible, JSON.stringify(d.candidates));
    }
  });

  test("hub and node status say what is connected and what runs", async (t) => {
    if (!guard(t)) return;
    const out = await loom(["hub", "status", "--hub", hub.url.slice(0, -1), "--admin-key", "test-admin-key"]);
    assert.match(out, new RegExp(nodes.pod.id));
    assert.match(out, /small-f32/);
    const ns = JSON.parse(await loom(["node", "status", "--dir", nodes.pod.dir, "--json"]));
    assert.equal(ns.node_id, nodes.pod.id);
    assert.equal(ns.connected, true);
    await waitFor(async () => (await hubStatus(hub)).nodes.length >= 3, { timeoutMs: 5000 });
  });
});

// Failover on a quantized model: Loom's products give the same bits whether a position was decoded
// alone or in a batched prompt (Q8_0 included), so the continuation elsewhere, which prefills the
// streamed tokens as one batch, is exact token for token.
describe("failover mid-stream", () => {
  let hub;
  const nodes = {};
  let client;
  let model;

  before(async () => {
    if (!storiesModel()) return;
    model = await synthModel("q8_0", "small");
    hub = await startHub();
    client = new OpenAI({ baseURL: hub.base, apiKey: await makeKey(hub.db), maxRetries: 0 });
    nodes.x = await startNode(hub, "x", [model], { args: ["--max-memory", "200M"] });
    nodes.y = await startNode(hub, "y", [model], { args: ["--max-memory", "200M"] });
  });
  after(async () => {
    for (const n of Object.values(nodes)) await n.stop("SIGKILL");
    if (hub) await hub.stop();
  });

  test("a node killed mid-stream: another continues the stream with the uninterrupted text", async (t) => {
    if (!requireShared(t)) return;
    const n = 300;
    const want = await loomRun(model, "Lily wanted to", n);
    assert.ok(want.text.length > 200, "the reference run ended early: choose another prompt");
    const stream = await client.completions.create({
      model: "small-q8_0", prompt: "Lily wanted to", max_tokens: n, temperature: 0, stream: true,
    });
    let text = "";
    let killed = null;
    let id = "";
    for await (const chunk of stream) {
      id = chunk.id;
      text += chunk.choices[0]?.text ?? "";
      if (!killed && text.length > 40) {
        const s = await hubStatus(hub);
        const job = s.jobs.find((j) => j.job_id === id);
        killed = Object.values(nodes).find((x) => x.id === job.node_id);
        await killed.stop("SIGKILL");
      }
    }
    assert.ok(killed, "the stream ended before a node could be killed");
    assert.equal(text, want.text);
    const job = (await hubJobs(hub.db)).find((j) => j.job_id === id);
    assert.equal(job.state, "completed");
    assert.equal(job.attempts.length, 2);
    assert.equal(job.attempts[0].node_id, killed.id);
    assert.equal(job.attempts[0].state, "failed");
    assert.equal(job.attempts[1].state, "completed");
    assert.equal(job.attempts[0].tokens + job.attempts[1].tokens, job.completion_tokens);
  });
});
