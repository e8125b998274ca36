// Which models stay loaded where: the hub's load_model / unload_model (hub_models.cc), seen from
// outside through the official openai client, the hub's admin status and `loom node status`.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import OpenAI from "openai";

import { loom, hubStatus, makeKey, startHub, startNode } from "./helpers.mjs";
import { loomRun, requireShared, storiesModel, synthModel, waitFor } from "../serve/helpers.mjs";

const loadedOn = (status, model) =>
  status.nodes.filter((n) => n.models.some((m) => m.name === model && m.loaded)).map((n) => n.node_id);

// One node whose lendable memory holds either model but not both: the one it loaded at start is
// idle, and a request for the other must not be refused for memory that idle weights hold.
describe("room for a request", () => {
  let hub;
  let node;
  let client;
  let f32, q8;

  before(async () => {
    if (!storiesModel()) return;
    f32 = await synthModel("f32", "small");  // 117 MB of weights
    q8 = await synthModel("q8_0", "small");  // 31 MB
    hub = await startHub();
    client = new OpenAI({ baseURL: hub.base, apiKey: await makeKey(hub.db), maxRetries: 0 });
    node = await startNode(hub, "z", [f32, q8],
                           { args: ["--max-memory", "140M", "--parallel", "1", "--ctx", "256"] });
  });
  after(async () => {
    if (node) await node.stop();
    if (hub) await hub.stop();
  });

  test("idle weights are unloaded to load the model a request needs", async (t) => {
    if (!requireShared(t)) return;
    let s = await hubStatus(hub);
    assert.deepEqual(loadedOn(s, "small-f32"), [node.id]);
    assert.deepEqual(loadedOn(s, "small-q8_0"), []);

    const want = await loomRun(q8, "Once upon a time", 24);
    const res = await client.completions.create({
      model: "small-q8_0", prompt: "Once upon a time", max_tokens: 24, temperature: 0,
    });
    assert.equal(res.choices[0].text, want.text);

    s = await hubStatus(hub);
    const unload = s.model_actions.find((a) => a.action === "unload_model");
    assert.ok(unload, `no unload_model in ${JSON.stringify(s.model_actions)}`);
    assert.equal(unload.model, "small-f32");
    assert.equal(unload.node_id, node.id);
    assert.match(unload.reason, /making room for a request for small-q8_0/);
    assert.deepEqual(loadedOn(s, "small-q8_0"), [node.id]);
    const ns = JSON.parse(await loom(["node", "status", "--dir", node.dir, "--json"]));
    assert.deepEqual(ns.models.filter((m) => m.loaded).map((m) => m.name), ["small-q8_0"]);
    assert.match(node.err, /unloaded small-f32 \(the hub asked\)/);
  });
});

// Two nodes holding one model: idle copies beyond the last are unloaded, and a copy is loaded
// again when the remaining one gets busy.
describe("copies follow demand", () => {
  let hub;
  const nodes = {};
  let client;
  let model;

  before(async () => {
    if (!storiesModel()) return;
    model = storiesModel();
    hub = await startHub({ args: ["--unload-idle-s", "2", "--warm-at", "0.5"] });
    client = new OpenAI({ baseURL: hub.base, apiKey: await makeKey(hub.db), maxRetries: 0 });
    nodes.x = await startNode(hub, "x", [model]);
    nodes.y = await startNode(hub, "y", [model]);
  });
  after(async () => {
    for (const n of Object.values(nodes)) await n.stop();
    if (hub) await hub.stop();
  });

  test("an idle copy is unloaded, the last one kept, and one more loaded under load", async (t) => {
    if (!requireShared(t)) return;
    const ids = [nodes.x.id, nodes.y.id];
    // Idle for 2 s: one copy goes, the network's last one stays.
    assert.ok(await waitFor(async () => loadedOn(await hubStatus(hub), "stories260K").length === 1,
                            { timeoutMs: 20000, stepMs: 200 }),
              "no idle copy was unloaded");
    await new Promise((r) => setTimeout(r, 3000));
    let s = await hubStatus(hub);
    const kept = loadedOn(s, "stories260K");
    assert.equal(kept.length, 1, "the last loaded copy must stay");
    const unloaded = ids.find((id) => id !== kept[0]);
    const idle = s.model_actions.filter((a) => a.action === "unload_model");
    assert.equal(idle.length, 1);
    assert.equal(idle[0].node_id, unloaded);
    assert.match(idle[0].reason, /^idle for \d+ s; loaded copies elsewhere: 1$/);

    // Keep the remaining copy's two slots half busy until the hub loads another copy.
    const want = await loomRun(model, "Once upon a time", 48);
    let stop = false;
    const texts = [];
    const load = (async () => {
      while (!stop) {
        const res = await client.completions.create({
          model: "stories260K", prompt: "Once upon a time", max_tokens: 48, temperature: 0,
        });
        texts.push(res.choices[0].text);
      }
    })();
    const warmed = await waitFor(async () => loadedOn(await hubStatus(hub), "stories260K").length === 2,
                                 { timeoutMs: 30000, stepMs: 100 });
    stop = true;
    await load;
    assert.ok(warmed, "no second copy was loaded under load");
    s = await hubStatus(hub);
    const loads = s.model_actions.filter((a) => a.action === "load_model");
    assert.ok(loads.length >= 1);
    assert.equal(loads[0].node_id, unloaded);
    assert.match(loads[0].reason, /^loaded copies: 1, busy slots \d\/2$/);
    assert.ok(texts.length > 0);
    for (const text of texts) assert.equal(text, want.text);
  });
});
