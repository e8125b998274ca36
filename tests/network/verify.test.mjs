// Verified work (docs/network.md, "Verification"): two honest `loom node`s and a cheating node
// serve stories260K under the same name.  The cheat is a node agent written here: it speaks the
// protocol (hello, an Ed25519-signed register, heartbeats), claims the real weights' sha256, and
// answers every request with random tokens; asked to verify, it scores everything as implausible
// to frame honest nodes.  The hub re-executes sampled attempts on another node and sends canaries:
// the cheat is found out (untrusted, no more work, its pending credit voided or forfeited, the
// ledger sound) and the honest nodes, with the same traffic, are never flagged.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";

import OpenAI from "openai";

import {
  FACTS, handMadeNode, hubJobs, hubStatus, loom, makeKey, nodeSocket, startHub, startNode,
  waitForNode,
} from "./helpers.mjs";
import { requireShared, storiesModel, synthModel, tmpDir, waitFor } from "../serve/helpers.mjs";

const PRICES = ["--price", "*=1000:2000", "--operator-share", "0.9"];
const json = async (args) => JSON.parse(await loom(args));
const book = (db, name) => json(["hub", "ledger", "show", name, "--db", db, "--json", "--lines", "10000"]);
const check = (db) => json(["hub", "ledger", "check", "--db", db, "--json"]);

// A node that returns random tokens for stories260K (vocabulary 512).
async function startCheat(hub, modelPath) {
  const me = await handMadeNode(hub);
  const ws = await nodeSocket(hub);
  ws.send({ v: 1, type: "hello", node_id: me.id });
  const challenge = await ws.next();
  assert.equal(challenge?.type, "challenge");
  const weights = fs.readFileSync(modelPath);
  const model = {
    name: "stories260K", sha256: crypto.createHash("sha256").update(weights).digest("hex"),
    weight_bytes: weights.length, kv_bytes_per_token: 4096, context: 512, loaded: true,
  };
  ws.send({ v: 1, type: "register", node_id: me.id, signature: me.sign(challenge.nonce, challenge.hub_id),
            facts: FACTS, models: [model], pod: null, max_concurrency: 2 });
  assert.equal((await ws.next())?.type, "welcome");
  const cheat = { id: me.id, assigns: 0, scorings: 0, running: 0, stopped: false };
  const heartbeat = () => ws.send({ v: 1, type: "heartbeat", running: cheat.running, waiting: 0,
                                    mem_free_bytes: 5e8, draining: false, paused: false,
                                    loaded: ["stories260K"] });
  heartbeat();
  const beat = setInterval(heartbeat, 500);
  const random = (n) => Array.from({ length: n }, () => crypto.randomInt(3, 512));
  const pause = (ms) => new Promise((r) => setTimeout(r, ms));
  async function serve(a) {
    cheat.running += 1;
    const r = a.request;
    const scoring = Array.isArray(r.score_token_ids);
    const prompt = Array.isArray(r.prompt) ? r.prompt
                                           : random(Math.ceil(String(r.prompt ?? "x").length / 4));
    ws.send({ v: 1, type: "accepted", attempt_id: a.attempt_id, prompt_token_ids: prompt });
    const ids = scoring ? r.score_token_ids : random(r.max_tokens ?? 16);
    // Paced like a real node (a few ms a token), in chunks of up to 4 tokens.
    for (let i = 0, index = 0; i < ids.length; i += 4, index += 1) {
      await pause(8);
      const part = ids.slice(i, i + 4);
      const chunk = { v: 1, type: "chunk", attempt_id: a.attempt_id, index,
                      text: part.map((id) => ` w${id}`).join(""), token_ids: part };
      if (scoring) {  // every token called impossible: an attempt to frame the node checked
        chunk.logprobs = part.map(() => -40);
        chunk.best_logprobs = part.map(() => -0.5);
      }
      ws.send(chunk);
    }
    ws.send({ v: 1, type: "complete", attempt_id: a.attempt_id, finish_reason: "length",
              prompt_tokens: prompt.length, completion_tokens: ids.length });
    cheat.running -= 1;
  }
  (async () => {
    while (!cheat.stopped) {
      const f = await ws.next(1000);
      if (f?.type !== "assign") continue;
      cheat.assigns += 1;
      if (Array.isArray(f.request.score_token_ids)) cheat.scorings += 1;
      serve(f);
    }
  })();
  cheat.stop = () => {
    cheat.stopped = true;
    clearInterval(beat);
    ws.close();
  };
  await waitForNode(hub, me.id);
  return cheat;
}

const PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went", "One day a bird",
                 "Tim had a big red", "The sun was hot and"];
// A round of `n` concurrent requests, greedy and sampled; every one is answered.
async function round(client, n) {
  const all = [];
  for (let i = 0; i < n; i++) {
    const greedy = i % 2 === 0;
    all.push(client.completions.create({
      model: "stories260K", prompt: PROMPTS[crypto.randomInt(PROMPTS.length)],
      max_tokens: 16 + crypto.randomInt(24),
      ...(greedy ? { temperature: 0 } : { temperature: 0.8, seed: crypto.randomInt(1e9) }),
    }));
  }
  for (const res of await Promise.all(all)) assert.ok(res.usage.completion_tokens > 0);
}
const nodeRep = (s, id) => s.verification.nodes.find((n) => n.node_id === id);
const HUB_ARGS = [...PRICES, "--verify-window-s", "3600", "--verify-rate", "1", "--verify-floor",
                  "0.2", "--canary-interval-s", "1", "--check-wait-s", "30"];

// Sends traffic until node `id` is untrusted; then waits for the checks in flight to end.
async function untilUntrusted(hub, client, id) {
  let s;
  const caught = await waitFor(async () => {
    await round(client, 6);
    s = await hubStatus(hub);
    return nodeRep(s, id)?.untrusted === true;
  }, { timeoutMs: 120000, stepMs: 10 });
  assert.ok(caught, `node ${id} was not caught: ${JSON.stringify(s?.verification)}`);
  assert.ok(await waitFor(async () => (await hubStatus(hub)).verification.checks_running === 0,
                          { timeoutMs: 60000, stepMs: 200 }));
  return hubStatus(hub);
}

// The honest nodes passed checks and failed none.
function assertHonest(s, honest) {
  for (const n of honest) {
    const r = nodeRep(s, n.id);
    assert.ok(r, `node ${n.name} has no reputation`);
    assert.equal(r.checks_failed, 0,
                 `honest node ${n.name} was flagged: ${JSON.stringify(s.verification.recent)}`);
    assert.equal(r.untrusted, false);
    assert.ok(r.checks_passed > 0, JSON.stringify(r));
  }
}

describe("verified work", () => {
  let hub;
  const honest = [];
  let cheat;
  let client;

  before(async () => {
    if (!storiesModel()) return;
    hub = await startHub({ args: HUB_ARGS });
    client = new OpenAI({ baseURL: hub.base, apiKey: await makeKey(hub.db, "alice"), maxRetries: 0 });
    await loom(["hub", "account", "credit", "alice", "1000", "--db", hub.db]);
    for (const name of ["a", "b"]) honest.push(await startNode(hub, name, [storiesModel()]));
    cheat = await startCheat(hub, storiesModel());
  });
  after(async () => {
    cheat?.stop();
    for (const n of honest) await n.stop();
    if (hub) await hub.stop();
  });

  const nodeRep = (s, id) => s.verification.nodes.find((n) => n.node_id === id);

  test("the cheat is caught; the honest nodes never are", async (t) => {
    if (!requireShared(t)) return;
    let s = await untilUntrusted(hub, client, cheat.id);
    const bad = nodeRep(s, cheat.id);
    assert.ok(bad.checks_failed >= 3, JSON.stringify(bad));
    assert.equal(s.nodes.find((n) => n.node_id === cheat.id)?.untrusted, true);
    assertHonest(s, honest);
    // The cheat served real traffic and was paid for it, but none of that credit is left to it.
    const jobs = await hubJobs(hub.db);
    const byNode = (id) => jobs.flatMap((j) => j.attempts).filter((a) => a.node_id === id && a.tokens > 0);
    assert.ok(byNode(cheat.id).length > 0, "the cheat got no consumer work");
    for (const n of honest) assert.ok(byNode(n.id).length > 0, `node ${n.name} got no work`);
    assert.equal((await book(hub.db, `pending:${cheat.id}`)).balance, 0);
    assert.equal((await book(hub.db, `available:${cheat.id}`)).balance, 0);
    // Every micro-credit it was paid went back: to the consumer by a failed check's void, or to
    // the fee by the forfeit when it became untrusted (whatever no check had voided by then).
    const pendingBook = `pending:${cheat.id}`;
    const ledgerOf = (await book(hub.db, pendingBook)).transactions;
    const sum = (kind) => ledgerOf.filter((tx) => tx.kind === kind)
        .flatMap((tx) => tx.lines).filter((l) => l.book === pendingBook)
        .reduce((a, l) => a + Math.abs(l.amount), 0);
    const paid = sum("settle"), voided = sum("void"), forfeited = sum("forfeit");
    assert.ok(paid > 0 && voided > 0, JSON.stringify({ paid, voided, forfeited }));
    assert.equal(voided + forfeited, paid);
    for (const n of honest) assert.ok((await book(hub.db, `pending:${n.id}`)).balance > 0);
    assert.deepEqual((await check(hub.db)).problems, []);

    // From now on the cheat gets nothing: neither consumer work nor canaries nor checks.
    const before = new Set(jobs.map((j) => j.job_id));
    const assigned = cheat.assigns;
    await round(client, 6);
    await new Promise((r) => setTimeout(r, 1500));  // a canary or two
    assert.equal(cheat.assigns, assigned);
    const later = (await hubJobs(hub.db)).filter((j) => !before.has(j.job_id));
    assert.equal(later.length, 6);
    for (const j of later) for (const a of j.attempts) assert.notEqual(a.node_id, cheat.id);

    // What verification cost, as the hub reports it (and `loom hub status` prints it).
    s = await hubStatus(hub);
    assert.ok(s.verification.share > 0 && s.verification.share < 1, JSON.stringify(s.verification));
    const text = await loom(["hub", "status", "--hub", hub.url, "--admin-key", "test-admin-key"]);
    assert.match(text, /verification: \d+ passed, \d+ failed, .*% of the network's compute/);
    assert.match(text, new RegExp(`${cheat.id}\\s+UNTRUSTED`));
    t.diagnostic(`verification: ${s.verification.checks_passed} passed, ` +
                 `${s.verification.checks_failed} failed, ${s.verification.checks_dropped} dropped, ` +
                 `${s.verification.canaries_sent} canaries, share ${s.verification.share.toFixed(3)}, ` +
                 `cheat scored ${cheat.scorings} checks; its credit ${paid}: voided ${voided}, ` +
                 `forfeited ${forfeited}; the cheat's failed checks: ` +
                 JSON.stringify(s.verification.recent.filter((c) => c.passed === false)
                     .map((c) => [c.greedy ? "greedy" : "sampled", c.mean_logprob?.toFixed(2),
                                  c.mismatches, c.tokens])));
  });
});

// The cheat a real node can be: `loom node` names a model by its file's stem and the hub checks
// nothing else, so another model's file called stories260K.gguf is served under that name.
describe("another model under the same name", () => {
  let hub;
  const honest = [];
  let impostor;
  let client;

  before(async () => {
    if (!storiesModel()) return;
    const dir = fs.mkdtempSync(path.join(tmpDir(), "impostor-"));
    const file = path.join(dir, "stories260K.gguf");
    fs.copyFileSync(await synthModel("f32", "tiny"), file);
    hub = await startHub({ args: HUB_ARGS });
    client = new OpenAI({ baseURL: hub.base, apiKey: await makeKey(hub.db, "bob"), maxRetries: 0 });
    await loom(["hub", "account", "credit", "bob", "1000", "--db", hub.db]);
    for (const name of ["c", "d"]) honest.push(await startNode(hub, name, [storiesModel()]));
    impostor = await startNode(hub, "impostor", [file]);
  });
  after(async () => {
    for (const n of [...honest, impostor]) if (n) await n.stop();
    if (hub) await hub.stop();
  });

  test("the node serving another model is caught; the honest ones are not", async (t) => {
    if (!requireShared(t)) return;
    const s = await untilUntrusted(hub, client, impostor.id);
    assertHonest(s, honest);
    assert.equal((await book(hub.db, `pending:${impostor.id}`)).balance, 0);
    assert.equal((await book(hub.db, `available:${impostor.id}`)).balance, 0);
    assert.deepEqual((await check(hub.db)).problems, []);
    t.diagnostic(`impostor's failed checks: ` + JSON.stringify(
        s.verification.recent.filter((c) => c.passed === false).map((c) => c.why)));
  });
});
