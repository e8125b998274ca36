// Reserved slots (hub_slots.cc): a node that offers one gets its model's requests first, earns an
// availability credit for every period it answers the hub's probes and a higher share of its
// tokens; when it stops answering it earns nothing more and loses the reservation, for good.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import OpenAI from "openai";

import { hubJobs, hubStatus, loom, makeKey, startHub, startNode } from "./helpers.mjs";
import { requireShared, storiesModel, waitFor } from "../serve/helpers.mjs";

const json = async (args) => JSON.parse(await loom(args));
const book = (db, name) => json(["hub", "ledger", "show", name, "--db", db, "--json"]);
const check = (db) => json(["hub", "ledger", "check", "--db", db, "--json"]);
const slotOf = async (hub) => (await hubStatus(hub)).slots[0];

describe("reserved slots", () => {
  let hub, slot, spare, client;

  before(async () => {
    if (!storiesModel()) return;
    hub = await startHub({
      args: ["--price", "*=1000:2000", "--operator-share", "0.9", "--reserved-multiplier", "1.1",
             "--probe-interval-s", "1", "--slot-period-s", "3", "--slot-share", "0.5",
             "--min-probes", "6", "--standing-s", "2"],
    });
    client = new OpenAI({ baseURL: hub.base, apiKey: await makeKey(hub.db, "alice"), maxRetries: 0 });
    await loom(["hub", "account", "credit", "alice", "100", "--db", hub.db]);
    spare = await startNode(hub, "spare", [storiesModel()]);
    // Four slots: a probe in flight (and the node's own count of running requests, which lags by
    // a heartbeat) never leaves it full, so every request here goes to it.
    slot = await startNode(hub, "slot", [storiesModel()],
                           { args: ["--reserve", "stories260K", "--parallel", "4"] });
  });
  after(async () => {
    if (slot) {
      slot.proc.kill("SIGCONT");
      await slot.stop();
    }
    if (spare) await spare.stop();
    if (hub) await hub.stop();
  });

  test("the slot gets the requests first, and a higher share of what they are charged", async (t) => {
    if (!requireShared(t)) return;
    const ids = [];
    for (let i = 0; i < 4; i++) {
      const res = await client.completions.create({
        model: "stories260K", prompt: "Once upon a time", max_tokens: 8, temperature: 0,
      });
      ids.push(res.id);
    }
    const jobs = (await hubJobs(hub.db)).filter((j) => ids.includes(j.job_id));
    assert.equal(jobs.length, 4);
    for (const j of jobs) assert.deepEqual(j.attempts.map((a) => a.node_id), [slot.id]);
    // 99% (0.9 x 1.1) of each charge goes to the slot, pending until the window passes.
    const pending = await book(hub.db, `pending:${slot.id}`);
    for (const tx of pending.transactions.filter((x) => x.kind === "settle")) {
      const charged = -tx.lines.filter((l) => l.book.startsWith("held:"))
        .reduce((s, l) => s + l.amount, 0) -
        tx.lines.filter((l) => l.book.startsWith("consumer:")).reduce((s, l) => s + l.amount, 0);
      const paid = tx.lines.find((l) => l.book === `pending:${slot.id}`).amount;
      assert.equal(paid, Math.floor(charged * 0.99), JSON.stringify(tx));
    }
  });

  test("a slot that answers its probes earns availability credit each period", async (t) => {
    if (!requireShared(t)) return;
    assert.ok(await waitFor(async () => (await book(hub.db, `available:${slot.id}`)).balance > 0,
                            { timeoutMs: 20000, stepMs: 500 }), "no availability credit was paid");
    const s = await slotOf(hub);
    assert.equal(s.node_id, slot.id);
    assert.equal(s.state, "active");
    assert.ok(s.probes_30d >= 1 && s.availability_30d === 1, JSON.stringify(s));
    const grants = (await book(hub.db, `available:${slot.id}`)).transactions;
    assert.ok(grants.length >= 1);
    for (const g of grants) {
      assert.equal(g.kind, "grant");
      assert.match(g.ref, new RegExp(`^slot:${s.slot_id}:\\d+$`));
      // Every probe of the period answered: the whole period's credit.
      assert.equal(g.lines.find((l) => l.book === `available:${slot.id}`).amount,
                   s.period_credit_micro, JSON.stringify(g));
    }
    assert.ok(s.period_credit_micro > 0);
    // The spare node earns no availability credit.
    assert.equal((await book(hub.db, `available:${spare.id}`)).balance, 0);
    assert.deepEqual((await check(hub.db)).problems, []);
  });

  test("each operator sees what it earned, and the spare one why it got no work", async (t) => {
    if (!requireShared(t)) return;
    const standing = async (n) =>
      JSON.parse(await loom(["node", "status", "--dir", n.dir, "--json"])).standing;
    // The slot: its token earnings (pending) and availability credit (available), as booked.
    assert.ok(await waitFor(async () => {
      const s = await standing(slot);
      return s && s.recent.some((e) => e.kind === "slot") && s.recent.some((e) => e.kind === "tokens");
    }, { timeoutMs: 20000, stepMs: 500 }), "the slot's operator heard of no earnings");
    const s = await standing(slot);
    const grant = s.recent.find((e) => e.kind === "slot");
    assert.match(grant.ref, /^slot:\d+:\d+$/);
    assert.equal(grant.model, "stories260K");
    assert.ok(grant.micro > 0 && s.available_micro >= grant.micro, JSON.stringify(s));
    const tokens = s.recent.find((e) => e.kind === "tokens");
    assert.ok(tokens.tokens > 0 && tokens.micro > 0 && s.pending_micro > 0, JSON.stringify(s));
    assert.match(s.slot, /^active for stories260K: availability 100\.0% over \d+ probes/);
    const text = await loom(["node", "status", "--dir", slot.dir]);
    assert.match(text, /earned: \d+\.\d{6} credits pending \(verifiable\), \d+\.\d{6} available/);
    assert.match(text, /\+\d+\.\d{6}\s+slot\s+slot:\d+:\d+\s+stories260K, \d+ probes answered/);
    // The spare node: every request went to the reserved slot, and its operator is told so.
    const req = await client.completions.create({
      model: "stories260K", prompt: "Once upon a time", max_tokens: 4, temperature: 0,
    });
    assert.ok(req.choices[0].text.length > 0);
    assert.ok(await waitFor(async () => {
      const p = await standing(spare);
      return p && p.idle_reasons.some((r) => /^model 'stories260K': went to a reserved slot/.test(r));
    }, { timeoutMs: 20000, stepMs: 500 }),
              `the spare operator was not told why: ${JSON.stringify(await standing(spare))}`);
    assert.equal((await standing(spare)).recent.length, 0);
  });

  test("a slot that stops answering earns nothing more and loses its reservation", async (t) => {
    if (!requireShared(t)) return;
    // Enough answered probes that one failure is under 98%, then the node freezes.
    assert.ok(await waitFor(async () => (await slotOf(hub)).probes_30d >= 6, { timeoutMs: 20000 }));
    slot.proc.kill("SIGSTOP");
    // A frozen node misses its next probe's first-token deadline (--first-token-s, 10 s).
    assert.ok(await waitFor(async () => (await slotOf(hub)).state === "lost",
                            { timeoutMs: 40000, stepMs: 250 }),
              `the slot was not lost: ${JSON.stringify(await slotOf(hub))}`);
    const lost = await slotOf(hub);
    assert.match(lost.lost_reason, /^availability \d+\.\d% over \d+ probes in 30 days, under the 98\.0%/);
    assert.match(lost.last_probe, /^failed: /);
    const earned = (await book(hub.db, `available:${slot.id}`)).balance;
    // No credit for the frozen time, nor after the loss.
    await new Promise((r) => setTimeout(r, 4000));
    assert.equal((await book(hub.db, `available:${slot.id}`)).balance, earned);
    // Answering again does not bring the reservation back, and the spare node takes requests.
    slot.proc.kill("SIGCONT");
    const res = await client.completions.create({
      model: "stories260K", prompt: "Once upon a time", max_tokens: 4, temperature: 0,
    });
    assert.ok(res.choices[0].text.length > 0);
    assert.equal((await slotOf(hub)).state, "lost");
    const st = await loom(["hub", "status", "--hub", hub.url, "--admin-key", "test-admin-key"]);
    assert.match(st, /slot \d+: stories260K on .* lost, .*availability/);
    assert.deepEqual((await check(hub.db)).problems, []);
  });
});
