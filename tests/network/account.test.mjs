// The operator account page (hub_account.cc): nodes enrolled with `token create --account` belong
// to that account; GET /v1/account, for the account's own API key only, lists them with what the
// ledger says they earned (per job and per reserved-slot period, summing to their pending and
// available books), their slot and why they get no work; another account sees none of it; the
// page at /account, in Debian's Chromium through playwright-core, asks for the key and renders
// the nodes and their earnings, says so when the key is wrong or the hub is gone, and after a hub
// restart the earnings are still there (they come from the store, not the hub's memory).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

import OpenAI from "openai";

import { handMadeNode, hubJobs, loom, makeKey, startHub, startNode } from "./helpers.mjs";
import { countPixels, decodePng } from "./png.mjs";
import { requireShared, storiesModel, tmpDir, waitFor } from "../serve/helpers.mjs";

const CHROMIUM = process.env.LOOM_CHROMIUM || "/usr/bin/chromium";
const FLAGS = [
  "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];
const HUB_ARGS = ["--price", "*=1000:2000", "--probe-interval-s", "1", "--slot-period-s", "3",
                  "--slot-share", "0.5", "--standing-s", "2"];

const json = async (args) => JSON.parse(await loom(args));
const book = (db, name) => json(["hub", "ledger", "show", name, "--db", db, "--json",
                                 "--lines", "1000"]);

async function account(hub, key) {
  const headers = key === undefined ? {} : { Authorization: `Bearer ${key}` };
  const res = await fetch(hub.url + "v1/account", { headers });
  return { status: res.status, body: await res.json() };
}

describe("operator account page", () => {
  let hub, mine, theirs, loose, client, opKey, rivalKey, browser, page;
  const requests = [];

  before(async () => {
    if (!storiesModel()) return;
    hub = await startHub({ args: HUB_ARGS });
    client = new OpenAI({ baseURL: hub.base, apiKey: await makeKey(hub.db, "alice"), maxRetries: 0 });
    await loom(["hub", "account", "credit", "alice", "100", "--db", hub.db]);
    opKey = await makeKey(hub.db, "op");
    rivalKey = await makeKey(hub.db, "rival");
    // op's node offers a reserved slot (so it earns per job and per slot period); rival's is a
    // spare node next to it, which the slot goes before.
    mine = await startNode(hub, "op-machine", [storiesModel()],
                           { args: ["--reserve", "stories260K", "--parallel", "4"],
                             tokenArgs: ["--account", "op"] });
    theirs = await startNode(hub, "rival-machine", [storiesModel()],
                             { tokenArgs: ["--account", "rival"] });
    // A node enrolled without an account, given to op afterwards (it never connects).
    loose = await handMadeNode(hub);
    await loom(["hub", "node", "assign", loose.id, "--account", "op", "--db", hub.db]);
    if (!fs.existsSync(CHROMIUM)) return;
    const profile = fs.mkdtempSync(path.join(tmpDir(), "chromium-"));
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM, headless: true, args: FLAGS, viewport: { width: 1200, height: 1400 },
    });
    page = browser.pages()[0] ?? (await browser.newPage());
    page.on("request", (r) => requests.push(r.url()));
  });
  after(async () => {
    if (browser) await browser.close();
    for (const n of [mine, theirs]) if (n) await n.stop();
    if (hub) await hub.stop();
  });

  test("without the account's key /v1/account is 401", async (t) => {
    if (!requireShared(t)) return;
    for (const key of [undefined, "", "loom-not-a-key-of-this-hub", rivalKey + "x"]) {
      const r = await account(hub, key);
      assert.equal(r.status, 401, `key ${key}`);
      assert.equal(r.body.error.code, "invalid_api_key");
      assert.match(r.body.error.message, /API key/);
    }
    // The admin key is not an account's key either.
    assert.equal((await account(hub, "test-admin-key")).status, 401);
  });

  test("the owner sees its nodes and earnings that sum to their books", async (t) => {
    if (!requireShared(t)) return;
    const ids = [];
    for (let i = 0; i < 4; i++) {
      const res = await client.completions.create({
        model: "stories260K", prompt: "Once upon a time", max_tokens: 8, temperature: 0,
      });
      ids.push(res.id);
    }
    // ...and at least one slot period paid.
    assert.ok(await waitFor(async () => (await book(hub.db, `available:${mine.id}`)).balance > 0,
                            { timeoutMs: 20000, stepMs: 500 }), "no availability credit was paid");
    // The ledger and the page, read while no period is paid in between.
    let a, pending, available;
    assert.ok(await waitFor(async () => {
      const before = await Promise.all([book(hub.db, `pending:${mine.id}`),
                                        book(hub.db, `available:${mine.id}`)]);
      a = (await account(hub, opKey)).body;
      [pending, available] = await Promise.all([book(hub.db, `pending:${mine.id}`),
                                                book(hub.db, `available:${mine.id}`)]);
      return before[0].balance === pending.balance && before[1].balance === available.balance;
    }, { timeoutMs: 20000, stepMs: 300 }));
    assert.equal(a.version, 1);
    assert.equal(a.account.name, "op");
    assert.deepEqual(a.nodes.map((n) => n.node_id).sort(), [mine.id, loose.id].sort());
    const n = a.nodes.find((x) => x.node_id === mine.id);
    assert.equal(n.name, "op-machine");
    assert.equal(n.connected, true);
    assert.equal(n.pending_micro, pending.balance);
    assert.equal(n.available_micro, available.balance);
    assert.equal(n.earnings_complete, true);
    const sum = n.earnings.reduce((s, e) => s + e.credits_micro, 0);
    assert.equal(sum, pending.balance + available.balance, JSON.stringify(n.earnings));
    assert.equal(n.earnings_listed_micro, sum);
    assert.equal(a.operator.pending_micro + a.operator.available_micro, sum);  // loose earned none
    // Per job: one row per settled attempt, the tokens the store recorded for it.
    const jobs = (await hubJobs(hub.db)).filter((j) => ids.includes(j.job_id));
    const perJob = n.earnings.filter((e) => e.kind === "tokens");
    assert.deepEqual(perJob.map((e) => e.job_id).sort(), [...ids].sort());
    for (const e of perJob) {
      const attempt = jobs.find((j) => j.job_id === e.job_id).attempts[0];
      assert.equal(e.attempt_id, attempt.attempt_id);
      assert.equal(e.tokens, attempt.tokens);
      assert.ok(e.tokens > 0 && e.credits_micro > 0);
      assert.equal(e.model, "stories260K");
      const settle = pending.transactions.find((x) => x.kind === "settle" && x.ref === e.job_id);
      assert.equal(e.credits_micro, settle.lines.find((l) => l.attempt_id === e.attempt_id).amount);
    }
    // Per slot period: each grant of the available book, with its probes answered.
    const grants = available.transactions.filter((x) => x.kind === "grant");
    const perSlot = n.earnings.filter((e) => e.kind === "slot");
    assert.equal(perSlot.length, grants.length);
    assert.ok(perSlot.length >= 1);
    for (const e of perSlot) {
      assert.equal(`slot:${e.slot_id}:${e.period}`,
                   grants.find((g) => g.ref === `slot:${e.slot_id}:${e.period}`)?.ref);
      assert.equal(e.model, "stories260K");
      assert.ok(e.probes >= 1 && e.probes_answered === e.probes, JSON.stringify(e));
    }
    assert.equal(n.slot.model, "stories260K");
    assert.equal(n.slot.state, "active");
    assert.ok(n.slot.probes_30d >= 1);
    // The node given to op later: listed, offline, and the page says why it gets nothing.
    const l = a.nodes.find((x) => x.node_id === loose.id);
    assert.equal(l.connected, false);
    assert.equal(l.state, "offline");
    assert.deepEqual(l.earnings, []);
    assert.match(l.idle_reasons.join("\n"), /not connected/);
    // The consumer side of op: nothing spent, nothing held.
    assert.equal(a.consumer.available_micro, 0);
    assert.equal(a.consumer.held_micro, 0);
  });

  test("another account sees only its own nodes, and why its spare node got no work",
       async (t) => {
    if (!requireShared(t)) return;
    await client.completions.create({ model: "stories260K", prompt: "Once", max_tokens: 4 });
    let r;
    assert.ok(await waitFor(async () => {
      r = (await account(hub, rivalKey)).body;
      return r.nodes?.[0]?.idle_reasons.length > 0;
    }, { timeoutMs: 15000, stepMs: 300 }), JSON.stringify(r));
    assert.equal(r.account.name, "rival");
    assert.deepEqual(r.nodes.map((n) => n.node_id), [theirs.id]);
    const text = JSON.stringify(r);
    for (const secret of [mine.id, loose.id, "op-machine"]) assert.ok(!text.includes(secret), secret);
    // Placement's reason: the reserved slot went first, or the node was full (checks and probes
    // run on it too), or it heard of no request since its last report.
    assert.match(r.nodes[0].idle_reasons.join("\n"),
                 /reserved slot|at concurrency \d+\/\d+|no requests for model 'stories260K'/);
    assert.equal(r.nodes[0].pending_micro + r.nodes[0].available_micro,
                 r.nodes[0].earnings.reduce((s, e) => s + e.credits_micro, 0));
    // alice, a consumer only: her balance, no nodes.
    const alice = (await account(hub, client.apiKey)).body;
    assert.deepEqual(alice.nodes, []);
    const balance = await json(["hub", "account", "show", "alice", "--db", hub.db, "--json"]);
    assert.equal(alice.consumer.available_micro, balance.available);
  });

  test("the page asks for the key, renders nodes and earnings, and says what went wrong",
       async (t) => {
    if (!requireShared(t)) return;
    if (!fs.existsSync(CHROMIUM)) {
      t.skip(`CHROMIUM MISSING: ${CHROMIUM} (install the Debian chromium package)`);
      return;
    }
    // The World page links to it.
    await page.goto(hub.url + "world");
    assert.equal(await page.locator("a.account-link").getAttribute("href"), "/account");

    await page.goto(hub.url + "account");
    await page.fill("#key", "loom-wrong-key");
    await page.click("#key-form button[type=submit]");
    await page.waitForFunction(() => !document.getElementById("message").hidden);
    assert.match(await page.locator("#message").textContent(), /refused this API key/);
    assert.equal(await page.locator("#account").isHidden(), true);

    await page.fill("#key", opKey);
    await page.click("#key-form button[type=submit]");
    await page.waitForSelector(`tr.node[data-node="${mine.id}"]`);
    await page.waitForFunction(() => document.querySelectorAll(".earning.tokens").length > 0 &&
                               document.querySelectorAll(".earning.slot").length > 0);
    assert.equal(await page.evaluate(() => sessionStorage.getItem("loom-account-key")), opKey);
    // The key goes in a header, never in a URL; nothing loads from elsewhere.
    for (const u of requests) {
      assert.ok(u.startsWith(hub.url), u);
      assert.ok(!u.includes(opKey), u);
    }
    const a = (await account(hub, opKey)).body;
    const n = a.nodes.find((x) => x.node_id === mine.id);
    const row = page.locator(`tr.node[data-node="${mine.id}"]`);
    assert.match(await row.textContent(), /op-machine/);
    assert.equal(await page.locator("tr.node").count(), 2);
    assert.match(await page.locator(`tr.node[data-node="${loose.id}"]`).textContent(),
                 /not connected/);
    const jobRows = page.locator(`.node-earnings[data-node="${mine.id}"] .earning.tokens`);
    assert.equal(await jobRows.count(), n.earnings.filter((e) => e.kind === "tokens").length);
    assert.match(await jobRows.first().textContent(), /stories260K/);
    assert.equal(await page.locator("#account-name").textContent(), "op");
    // Not blank: the rendered tables have text (dark pixels) in a screenshot.
    const shot = decodePng(await page.locator("#account").screenshot());
    const ink = countPixels(shot, (r, g, b) => r + g + b < 3 * 160);
    assert.ok(ink > 2000, `account page text: ${ink} dark pixels`);
    const text = await page.locator("#account").textContent();
    assert.ok(!text.includes(theirs.id) && !text.includes("rival-machine"));

    // The hub goes away: the page says it cannot reach it and keeps the last figures...
    const earned = await page.locator(".earning").count();
    await hub.stop();
    await page.waitForFunction(() => /Cannot reach the hub/.test(
        document.getElementById("message").textContent), null, { timeout: 15000 });
    assert.equal(await page.locator(".earning").count(), earned);
    // ...and once a hub runs on the store again, the same earnings come back from the ledger,
    // before any node has reconnected to tell it anything.
    hub = await startHub({ db: hub.db, port: hub.port, args: HUB_ARGS });
    const again = (await account(hub, opKey)).body;
    const before = n.earnings.map((e) => JSON.stringify(e));
    const now = again.nodes.find((x) => x.node_id === mine.id).earnings.map((e) => JSON.stringify(e));
    for (const e of before) assert.ok(now.includes(e), `lost after the restart: ${e}`);
    await page.waitForFunction(() => document.getElementById("live").textContent === "live",
                               null, { timeout: 15000 });
    assert.equal(await page.locator("#message").isHidden(), true);
  });
});
