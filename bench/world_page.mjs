// Times the hub's world page in Debian's Chromium (playwright-core from tests/network): from
// navigation to the table showing its first rows for a snapshot of every machine, the map drawn,
// several loads in a row.  For a hub that bench/hub_sim keeps up with --world-hold:
//
//   build/bench/hub_sim --nodes 10000 --world-hold 120 &   # prints "world page at URL"
//   node bench/world_page.mjs URL [RUNS] [EXPECTED_MACHINES]
//
// (tests/serve/install.sh tests/network installs playwright-core.)
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../tests/network/package.json"));
const { chromium } = require("playwright-core");

const [url, runsArg = "5", expectArg = "0"] = process.argv.slice(2);
if (!url) {
  console.error("usage: node bench/world_page.mjs URL [RUNS] [EXPECTED_MACHINES]");
  process.exit(2);
}
const runs = Number(runsArg), expected = Number(expectArg);
const browser = await chromium.launch({
  executablePath: process.env.LOOM_CHROMIUM || "/usr/bin/chromium", headless: true,
  args: ["--no-sandbox", "--disable-gpu"],
});
const times = [];
for (let i = 0; i < runs; ++i) {
  const page = await browser.newPage({ viewport: { width: 1200, height: 1300 } });
  const t0 = Date.now();
  await page.goto(url);
  await page.waitForFunction((n) => {
    const count = document.getElementById("count").textContent.match(/of (\d+)/);
    return count && Number(count[1]) >= Math.max(1, n) &&
        document.querySelectorAll("#machines .row").length > 0;
  }, expected, { timeout: 60000, polling: 20 });
  const ms = Date.now() - t0;
  // Where the time went, in the page's own clock: the document, the snapshot event's arrival
  // (the hub's rebuild and the 3 MB transfer), its parse and the first render.
  const marks = await page.evaluate(() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const at = (n) => performance.getEntriesByName(n)[0]?.startTime ?? -1;
    return { document_ms: Math.round(nav.responseEnd), snapshot_ms: Math.round(at("world-snapshot")),
             rendered_ms: Math.round(at("world-rendered")) };
  });
  const rows = await page.locator("#machines .row").count();
  const machines = await page.evaluate(() => document.getElementById("count").textContent);
  times.push(ms);
  console.log(JSON.stringify({ run: i + 1, load_ms: ms, ...marks, dom_rows: rows, machines }));
  await page.close();
}
times.sort((a, b) => a - b);
console.log(JSON.stringify({ runs, load_ms_median: times[Math.floor(times.length / 2)],
                             load_ms_max: times[times.length - 1] }));
await browser.close();
