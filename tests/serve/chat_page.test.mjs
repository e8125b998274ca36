// The chat page in headless Chromium (Debian's /usr/bin/chromium driven by playwright-core; no
// browser is downloaded): it loads from the binary with no outside requests, streams a reply that
// equals `loom run`, shows the time to first token and tokens/s the server reported for that
// request, and its stop button ends a reply and frees the server's slot.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

import {
  loomRun, metric, requireShared, startServer, storiesModel, synthModel, tmpDir, waitFor,
} from "./helpers.mjs";

const CHROMIUM = process.env.LOOM_CHROMIUM || "/usr/bin/chromium";
const FLAGS = [
  "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

describe("chat page", () => {
  let server;
  let browser;
  let page;
  const requests = [];
  let ready = false;

  before(async () => {
    if (!storiesModel() || !fs.existsSync(CHROMIUM)) return;
    server = await startServer(storiesModel(), ["--parallel", "2"]);
    const profile = fs.mkdtempSync(path.join(tmpDir(), "chromium-"));
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM, headless: true, args: FLAGS,
    });
    page = browser.pages()[0] ?? (await browser.newPage());
    page.on("request", (r) => requests.push(r.url()));
    await page.goto(server.url);
    await page.waitForSelector("#model option[value='stories260K']", { state: "attached" });
    // Greedy and short by default for these tests.
    await page.click("#settings-toggle");
    await page.fill("#temperature", "0");
    await page.fill("#max-tokens", "24");
    ready = true;
  });
  after(async () => {
    if (browser) await browser.close();
    if (server) await server.stop();
  });

  function guard(t) {
    if (!requireShared(t)) return false;
    if (!fs.existsSync(CHROMIUM)) {
      t.skip(`CHROMIUM MISSING: ${CHROMIUM} (install the Debian chromium package)`);
      return false;
    }
    assert.ok(ready, "the page did not load");
    return true;
  }

  test("sends a message and shows the streamed reply with its speed", async (t) => {
    if (!guard(t)) return;
    const prompt = "Once upon a time";
    const want = await loomRun(storiesModel(), prompt, 24);
    await page.fill("#prompt", prompt);
    const answered = page.waitForResponse((r) => r.url().endsWith("/v1/chat/completions"));
    await page.press("#prompt", "Enter");
    const reply = page.locator(".msg.assistant").last();
    await reply.locator(".stats").waitFor();
    await page.waitForSelector(".msg.assistant[data-finish]");
    // What the server reported for this very request: its final chunk's timings.
    const events = (await (await answered).text()).split("\n")
        .filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)));
    const timings = events.find((e) => e.timings)?.timings;
    assert.ok(timings, "the stream carried no timings");
    assert.equal(timings.predicted_n, want.generated_token_ids.length);
    assert.ok(timings.ttft_ms > 0 && timings.predicted_per_second > 0, JSON.stringify(timings));
    assert.equal(await reply.locator(".content").textContent(), want.text);
    assert.equal(await page.locator(".msg.user .content").last().textContent(), prompt);
    const stats = await reply.locator(".stats").textContent();
    // The page shows the server's figures, however the stream was cut into network reads.
    assert.ok(stats.includes(`TTFT ${Math.round(timings.ttft_ms)} ms`), stats);
    assert.ok(stats.includes(`${timings.predicted_per_second.toFixed(1)} tokens/s`), stats);
    assert.match(stats, new RegExp(`\\b${want.generated_token_ids.length} tokens`));
    assert.match(stats, /length|stop/);
    assert.ok(await page.isVisible("#send"));
    assert.ok(!(await page.isVisible("#stop")));
    // Everything came from this server: no CDN, works offline.
    assert.ok(requests.length > 0);
    for (const url of requests) assert.ok(url.startsWith(server.url), url);
  });

  test("the stop button ends a long reply and frees the slot", async (t) => {
    if (!guard(t)) return;
    // stories260K's whole 512-token context streams in well under a second, sometimes before the
    // button can be pressed; a 30M-parameter float model takes seconds for 2000 tokens.
    const slow = await startServer(await synthModel("f32", "small"), ["--parallel", "2"]);
    t.after(() => slow.stop());
    await page.goto(slow.url);
    await page.waitForSelector("#model option[value='small-f32']", { state: "attached" });
    await page.click("#settings-toggle");
    // Greedy, as on the first server (settings are kept per origin, and this is another port): at
    // the page's default temperature of 0.7 each request draws a random seed, and some replies of
    // this random-weight model end within a few tokens, before the button can be pressed.
    await page.fill("#temperature", "0");
    await page.fill("#max-tokens", "2000");
    await page.fill("#prompt", "Once upon a time");
    await page.click("#send");
    const reply = page.locator(".msg.assistant").last();
    // Streaming: text is arriving and the stop button is shown.
    await page.waitForSelector(".msg.assistant.streaming");
    await waitFor(async () => ((await reply.locator(".content").textContent()) ?? "").length > 20,
                  { timeoutMs: 10000 });
    assert.ok(await page.isVisible("#stop"));
    await page.click("#stop");
    await page.waitForSelector(".msg.assistant[data-finish='stopped']", { timeout: 5000 });
    const stats = await reply.locator(".stats").textContent();
    assert.match(stats, /stopped/);
    assert.ok(await page.isVisible("#send"));
    const freed = await waitFor(async () => {
      const h = await (await fetch(slow.url + "health")).json();
      return h.slots_busy === 0;
    }, { timeoutMs: 3000 });
    assert.ok(freed, "the server still generates for the stopped reply");
    assert.equal(await metric(slow, "loom_requests_cancelled_total"), 1);
    // The conversation goes on after a stop.
    await page.fill("#max-tokens", "8");
    await page.fill("#prompt", "The dog");
    await page.press("#prompt", "Enter");
    await page.waitForFunction(() => document.querySelectorAll(".msg.assistant[data-finish]").length === 2);
    assert.equal(await page.locator(".msg.assistant").count(), 2);
  });
});
