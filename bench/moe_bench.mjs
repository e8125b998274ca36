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
// LOOM_BIN overrides build/src/loom/cli/loom.  Files are written once into DIR and reused.  The
// llama.cpp and `loom bench` plumbing is bench/llama_peer.mjs, shared with bench/peer_bench.mjs.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { checkLoom, load, loom, loomRound, median, openNodeLlama, synth as synthFile }
  from "./llama_peer.mjs";

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
let peer;
try {
  checkLoom("moe_bench");
  peer = await openNodeLlama("moe_bench", opt.threads);
} catch (e) {
  console.error(e.message);
  process.exit(2);
}

async function synth(name, args) {
  return synthFile("moe_bench", opt.dir, name, args, opt.threads);
}
const llamaRound = (model, vocab, p, n) => peer.round(model, vocab, { p, n });
const llama = peer.llama;

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
      const a = await loomRound(file, { p: opt.p, n: opt.n, threads: opt.threads });
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
