// Credits through the hub (network/ledger, the store's ledger): a priced request reserves its worst
// case, is charged what the hub counted (the usage the client sees), pays the node that did the
// work (pending, then available after the window), and the ledger stays sound through a refused
// request, a node killed mid-stream and a hub killed with SIGKILL mid-load.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import OpenAI from "openai";

import { hubJobs, loom, makeKey, startHub, startNode } from "./helpers.mjs";
import { requireShared, storiesModel, synthModel, waitFor } from "../serve/helpers.mjs";

// 1000 and 2000 credits per million tokens: 1000 micro-credits a prompt token, 2000 a generated one.
const PRICES = ["--price", "*=1000:2000", "--operator-share", "0.9"];
const cost = (prompt, completion) => prompt * 1000 + completion * 2000;

const json = async (args) => JSON.parse(await loom(args));
const account = (db, name) => json(["hub", "account", "show", name, "--db", db, "--json"]);
const book = (db, name) => json(["hub", "ledger", "show", name, "--db", db, "--json"]);
const check = (db) => json(["hub", "ledger", "check", "--db", db, "--json"]).catch((e) => {
  throw new Error(`ledger check failed: ${e.stdout ?? e}`);
});
const credit = (db, name, credits) => loom(["hub", "account", "credit", name, credits, "--db", db]);

describe("credits", () => {
  let hub;
  let node;
  let alice;

  before(async () => {
    if (!storiesModel()) return;
    hub = await startHub({ args: [...PRICES, "--verify-window-s", "1"] });
    alice = new OpenAI({ baseURL: hub.base, apiKey: await makeKey(hub.db, "alice"), maxRetries: 0 });
    await credit(hub.db, "alice", "10");
    node = await startNode(hub, "a", [storiesModel()]);
  });
  after(async () => {
    if (node) await node.stop();
    if (hub) await hub.stop();
  });

  test("a request is charged the tokens the hub counted and its node is paid its share", async (t) => {
    if (!requireShared(t)) return;
    const res = await alice.completions.create({
      model: "stories260K", prompt: "Once upon a time", max_tokens: 20, temperature: 0,
    });
    const charge = cost(res.usage.prompt_tokens, res.usage.completion_tokens);
    assert.ok(res.usage.completion_tokens > 0);
    const a = await account(hub.db, "alice");
    assert.equal(a.available, 10_000_000 - charge);
    assert.equal(a.held, 0);
    const settle = a.transactions.find((tx) => tx.kind === "settle" && tx.ref === res.id);
    assert.ok(settle, `no settlement of ${res.id}: ${JSON.stringify(a.transactions)}`);

    const [job] = (await hubJobs(hub.db)).filter((j) => j.job_id === res.id);
    assert.equal(job.attempts.length, 1);
    const pay = Math.floor(charge * 0.9);
    const paid = settle.lines.filter((l) => l.book === `pending:${node.id}`);
    assert.deepEqual(paid.map((l) => [l.amount, l.attempt_id]), [[pay, job.attempts[0].attempt_id]]);
    assert.equal(settle.lines.find((l) => l.book === "fee").amount, charge - pay);

    // After the 1 s window the hub releases the pending credit (it looks every 10 s).
    assert.ok(await waitFor(async () => (await book(hub.db, `available:${node.id}`)).balance === pay,
                            { timeoutMs: 30000, stepMs: 500 }),
              "the pending credit was not released");
    assert.equal((await book(hub.db, `pending:${node.id}`)).balance, 0);
    const c = await check(hub.db);
    assert.deepEqual(c.problems, []);
    assert.equal(c.fee, charge - pay);
  });

  test("a request its account cannot cover is refused with 402 and costs nothing", async (t) => {
    if (!requireShared(t)) return;
    const bob = new OpenAI({ baseURL: hub.base, apiKey: await makeKey(hub.db, "bob"), maxRetries: 0 });
    await credit(hub.db, "bob", "0.001");
    await assert.rejects(
      bob.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 100 }),
      (e) => {
        assert.equal(e.status, 402);
        assert.equal(e.code, "insufficient_credits");
        assert.match(e.message, /may cost up to 0\.2\d+ credits .* the account has 0\.001000/);
        return true;
      });
    const b = await account(hub.db, "bob");
    assert.equal(b.available, 1000);
    assert.equal(b.held, 0);
    assert.deepEqual((await check(hub.db)).problems, []);
  });
});

describe("credits across failures", () => {
  let hub;
  const nodes = {};
  let key;
  const args = [...PRICES, "--grace-s", "20"];

  before(async () => {
    if (!storiesModel()) return;
    const model = await synthModel("f32", "small");
    hub = await startHub({ args });
    key = await makeKey(hub.db, "carol");
    await credit(hub.db, "carol", "100");
    for (const n of ["x", "y"]) {
      nodes[n] = await startNode(hub, n, [model], { args: ["--max-memory", "300M", "--ctx", "2048"] });
    }
  });
  after(async () => {
    for (const n of Object.values(nodes)) await n.stop("SIGKILL");
    if (hub) await hub.stop();
  });

  test("a stream failed over mid-way is charged once and pays each attempt for its own tokens", async (t) => {
    if (!requireShared(t)) return;
    const client = new OpenAI({ baseURL: hub.base, apiKey: key, maxRetries: 0 });
    const stream = await client.completions.create({
      model: "small-f32", prompt: "Lily wanted to", max_tokens: 300, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    let text = "", id = "", usage = null, killed = null;
    for await (const chunk of stream) {
      id = chunk.id;
      if (chunk.usage) usage = chunk.usage;
      text += chunk.choices[0]?.text ?? "";
      if (!killed && text.length > 40) {
        const job = (await (await fetch(hub.url + "v1/admin/status", {
          headers: { Authorization: "Bearer test-admin-key" },
        })).json()).jobs.find((j) => j.job_id === id);
        killed = Object.values(nodes).find((n) => n.id === job.node_id);
        await killed.stop("SIGKILL");
      }
    }
    assert.ok(killed && usage);
    const [job] = (await hubJobs(hub.db)).filter((j) => j.job_id === id);
    assert.equal(job.attempts.length, 2);
    assert.equal(job.attempts[0].tokens + job.attempts[1].tokens, usage.completion_tokens);
    const charge = cost(usage.prompt_tokens, usage.completion_tokens);
    const c = await account(hub.db, "carol");
    assert.equal(c.available, 100_000_000 - charge);
    assert.equal(c.held, 0);
    const settles = c.transactions.filter((tx) => tx.kind === "settle" && tx.ref === id);
    assert.equal(settles.length, 1);
    const paid = settles[0].lines.filter((l) => l.book.startsWith("pending:"));
    const [first, second] = job.attempts;
    assert.deepEqual(paid.map((l) => [l.book, l.attempt_id, l.amount]), [
      [`pending:${first.node_id}`, first.attempt_id,
       Math.floor(cost(usage.prompt_tokens, first.tokens) * 0.9)],
      [`pending:${second.node_id}`, second.attempt_id, Math.floor(cost(0, second.tokens) * 0.9)],
    ]);
    assert.deepEqual((await check(hub.db)).problems, []);
    delete nodes[Object.keys(nodes).find((k) => nodes[k] === killed)];
  });

  test("a hub killed mid-load gives every hold back when it restarts", async (t) => {
    if (!requireShared(t)) return;
    const client = new OpenAI({ baseURL: hub.base, apiKey: key, maxRetries: 0 });
    const before = (await account(hub.db, "carol")).available;
    const ids = new Set();
    const streams = [0, 1].map(async (i) => {
      try {
        const s = await client.completions.create({
          model: "small-f32", prompt: `Story ${i}:`, max_tokens: 1500, temperature: 0,
          ignore_eos: true, stream: true,
        });
        for await (const chunk of s) ids.add(chunk.id);
      } catch { /* the hub dies under it */ }
    });
    assert.ok(await waitFor(() => ids.size === 2, { timeoutMs: 20000 }), "streams did not start");
    assert.ok((await account(hub.db, "carol")).held > 0, "nothing was held while streams ran");
    await hub.stop("SIGKILL");
    await Promise.all(streams);
    hub = await startHub({ db: hub.db, port: hub.port, args });
    const c = await account(hub.db, "carol");
    assert.equal(c.held, 0);
    assert.equal(c.available, before, "an interrupted job was charged");
    for (const id of ids) {
      const settle = c.transactions.find((tx) => tx.kind === "settle" && tx.ref === id);
      assert.ok(settle, `job ${id} kept its hold`);
      assert.match(settle.memo, /hub restarted/);
    }
    assert.deepEqual((await check(hub.db)).problems, []);
  });
});
