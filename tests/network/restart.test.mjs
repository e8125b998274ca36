// The hub killed with SIGKILL while streams run, then restarted on the same store and port: the
// nodes reconnect by themselves, every job the hub acknowledged is in the store (the finished ones
// completed, the interrupted ones failed with a clear error), and requests work again.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

import { loomRun, requireShared, storiesModel, synthModel, waitFor } from "../serve/helpers.mjs";
import { hubJobs, hubStatus, loom, makeKey, startHub, startNode } from "./helpers.mjs";

describe("hub restart", () => {
  let hub;
  let node;
  let key;

  before(async () => {
    if (!storiesModel()) return;
    hub = await startHub({ args: ["--grace-s", "20"] });
    key = await makeKey(hub.db);
    node = await startNode(hub, "r", [await synthModel("q8_0", "small")], {
      args: ["--max-memory", "300M", "--parallel", "4", "--ctx", "2048"],
    });
  });
  after(async () => {
    if (node) await node.stop("SIGKILL");
    if (hub) await hub.stop();
  });

  test("no acknowledged job is lost; nodes reconnect; interrupted jobs end with a clear error", async (t) => {
    if (!requireShared(t)) return;
    const client = new OpenAI({ baseURL: hub.base, apiKey: key, maxRetries: 0 });
    const done = await client.completions.create({
      model: "small-q8_0", prompt: "Once upon a time", max_tokens: 8, temperature: 0,
    });
    // Three long streams; the hub dies once each has produced text.
    const ids = [];
    const streams = [0, 1, 2].map(async (i) => {
      const stream = await client.completions.create({
        model: "small-q8_0", prompt: `Story ${i}:`, max_tokens: 1500, temperature: 0,
        ignore_eos: true, stream: true,
      });
      let text = "";
      try {
        for await (const chunk of stream) {
          if (!ids.includes(chunk.id)) ids.push(chunk.id);
          text += chunk.choices[0]?.text ?? "";
        }
        return { text, error: null };
      } catch (e) {
        return { text, error: e };
      }
    });
    assert.ok(await waitFor(() => ids.length === 3, { timeoutMs: 20000 }), "streams did not start");
    await hub.stop("SIGKILL");
    const results = await Promise.all(streams);
    for (const r of results) assert.ok(r.error, "a stream went on after its hub died");

    hub = await startHub({ db: hub.db, port: hub.port, args: ["--grace-s", "20"] });
    const back = await waitFor(async () => {
      const s = await hubStatus(hub).catch(() => null);
      return s?.nodes?.some((n) => n.node_id === node.id);
    }, { timeoutMs: 30000 });
    assert.ok(back, "the node did not reconnect to the restarted hub");
    const jobs = await hubJobs(hub.db);
    const byId = new Map(jobs.map((j) => [j.job_id, j]));
    assert.equal(byId.get(done.id)?.state, "completed");
    assert.equal(byId.get(done.id).completion_tokens, 8);
    for (const id of ids) {
      const j = byId.get(id);
      assert.ok(j, `acknowledged job ${id} is missing from the store`);
      assert.equal(j.state, "failed");
      assert.match(j.error, /hub restarted/);
    }
    // And the network serves again.
    const again = new OpenAI({ baseURL: hub.base, apiKey: key, maxRetries: 0 });
    const got = await again.completions.create({
      model: "small-q8_0", prompt: "Once upon a time", max_tokens: 8, temperature: 0,
    });
    assert.equal(got.choices[0].text, done.choices[0].text);
  });

  test("a drained node finishes the stream it runs, takes nothing new, and exits", async (t) => {
    if (!requireShared(t)) return;
    const model = await synthModel("q8_0", "small");
    const want = await loomRun(model, "Lily wanted to", 300);
    const client = new OpenAI({ baseURL: hub.base, apiKey: key, maxRetries: 0 });
    const stream = await client.completions.create({
      model: "small-q8_0", prompt: "Lily wanted to", max_tokens: 300, temperature: 0, stream: true,
    });
    let text = "";
    let drained = false;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? "";
      if (!drained && text.length > 20) {
        drained = true;
        await loom(["node", "drain", "--dir", node.dir]);
        const s = await waitFor(async () => (await hubStatus(hub)).nodes.find((n) => n.draining),
                                { timeoutMs: 5000 });
        assert.ok(s, "the hub did not see the node draining");
      }
    }
    assert.equal(text, want.text);
    const [code] = await node.exited;
    assert.equal(code, 0);
    const ns = JSON.parse(await loom(["node", "status", "--dir", node.dir, "--json"]));
    assert.equal(ns.draining, true);
  });
});
