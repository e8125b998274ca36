#!/usr/bin/env node
// What the network hub adds to a request, on loopback: the same model served (a) directly by
// `loom serve` and (b) through `loom hub` and one `loom node` agent (which runs its own `loom serve`
// child), both with 4 slots.  Rounds alternate A B A B ...: each round sends N sequential
// streaming completions ("Once upon a time", max_tokens 64, temperature 0, ignore_eos so every
// stream is 64 tokens) to one of the two, and records the client-side time to first token (request
// sent -> first SSE chunk with non-empty text) and the stream's decode tokens/s ((tokens - 1) /
// first-to-last text chunk; also end to end: tokens / (request sent -> last text chunk), which
// bursts of coalesced chunks cannot inflate).  Prints per-round medians, then median and p95 TTFT
// of each, the p95 difference (hub - direct) and the ratio of median tokens/s (hub / direct).
// Goals (NETWORK.md): TTFT overhead p95 < 5 ms; tokens/s >= 0.97x direct.
//
//   node bench/hub_overhead.mjs [--model FILE.gguf] [--loom PATH] [--rounds 5] [--requests 20]
//        [--max-tokens 64] [--parallel 4] [--ctx 1024] [--threads N] [--json]
//
// --parallel, --ctx and --threads (0: loom serve's default) go to both `loom serve` and `loom node`.
//
// Model: --model, else $LOOM_SHARED_DIR/models/stories260K/stories260K.gguf, else
// ../shared/models/stories260K/stories260K.gguf.  Binary: --loom, else $LOOM_BIN, else
// build/src/loom/cli/loom.  Plain fetch and SSE parsing, no dependencies.  Talks to 127.0.0.1
// only; every process it starts (in its own process group, so the node's serve child too) is
// stopped at the end, on errors and on Ctrl-C.
import { spawn, execFile } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";

const execFileP = promisify(execFile);

function parseArgs(argv) {
  const shared = process.env.LOOM_SHARED_DIR || "../shared";
  const o = {
    model: path.join(shared, "models/stories260K/stories260K.gguf"),
    loom: process.env.LOOM_BIN || "build/src/loom/cli/loom",
    rounds: 5, requests: 20, maxTokens: 64, parallel: 4, ctx: 1024, threads: 0, json: false,
    prompt: "Once upon a time",
  };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--model" || a === "-m") o.model = next();
    else if (a === "--loom") o.loom = next();
    else if (a === "--rounds") o.rounds = Number(next());
    else if (a === "--requests") o.requests = Number(next());
    else if (a === "--max-tokens") o.maxTokens = Number(next());
    else if (a === "--parallel") o.parallel = Number(next());
    else if (a === "--ctx") o.ctx = Number(next());
    else if (a === "--threads") o.threads = Number(next());
    else if (a === "--prompt") o.prompt = next();
    else if (a === "--json") o.json = true;
    else throw new Error(`unknown argument ${a} (see the header of this file)`);
  }
  if (!(o.rounds >= 1 && o.rounds <= 100) || !(o.requests >= 1 && o.requests <= 1000)) {
    throw new Error("--rounds must be in 1..100 and --requests in 1..1000");
  }
  if (!fs.existsSync(o.model)) throw new Error(`no model at ${o.model} (give --model)`);
  if (!fs.existsSync(o.loom)) throw new Error(`no loom binary at ${o.loom} (give --loom or $LOOM_BIN)`);
  o.loom = path.resolve(o.loom);
  o.model = path.resolve(o.model);
  return o;
}

// ---- Processes: each in its own group, all stopped whatever happens ----

const procs = new Set();
const handles = [];  // for the logs on failure
let tmpDir = "";      // removed at the end, also on Ctrl-C
function killAll(signal) {
  for (const p of procs) {
    try {
      process.kill(-p.pid, signal);
    } catch {}
  }
}
process.on("exit", () => killAll("SIGKILL"));
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => {
    killAll("SIGKILL");
    if (tmpDir) fs.rmSync(tmpDir, { recursive: true, force: true });
    process.exit(130);
  });
}

// Spawns `loom ...args` and resolves with the first match of `ready` on its stdout.
function start(o, name, args, ready, timeoutMs = 180000) {
  const proc = spawn(o.loom, args, { stdio: ["ignore", "pipe", "pipe"], detached: true });
  procs.add(proc);
  const h = { name, proc, out: "", err: "" };
  handles.push(h);
  proc.stderr.on("data", (d) => {
    h.err += d;
    if (h.err.length > 1 << 20) h.err = h.err.slice(-(1 << 19));
  });
  h.stop = () => new Promise((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
    const timer = setTimeout(() => {
      try { process.kill(-proc.pid, "SIGKILL"); } catch {}
    }, 10000);
    proc.once("exit", () => {
      clearTimeout(timer);
      // The group: a child (the node's serve) that outlived its parent.
      try { process.kill(-proc.pid, "SIGKILL"); } catch {}
      procs.delete(proc);
      resolve();
    });
    try { process.kill(-proc.pid, "SIGTERM"); } catch { resolve(); }
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start:\n${h.err.slice(-4000)}`)),
                             timeoutMs);
    proc.stdout.on("data", (d) => {
      h.out += d;
      const m = h.out.match(ready);
      if (m && !h.match) {
        h.match = m;
        clearTimeout(timer);
        resolve(h);
      }
    });
    proc.on("exit", (code, signal) => {
      clearTimeout(timer);
      if (!h.match) reject(new Error(`${name} exited (${code ?? signal}):\n${h.err.slice(-4000)}`));
    });
  });
}

async function loom(o, args) {
  const { stdout } = await execFileP(o.loom, args, { maxBuffer: 16 << 20 });
  return stdout.trim();
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- One streaming completion ----

async function streamOnce(base, key, model, o, maxTokens = o.maxTokens) {
  const headers = { "Content-Type": "application/json" };
  if (key) headers.Authorization = `Bearer ${key}`;
  const body = JSON.stringify({
    model, prompt: o.prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  });
  const t0 = performance.now();
  const res = await fetch(base + "v1/completions", { method: "POST", headers, body });
  if (!res.ok) throw new Error(`${base}: HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buffer = "";
  let first = 0, last = 0, textChunks = 0, tokens = 0, done = false;
  for await (const piece of res.body) {
    buffer += decoder.decode(piece, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!event.startsWith("data: ")) continue;
      const data = event.slice(6);
      if (data === "[DONE]") {
        done = true;
        continue;
      }
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(`${base}: stream error: ${data}`);
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      const text = chunk.choices?.[0]?.text;
      if (text) {
        const now = performance.now();
        if (!first) first = now;
        last = now;
        textChunks += 1;
      }
    }
  }
  if (!done || !first) throw new Error(`${base}: the stream ended without [DONE] or text`);
  if (!tokens) tokens = textChunks;
  const decodeS = (last - first) / 1000;
  return {
    ttftMs: first - t0, tokens, tps: tokens > 1 && decodeS > 0 ? (tokens - 1) / decodeS : NaN,
    e2eTps: tokens / ((last - t0) / 1000),
  };
}

// ---- Statistics ----

function percentile(values, p) {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (!v.length) return NaN;
  return v[Math.min(v.length - 1, Math.max(0, Math.ceil((p / 100) * v.length) - 1))];
}
const median = (v) => percentile(v, 50);

// ---- Main ----

async function main() {
  const o = parseArgs(process.argv);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "loom-hub-overhead-"));
  tmpDir = tmp;
  try {
    const serveArgs = ["--parallel", String(o.parallel), "--ctx", String(o.ctx)];
    if (o.threads > 0) serveArgs.push("--threads", String(o.threads));
    // (a) loom serve directly, configured like the node's own serve child.
    const direct = await start(o, "loom serve", ["serve", "-m", o.model, "--port", "0", ...serveArgs],
                               /http:\/\/127\.0\.0\.1:\d+\//);
    const directBase = direct.match[0];
    const models = await (await fetch(directBase + "v1/models")).json();
    const directModel = models.data[0].id;

    // (b) a hub, an account, a key and one enrolled node.
    const adminKey = crypto.randomBytes(16).toString("hex");
    const db = path.join(tmp, "hub.db");
    const hub = await start(o, "loom hub",
                            ["hub", "--listen", "127.0.0.1:0", "--db", db, "--admin-key", adminKey,
                             "--heartbeat-s", "1"],
                            /listening on (http:\/\/127\.0\.0\.1:\d+\/)/);
    const hubBase = hub.match[1];
    await loom(o, ["hub", "account", "create", "bench", "--db", db]);
    const key = await loom(o, ["hub", "key", "create", "--account", "bench", "--db", db]);
    const token = await loom(o, ["hub", "token", "create", "--db", db]);
    const nodeDir = path.join(tmp, "node");
    await loom(o, ["node", "enroll", "--hub", hubBase, "--token", token, "--name", "bench",
                   "--dir", nodeDir]);
    const node = await start(o, "loom node",
                             ["node", "--dir", nodeDir, "--models", o.model, ...serveArgs],
                             /lending/);
    // Until the hub lists the node with its model loaded and measured (its own benchmark).
    let hubModel = "";
    const until = Date.now() + 180000;
    while (!hubModel) {
      if (Date.now() > until) {
        throw new Error(`the node never came up at the hub:\nhub: ${hub.err.slice(-3000)}\n` +
                        `node: ${node.err.slice(-3000)}`);
      }
      const s = await fetch(hubBase + "v1/admin/status", {
        headers: { Authorization: `Bearer ${adminKey}` },
      }).then((r) => r.json()).catch(() => null);
      const m = s?.nodes?.[0]?.models?.find((x) => x.loaded && x.decode_tps > 0);
      if (m) hubModel = m.name;
      else await sleep(200);
    }

    const targets = [
      { name: "direct", base: directBase, key: "", model: directModel, rounds: [] },
      { name: "hub", base: hubBase, key, model: hubModel, rounds: [] },
    ];
    // Warm-up: a few requests each (first touches, connection set-up), not counted.
    for (const t of targets) {
      for (let i = 0; i < 3; i++) await streamOnce(t.base, t.key, t.model, o);
    }
    const load0 = os.loadavg();
    const log = (s) => process.stderr.write(s + "\n");
    log(`model ${path.basename(o.model)}; ${o.rounds} rounds x ${o.requests} requests each, ` +
        `alternated; load average ${load0.map((x) => x.toFixed(2)).join(" ")}`);
    for (let r = 0; r < o.rounds; r++) {
      for (const t of targets) {
        const results = [];
        for (let i = 0; i < o.requests; i++) results.push(await streamOnce(t.base, t.key, t.model, o));
        const round = {
          ttft: results.map((x) => x.ttftMs), tps: results.map((x) => x.tps),
          e2e: results.map((x) => x.e2eTps), tokens: results.map((x) => x.tokens),
        };
        t.rounds.push(round);
        log(`round ${r + 1} ${t.name.padEnd(6)}: TTFT median ${median(round.ttft).toFixed(2)} ms ` +
            `p95 ${percentile(round.ttft, 95).toFixed(2)} ms, tokens/s median ` +
            `${median(round.tps).toFixed(1)}, end to end ${median(round.e2e).toFixed(1)} ` +
            `(${median(round.tokens)} tokens)`);
      }
    }
    const load1 = os.loadavg();

    const summary = {};
    for (const t of targets) {
      const ttft = t.rounds.flatMap((x) => x.ttft);
      const tps = t.rounds.flatMap((x) => x.tps);
      const e2e = t.rounds.flatMap((x) => x.e2e);
      summary[t.name] = {
        requests: ttft.length,
        ttft_ms_median: median(ttft), ttft_ms_p95: percentile(ttft, 95),
        tps_median: median(tps), e2e_tps_median: median(e2e),
        rounds: t.rounds.map((x) => ({
          ttft_ms_median: median(x.ttft), tps_median: median(x.tps), e2e_tps_median: median(x.e2e),
        })),
      };
    }
    const result = {
      model: path.basename(o.model), rounds: o.rounds, requests_per_round: o.requests,
      max_tokens: o.maxTokens, parallel: o.parallel, ctx: o.ctx, threads: o.threads,
      direct: summary.direct, hub: summary.hub,
      ttft_p95_overhead_ms: summary.hub.ttft_ms_p95 - summary.direct.ttft_ms_p95,
      ttft_median_overhead_ms: summary.hub.ttft_ms_median - summary.direct.ttft_ms_median,
      tps_ratio: summary.hub.tps_median / summary.direct.tps_median,
      e2e_tps_ratio: summary.hub.e2e_tps_median / summary.direct.e2e_tps_median,
      load_average_start: load0, load_average_end: load1,
    };
    result.goal_ttft_p95_under_5ms = result.ttft_p95_overhead_ms < 5;
    result.goal_tps_ratio_097 = result.tps_ratio >= 0.97;
    if (o.json) {
      console.log(JSON.stringify(result, null, 1));
    } else {
      console.log(`\n${result.model}, ${o.rounds} rounds x ${o.requests} streaming requests ` +
                  `(max_tokens ${o.maxTokens}), alternated direct/hub`);
      console.log("| round | direct TTFT median ms | hub TTFT median ms | direct tokens/s | hub tokens/s " +
                  "| direct end-to-end tokens/s | hub end-to-end tokens/s |");
      console.log("|---|---|---|---|---|---|---|");
      for (let r = 0; r < o.rounds; r++) {
        const d = summary.direct.rounds[r], h = summary.hub.rounds[r];
        console.log(`| ${r + 1} | ${d.ttft_ms_median.toFixed(2)} | ${h.ttft_ms_median.toFixed(2)} | ` +
                    `${d.tps_median.toFixed(1)} | ${h.tps_median.toFixed(1)} | ` +
                    `${d.e2e_tps_median.toFixed(1)} | ${h.e2e_tps_median.toFixed(1)} |`);
      }
      console.log("\n| | direct | hub | hub - direct |");
      console.log("|---|---|---|---|");
      console.log(`| TTFT median ms | ${summary.direct.ttft_ms_median.toFixed(2)} | ` +
                  `${summary.hub.ttft_ms_median.toFixed(2)} | ${result.ttft_median_overhead_ms.toFixed(2)} |`);
      console.log(`| TTFT p95 ms | ${summary.direct.ttft_ms_p95.toFixed(2)} | ` +
                  `${summary.hub.ttft_ms_p95.toFixed(2)} | **${result.ttft_p95_overhead_ms.toFixed(2)}** ` +
                  `(goal < 5: ${result.goal_ttft_p95_under_5ms ? "met" : "missed"}) |`);
      console.log(`| tokens/s median | ${summary.direct.tps_median.toFixed(1)} | ` +
                  `${summary.hub.tps_median.toFixed(1)} | **${result.tps_ratio.toFixed(3)}x** ` +
                  `(goal >= 0.97x: ${result.goal_tps_ratio_097 ? "met" : "missed"}) |`);
      console.log(`| end-to-end tokens/s median (tokens / request to last token) | ` +
                  `${summary.direct.e2e_tps_median.toFixed(1)} | ${summary.hub.e2e_tps_median.toFixed(1)} | ` +
                  `${result.e2e_tps_ratio.toFixed(3)}x |`);
      console.log(`\nload average: ${load0.map((x) => x.toFixed(2)).join(" ")} at the start, ` +
                  `${load1.map((x) => x.toFixed(2)).join(" ")} at the end`);
    }
    await Promise.all([node.stop(), hub.stop(), direct.stop()]);
  } finally {
    killAll("SIGKILL");
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((e) => {
  process.stderr.write(`hub_overhead: ${e.stack || e}\n`);
  for (const h of handles) process.stderr.write(`--- ${h.name} (stderr, last lines):\n${h.err.slice(-3000)}\n`);
  killAll("SIGKILL");
  process.exitCode = 1;
});
