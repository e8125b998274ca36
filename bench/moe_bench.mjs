#!/usr/bin/env node
// Mixture-of-experts speed against llama.cpp (issue 17, "Speed"): a Qwen3-30B-A3B-like synthetic
// model (`loom synth --shape qwen3-30b-a3b --arch qwen3moe`, 128 experts of 768 columns, 8 used,
// fewer layers than the real 48 so it fits a shared machine) in Q4_0 (and Q4_K), `loom bench`
// alternated round by round with llama.cpp (the npm package node-llama-cpp, its prebuilt CPU
// binary, installed by tests/moe's setup: tests/serve/install.sh tests/moe) on the same file,
// same threads.  Prints the medians, the ratios, and generation's fraction of the active-bytes
// roofline: the bandwidth `loom bench` measures before and after each of its rounds, divided by
// the bytes a token reads (`loom info --json`, parameters.active_bytes_per_token).
//
// llama.cpp's figures are its own timers (llama_perf_context: "prompt eval time" over the prompt's
// batch, "eval time" over the one-token decodes), read with node-llama-cpp's printTimings: they
// leave out everything JavaScript does between tokens.  The wall-clock figures seen from
// JavaScript are printed beside them, and the per-token JavaScript overhead is measured on a tiny
// model (where llama.cpp's own decode takes tens of microseconds) so the gap can be judged.  The
// ratios use llama.cpp's own timers (the faster of the two figures, so the ratio does not flatter
// Loom).  The context is created with threads {ideal: T, min: T} and its currentThreads checked.
//
//   node bench/moe_bench.mjs [--types q4_0,q4_k] [--layers 12] [--rounds 3] [-p 128] [-n 64]
//       [--threads 2] [--dir DIR] [--json OUT]
// LOOM_BIN overrides build/src/loom/cli/loom.  Files are written once into DIR and reused.
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";

const execFileP = promisify(execFile);
const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..");
const LOOM = process.env.LOOM_BIN || path.join(root, "build/src/loom/cli/loom");
const nlcPath = path.join(root, "tests/moe/node_modules/node-llama-cpp/dist/index.js");
if (!fs.existsSync(nlcPath)) {
  console.error("moe_bench: node-llama-cpp is not installed; run tests/serve/install.sh tests/moe");
  process.exit(2);
}
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(nlcPath).href);

function parseArgs(argv) {
  const o = { types: ["q4_0"], layers: 12, rounds: 3, p: 128, n: 64, threads: 2,
    dir: path.join(os.tmpdir(), "loom-moe-bench"), json: "", shape: "qwen3-30b-a3b" };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i], v = () => argv[++i];
    if (a === "--types") o.types = v().split(",");
    else if (a === "--layers") o.layers = Number(v());
    else if (a === "--rounds") o.rounds = Number(v());
    else if (a === "-p") o.p = Number(v());
    else if (a === "-n") o.n = Number(v());
    else if (a === "--threads") o.threads = Number(v());
    else if (a === "--dir") o.dir = v();
    else if (a === "--json") o.json = v();
    else if (a === "--shape") o.shape = v();
    else throw new Error(`moe_bench: unknown argument ${a}`);
  }
  return o;
}
const opt = parseArgs(process.argv.slice(2));
fs.mkdirSync(opt.dir, { recursive: true });

const median = (v) => {
  const s = [...v].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const load = () => os.loadavg().map((x) => x.toFixed(2)).join(" ");

async function loom(args) {
  const { stdout } = await execFileP(LOOM, args, { maxBuffer: 64 << 20 });
  return stdout;
}

async function synth(name, args) {
  const file = path.join(opt.dir, name + ".gguf");
  if (!fs.existsSync(file)) {
    console.error(`moe_bench: writing ${file}`);
    await loom(["synth", "-o", file, "--threads", String(opt.threads), ...args]);
  }
  return file;
}

// llama.cpp's log lines, collected for printTimings.
let logLines = [];
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.info,
  logger: (level, message) => { logLines.push(message); } });

// "prompt eval time = X ms / N tokens" and "eval time = Y ms / M runs" of the last printTimings.
function parseTimings(lines) {
  const text = "\n" + lines.join("\n");
  const grab = (re) => {
    const m = text.match(re);
    return m ? { ms: Number(m[1]), count: Number(m[2]) } : null;
  };
  return { prompt: grab(/prompt eval time =\s*([\d.]+) ms \/\s*(\d+) tokens/),
    eval: grab(/\n[^\n]*?\beval time =\s*([\d.]+) ms \/\s*(\d+) runs/) };
}

function promptIds(vocab, n, seed) {
  // A fixed pseudo-random prompt of ordinary ids (no special tokens), BOS first.
  let s = seed >>> 0;
  const ids = [1];
  while (ids.length < n) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    ids.push(3 + (s % (vocab - 3)));
  }
  return ids;
}

// One llama.cpp round: a warm-up pass, then a measured one (prompt of p tokens in one batch,
// then n greedy one-token decodes).
async function llamaRound(model, vocab, p, n) {
  const context = await model.createContext({ contextSize: p + n + 16, batchSize: Math.max(512, p),
    threads: { ideal: opt.threads, min: opt.threads }, performanceTracking: true });
  try {
    if (context.currentThreads !== opt.threads) {
      throw new Error(`llama.cpp context runs ${context.currentThreads} threads, not ${opt.threads}`);
    }
    const sequence = context.getSequence();
    const prompt = promptIds(vocab, p, 42);
    let out = null;
    for (let pass = 0; pass < 2; ++pass) {
      await sequence.clearHistory();
      await context.printTimings();  // resets llama.cpp's counters
      logLines = [];
      const t0 = performance.now();
      await sequence.evaluateWithoutGeneratingNewTokens(prompt);
      const t1 = performance.now();
      let count = 0;
      for await (const _ of sequence.evaluate([prompt[1]], { temperature: 0 })) {
        if (++count >= n) break;
      }
      const t2 = performance.now();
      logLines = [];
      await context.printTimings();
      const tm = parseTimings(logLines);
      if (!tm.prompt || !tm.eval) throw new Error("no llama.cpp timings in:\n" + logLines.join(""));
      out = {
        pp_wall: p / ((t1 - t0) / 1e3), tg_wall: n / ((t2 - t1) / 1e3),
        pp: tm.prompt.count / (tm.prompt.ms / 1e3), tg: tm.eval.count / (tm.eval.ms / 1e3),
        eval_runs: tm.eval.count, prompt_tokens: tm.prompt.count,
        js_us_per_token: ((t2 - t1) * 1e3 - tm.eval.ms * 1e3) / n,
      };
    }
    return out;
  } finally {
    await context.dispose();
  }
}

async function loomRound(file, p, n) {
  const j = JSON.parse(await loom(["bench", "-m", file, "-p", String(p), "-n", String(n), "-r", "1",
    "--threads", String(opt.threads), "--json"]));
  return { pp: j.prompt_tokens_per_s_median, tg: j.gen_tokens_per_s_median,
    bw: j.bandwidth_bytes_per_s, bw_before: j.bandwidth_before, bw_after: j.bandwidth_after };
}

const report = { threads: opt.threads, prompt_tokens: opt.p, gen_tokens: opt.n, rounds: opt.rounds,
  layers: opt.layers, llama_cpp: llama.llamaCppRelease, llama_cpu: llama.systemInfo,
  load_start: load(), models: [] };
console.error(`moe_bench: llama.cpp ${JSON.stringify(llama.llamaCppRelease)}; load ${load()}`);

// The JavaScript overhead per token on a model whose decode is nearly free.
{
  const tiny = await synth("tiny-f32", ["--shape", "tiny", "--type", "f32"]);
  const model = await llama.loadModel({ modelPath: tiny });
  try {
    const r = await llamaRound(model, 512, 16, 32);
    report.js_overhead = { tg_wall: r.tg_wall, tg: r.tg, js_us_per_token: r.js_us_per_token };
    console.error(`moe_bench: tiny model: llama.cpp's own decode ${r.tg.toFixed(0)} tok/s, seen ` +
      `from JS ${r.tg_wall.toFixed(0)} tok/s: ${r.js_us_per_token.toFixed(0)} us per token outside`);
  } finally {
    await model.dispose();
  }
}

for (const type of opt.types) {
  const name = `${opt.shape}-L${opt.layers}-${type}`;
  const file = await synth(name, ["--shape", opt.shape, "--arch", "qwen3moe", "--type", type,
    "--layers", String(opt.layers)]);
  const info = JSON.parse(await loom(["info", "-m", file, "--json"]));
  const bytes = info.parameters.active_bytes_per_token;
  const model = await llama.loadModel({ modelPath: file });
  const rounds = [];
  try {
    for (let r = 0; r < opt.rounds; ++r) {
      const a = await loomRound(file, opt.p, opt.n);
      const b = await llamaRound(model, info.hparams.vocab_size, opt.p, opt.n);
      rounds.push({ loom: a, llama: b, load: load() });
      console.error(`moe_bench: ${name} round ${r + 1}: loom pp ${a.pp.toFixed(1)} tg ` +
        `${a.tg.toFixed(2)} | llama.cpp pp ${b.pp.toFixed(1)} (JS ${b.pp_wall.toFixed(1)}) tg ` +
        `${b.tg.toFixed(2)} (JS ${b.tg_wall.toFixed(2)}) | ${(a.bw / 1e9).toFixed(1)} GB/s | ` +
        `load ${load()}`);
    }
  } finally {
    await model.dispose();
  }
  const m = (f) => median(rounds.map(f));
  const bw = m((r) => r.loom.bw);
  const row = {
    type, file, active_bytes_per_token: bytes, total_bytes: fs.statSync(file).size,
    loom_pp: m((r) => r.loom.pp), loom_tg: m((r) => r.loom.tg),
    llama_pp: m((r) => r.llama.pp), llama_tg: m((r) => r.llama.tg),
    llama_pp_wall: m((r) => r.llama.pp_wall), llama_tg_wall: m((r) => r.llama.tg_wall),
    bandwidth: bw, roofline: bw / bytes, rounds,
  };
  row.pp_ratio = row.loom_pp / Math.max(row.llama_pp, row.llama_pp_wall);
  row.tg_ratio = row.loom_tg / Math.max(row.llama_tg, row.llama_tg_wall);
  // Each round's own fraction (its bandwidth), and the median's against the median bandwidth.
  row.roofline_fraction = row.loom_tg / row.roofline;
  row.round_fractions = rounds.map((r) => r.loom.tg / (r.loom.bw / bytes));
  report.models.push(row);
}
report.load_end = load();

console.log(`threads ${opt.threads}, prompt ${opt.p}, generation ${opt.n}, ${opt.rounds} ` +
  `alternated rounds; llama.cpp from node-llama-cpp's prebuilt CPU binary (its binaries' release ` +
  `tag ${report.llama_cpp.release})`);
console.log(`load average ${report.load_start} at the start, ${report.load_end} at the end`);
console.log(`JS overhead on the tiny model: ${report.js_overhead.js_us_per_token.toFixed(0)} us/token`);
console.log("| type | active MB/token | loom pp | llama.cpp pp | ratio | loom tg | llama.cpp tg " +
  "(JS wall) | ratio | GB/s | roofline tg | loom/roofline |");
console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
for (const r of report.models) {
  console.log(`| ${r.type} | ${(r.active_bytes_per_token / 1e6).toFixed(1)} | ${r.loom_pp.toFixed(1)} | ` +
    `${r.llama_pp.toFixed(1)} | ${r.pp_ratio.toFixed(2)}x | ${r.loom_tg.toFixed(2)} | ` +
    `${r.llama_tg.toFixed(2)} (${r.llama_tg_wall.toFixed(2)}) | ${r.tg_ratio.toFixed(2)}x | ` +
    `${(r.bandwidth / 1e9).toFixed(1)} | ${r.roofline.toFixed(1)} | ` +
    `${r.roofline_fraction.toFixed(2)} (rounds ${r.round_fractions.map((f) => f.toFixed(2)).join(", ")}) |`);
}
if (opt.json) fs.writeFileSync(opt.json, JSON.stringify(report, null, 2));
