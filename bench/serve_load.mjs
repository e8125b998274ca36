#!/usr/bin/env node
// Bounded load test of `loom serve` on loopback: for each concurrency level, N clients each send
// R streaming completions one after another (fixed length: ignore_eos), and we measure the
// aggregate generation tokens/s, the per-stream decode tokens/s and the time to first token
// (p50/p99).  Only Node's built-in fetch; talks to 127.0.0.1 only; every level is bounded in
// requests and time.
//
//   node bench/serve_load.mjs --loom build/src/loom/cli/loom -m MODEL [--server-args "..."]
//        [--streams 1,16,64] [--requests 2] [--max-tokens 64] [--timeout 900] [--json]
//   node bench/serve_load.mjs --url http://127.0.0.1:8080/ --model NAME ...   (a running server)
import { spawn } from "node:child_process";
import path from "node:path";

function parseArgs(argv) {
  const o = {
    loom: "build/src/loom/cli/loom", model: "", url: "", name: "", serverArgs: "",
    streams: [1, 16, 64], requests: 2, maxTokens: 64, timeout: 900, json: false,
    prompt: "Once upon a time, in a small town by the sea, there lived",
  };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--loom") o.loom = next();
    else if (a === "-m" || a === "--model-file") o.model = next();
    else if (a === "--url") o.url = next();
    else if (a === "--model") o.name = next();
    else if (a === "--server-args") o.serverArgs = next();
    else if (a === "--streams") o.streams = next().split(",").map(Number);
    else if (a === "--requests") o.requests = Number(next());
    else if (a === "--max-tokens") o.maxTokens = Number(next());
    else if (a === "--timeout") o.timeout = Number(next());
    else if (a === "--prompt") o.prompt = next();
    else if (a === "--json") o.json = true;
    else throw new Error(`unknown argument ${a} (see the header of this file)`);
  }
  if (!o.url && !o.model) throw new Error("give -m MODEL (starts a server) or --url URL --model NAME");
  if (o.streams.some((n) => !(n >= 1 && n <= 1024)) || !(o.requests >= 1 && o.requests <= 100)) {
    throw new Error("--streams must be in 1..1024 and --requests in 1..100");
  }
  return o;
}

async function startServer(o) {
  const args = ["serve", "-m", o.model, "--port", "0", ...o.serverArgs.split(" ").filter(Boolean)];
  const proc = spawn(o.loom, args, { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start in 120 s")), 120000);
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/http:\/\/127\.0\.0\.1:\d+\//);
      if (m) {
        clearTimeout(timer);
        resolve(m[0]);
      }
    });
    proc.on("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
  process.stderr.write(out);
  const stop = () => proc.kill("SIGTERM");
  process.on("exit", stop);
  return { url, stop };
}

// One streaming completion; returns { ttft_ms, tokens, decode_s } (tokens from usage).
async function oneRequest(base, name, prompt, maxTokens, signal) {
  const start = performance.now();
  const res = await fetch(base + "v1/completions", {
    method: "POST", headers: { "Content-Type": "application/json" }, signal,
    body: JSON.stringify({
      model: name, prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true,
      stream_options: { include_usage: true },
    }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buffer = "";
  let first = 0;
  let last = 0;
  let tokens = 0;
  for await (const piece of res.body) {
    buffer += decoder.decode(piece, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
      const chunk = JSON.parse(line.slice(6));
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      const c = chunk.choices[0];
      if (c && c.text) {
        const now = performance.now();
        if (!first) first = now;
        last = now;
      }
    }
  }
  return { ttft_ms: first - start, tokens, decode_s: (last - first) / 1000 };
}

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

async function runLevel(base, name, o, streams) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), o.timeout * 1000);
  const results = [];
  const start = performance.now();
  try {
    await Promise.all(Array.from({ length: streams }, async (_, s) => {
      for (let r = 0; r < o.requests; r++) {
        results.push(await oneRequest(base, name, `${o.prompt} ${s}-${r}`, o.maxTokens,
                                      controller.signal));
      }
    }));
  } finally {
    clearTimeout(timer);
  }
  const wall = (performance.now() - start) / 1000;
  const ttft = results.map((r) => r.ttft_ms).sort((a, b) => a - b);
  const tokens = results.reduce((s, r) => s + r.tokens, 0);
  const perStream = results.filter((r) => r.decode_s > 0 && r.tokens > 1)
                           .map((r) => (r.tokens - 1) / r.decode_s).sort((a, b) => a - b);
  return {
    streams, requests: results.length, tokens, wall_s: wall,
    aggregate_tokens_per_s: tokens / wall,
    stream_decode_tokens_per_s_p50: percentile(perStream, 50),
    ttft_ms_p50: percentile(ttft, 50), ttft_ms_p99: percentile(ttft, 99),
  };
}

const o = parseArgs(process.argv);
let server = null;
let base = o.url;
let name = o.name;
if (!base) {
  server = await startServer(o);
  base = server.url;
  name = name || path.basename(o.model).replace(/\.[^.]*$/, "");
}
if (!base.endsWith("/")) base += "/";
try {
  // Warm-up: one short request (first-touch of weights, buffers).
  await oneRequest(base, name, o.prompt, 4);
  const levels = [];
  for (const streams of o.streams) {
    levels.push(await runLevel(base, name, o, streams));
    const l = levels.at(-1);
    process.stderr.write(
        `streams ${streams}: ${l.tokens} tokens in ${l.wall_s.toFixed(1)} s = ` +
        `${l.aggregate_tokens_per_s.toFixed(1)} tokens/s aggregate, ` +
        `${l.stream_decode_tokens_per_s_p50.toFixed(1)} tokens/s per stream (p50), ` +
        `TTFT p50 ${l.ttft_ms_p50.toFixed(0)} ms p99 ${l.ttft_ms_p99.toFixed(0)} ms\n`);
  }
  const one = levels.find((l) => l.streams === 1);
  if (o.json) {
    console.log(JSON.stringify({ model: name, max_tokens: o.maxTokens, requests_per_stream: o.requests,
                                 levels }, null, 1));
  } else {
    console.log("| streams | requests | tokens | wall s | aggregate tokens/s | vs 1 stream | " +
                "per-stream tokens/s (p50) | TTFT p50 ms | TTFT p99 ms |");
    console.log("|---|---|---|---|---|---|---|---|---|");
    for (const l of levels) {
      const ratio = one ? (l.aggregate_tokens_per_s / one.aggregate_tokens_per_s).toFixed(2) + "x" : "";
      console.log(`| ${l.streams} | ${l.requests} | ${l.tokens} | ${l.wall_s.toFixed(1)} | ` +
                  `${l.aggregate_tokens_per_s.toFixed(1)} | ${ratio} | ` +
                  `${l.stream_decode_tokens_per_s_p50.toFixed(1)} | ${l.ttft_ms_p50.toFixed(0)} | ` +
                  `${l.ttft_ms_p99.toFixed(0)} |`);
    }
  }
} finally {
  if (server) server.stop();
}
