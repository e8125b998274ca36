// The hub's public world page (GET /world, /world.json, /world/events) with real `loom node`
// agents and a pod leader speaking the protocol by hand, in Debian's Chromium through
// playwright-core: every machine of the run is listed under a pseudonym, nothing names an address,
// node id, key or enrolled name, locations are rounded, the map and the table render (pixels
// counted in a screenshot), and the page follows a node going offline without a reload.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

import { FACTS, handMadeNode, nodeSocket, startHub, startNode } from "./helpers.mjs";
import { countPixels, decodePng, near } from "./png.mjs";
import { requireShared, storiesModel, tmpDir, waitFor } from "../serve/helpers.mjs";

const CHROMIUM = process.env.LOOM_CHROMIUM || "/usr/bin/chromium";
const FLAGS = [
  "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

describe("world page", () => {
  let hub, a, b, pod, podBeat, browser, page;
  let ready = false;
  const requests = [];

  before(async () => {
    if (!storiesModel()) return;
    hub = await startHub();
    const model = storiesModel();
    a = await startNode(hub, "secret-name-alpha", [model],
                        { args: ["--location", "52.52,13.405"] });
    b = await startNode(hub, "secret-name-bravo", [model], { args: ["--location", "-33.87,151.21"] });
    // A pod leader of 2 x 2 ranks, by hand: hello, the signed challenge, register, heartbeats.
    const me = await handMadeNode(hub);
    pod = await nodeSocket(hub);
    pod.id = me.id;
    pod.send({ v: 1, type: "hello", node_id: me.id });
    const ch = await pod.next();
    pod.send({ v: 1, type: "register", node_id: me.id, signature: me.sign(ch.nonce, ch.hub_id),
               facts: { ...FACTS, chip: "Hand-made Test Chip 9000" }, models: [],
               pod: { tp: 2, pp: 2 }, max_concurrency: 1, location: { lat: 40.4, lon: -3.7 } });
    assert.equal((await pod.next()).type, "welcome");
    podBeat = setInterval(() => pod.send({ v: 1, type: "heartbeat", running: 0, waiting: 0,
                                           mem_free_bytes: 1e9, draining: false, paused: false,
                                           loaded: [] }), 500);
    if (!fs.existsSync(CHROMIUM)) return;
    const profile = fs.mkdtempSync(path.join(tmpDir(), "chromium-"));
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM, headless: true, args: FLAGS,
      viewport: { width: 1200, height: 1400 },
    });
    page = browser.pages()[0] ?? (await browser.newPage());
    page.on("request", (r) => requests.push(r.url()));
    ready = true;
  });
  after(async () => {
    clearInterval(podBeat);
    if (browser) await browser.close();
    pod?.close();
    for (const n of [a, b]) if (n) await n.stop("SIGKILL");
    if (hub) await hub.stop();
  });

  const world = async () => (await fetch(hub.url + "world.json")).json();

  test("world.json lists every machine, anonymously, with rounded locations", async (t) => {
    if (!requireShared(t)) return;
    // (the snapshot is at most a second old)
    let w;
    assert.ok(await waitFor(async () => (w = await world()).machines.length === 3,
                            { timeoutMs: 5000, stepMs: 200 }), JSON.stringify(w));
    assert.equal(w.version, 1);
    assert.equal(w.totals.machines_online, 3);
    const names = w.machines.map((m) => m.name);
    assert.equal(new Set(names).size, 3);
    for (const n of names) assert.match(n, /^[a-z]+-[a-z]+-\d{4}$/);
    const text = JSON.stringify(w);
    for (const secret of ["127.0.0.1", a.id, b.id, pod.id, "node-", "secret-name", "public_key",
                          "remote"]) {
      assert.ok(!text.includes(secret), `world.json shows ${secret}`);
    }
    const locations = w.machines.map((m) => JSON.stringify(m.location)).sort();
    assert.deepEqual(locations, ["[-34,151]", "[40,-4]", "[53,13]"]);
    const leader = w.machines.find((m) => m.pod);
    assert.deepEqual(leader.pod, { tp: 2, pp: 2, ranks: 4 });
    assert.equal(leader.chip, "Hand-made Test Chip 9000");
    for (const m of w.machines) {
      assert.equal(m.slot, "spare");
      assert.equal(m.verification_pass_rate, null);
      assert.ok(m.reliability_30d === null || (m.reliability_30d >= 0 && m.reliability_30d <= 1));
    }
    // The real nodes: stories260K loaded and measured by the hub, the chip from /proc/cpuinfo.
    const cpu = fs.readFileSync("/proc/cpuinfo", "utf8").match(/^model name\s*:\s*(.*)$/m);
    const real = w.machines.filter((m) => !m.pod);
    for (const m of real) {
      assert.deepEqual(m.models, ["stories260K"]);
      assert.ok(m.tokens_per_s > 0, JSON.stringify(m));
      assert.ok(m.memory_gb >= 0);
      if (cpu) assert.equal(m.chip, cpu[1].trim().replace(/\s+/g, " "));
    }
    const stories = w.totals.models.find((m) => m.name === "stories260K");
    assert.equal(stories.holders, 2);
    assert.ok(stories.tokens_per_s > 0);
  });

  test("the page renders the map and every machine, then follows a node going offline",
       async (t) => {
    if (!requireShared(t)) return;
    if (!fs.existsSync(CHROMIUM)) {
      t.skip(`CHROMIUM MISSING: ${CHROMIUM} (install the Debian chromium package)`);
      return;
    }
    assert.ok(ready);
    const res = await page.goto(hub.url + "world");
    const html = await res.text();
    assert.ok(!html.includes("127.0.0.1"));
    await page.waitForFunction(() => document.querySelectorAll("#machines .row").length === 3 &&
                               document.getElementById("live").textContent === "live");
    // Loaded from the hub itself: nothing from elsewhere.
    for (const u of requests) assert.ok(u.startsWith(hub.url), u);
    const w = await world();
    const shown = await page.$$eval("#machines .row", (rows) => rows.map((r) => r.dataset.name));
    assert.deepEqual(shown.sort(), w.machines.map((m) => m.name).sort());
    const page_text = await page.content();
    for (const secret of ["127.0.0.1", a.id, b.id, pod.id, "secret-name"]) {
      assert.ok(!page_text.includes(secret), `the page shows ${secret}`);
    }

    // The map: land (when built in) and a disc per place, counted in a screenshot.
    await page.waitForFunction(() => document.getElementById("map-note").textContent !== "" ||
                               performance.getEntriesByName(location.origin + "/world/land-110m.json").length > 0);
    await page.waitForTimeout(300);
    const landBuilt = (await page.locator("#map-note").textContent()) === "";
    const shot = decodePng(await page.locator("#map").screenshot());
    const total = shot.width * shot.height;
    const notOcean = countPixels(shot, (r, g, bl) => !near(r, g, bl, "#f4f7fb"));
    const discs = countPixels(shot, (r, g, bl) => near(r, g, bl, "#2f6fdf") || near(r, g, bl, "#1a7f37") ||
                                                  Math.abs(r - 0x7c) + Math.abs(g - 0x3a) + Math.abs(bl - 0xed) < 120);
    if (landBuilt) assert.ok(notOcean > total * 0.15, `land covers ${notOcean} of ${total} pixels`);
    assert.ok(discs > 50, `machine discs: ${discs} pixels`);
    // The table: one row per machine, with its state.
    const rows = page.locator("#machines .row");
    assert.equal(await rows.count(), 3);
    const rowShot = decodePng(await page.locator("#machines").screenshot());
    const ink = countPixels(rowShot, (r, g, bl) => r + g + bl < 3 * 160);
    assert.ok(ink > 300, `table text: ${ink} dark pixels`);

    // A node killed: its socket closes, and the page (no reload) shows it offline.
    await page.evaluate(() => (window.notReloaded = true));
    const victim = w.machines.find((m) => JSON.stringify(m.location) === "[53,13]").name;
    await a.stop("SIGKILL");
    await page.waitForFunction(
        (name) => document.querySelector(`#machines .row[data-name="${name}"] .state`)?.textContent === "offline",
        victim, { timeout: 15000 });
    assert.equal(await page.evaluate(() => window.notReloaded), true);
    assert.equal(await page.locator("#t-offline").textContent(), "1");
    assert.equal(await page.locator("#t-online").textContent(), "2");
    const after = await world();
    assert.equal(after.machines.find((m) => m.name === victim).state, "offline");
  });
});
