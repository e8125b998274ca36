#!/usr/bin/env node
// Loom against llama.cpp on the same files, a benchmark anyone can rerun (issue 18): synthetic
// TinyLlama-1.1B-shaped models (`loom synth`, random weights, real speed) in Q4_0, llama.cpp's
// Q4_K_M mix and Q8_0, at context depths 0 and 4096, `loom bench --json -p 128 -n 64 -r 1
// --threads 2 [--depth D]` alternated round by round with llama.cpp on the same file and threads.
// Prints the medians and ratios, and per round Loom's measured bandwidth and fraction of the
// bandwidth roofline.
//
// llama.cpp: with LLAMA_BENCH=/path/to/llama-bench set, llama.cpp's own benchmark
// (`llama-bench -m F -p 128 -n 64 -t 2 -r 1 -d D -fa 1 -o json`, its avg_ts; its build_commit and
// cpu_info are printed); otherwise the npm package node-llama-cpp (prebuilt CPU binaries,
// installed by `tests/serve/install.sh tests/moe`), timed by llama.cpp's own timers
// (llama_perf_context), with the wall clock seen from JavaScript beside them (`--peer both` runs
// both in each round, to compare them).  The ratios use llama-bench when it ran, else
// node-llama-cpp's own timers.  `--mlx` also converts the model to MLX 4-bit (`loom convert --to
// mlx --bits 4 --group-size 64`, from the Q8_0 file: the same weights) and benches it against
// Loom's Q4_0 and the roofline (llama.cpp does not read MLX).
//
// Rerun (from the repository root, after scripts/build.sh and tests/serve/install.sh tests/moe):
//   node bench/peer_bench.mjs                                  # node-llama-cpp, 3 rounds
//   LLAMA_BENCH=/path/to/llama-bench node bench/peer_bench.mjs --json /tmp/peer.json
//   node bench/peer_bench.mjs --types q4_0 --depths 0 --rounds 5 --peer both --mlx
// Files are written once into --dir (default $TMPDIR/loom-peer-bench) and reused: about 2.6 GB
// for the three types (Q4_K_M takes a few minutes to quantize on 2 cores).  Run it on a quiet
// machine: the load average is printed with every round.  LOOM_BIN overrides
// build/src/loom/cli/loom.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { checkLlamaBench, checkLoom, llamaBenchRound, load, loom, loomRound, median,
  openNodeLlama, synth } from "./llama_peer.mjs";

const kUsage = `usage: node bench/peer_bench.mjs [options]
  --types T,T        weight types (default q4_0,q4_k_m,q8_0; '' for none, e.g. with --mlx)
  --depths D,D       context depths: tokens already in the context (default 0,4096)
  --rounds N         alternated rounds, medians over them (default 3)
  -p N, -n N         prompt tokens, generated tokens (default 128, 64)
  --threads N        threads on both sides (default 2)
  --shape S          loom synth shape (default tinyllama-1.1b; see loom synth --list)
  --arch A           loom synth architecture (default llama; shape qwen3-30b-a3b needs qwen3moe)
  --layers N         layers (default: the shape's)
  --peer P           llama.cpp as llama-bench | node | both (default: llama-bench when
                     LLAMA_BENCH is set, else node)
  --flash-attn on|off  llama.cpp's flash attention (default on: llama-bench's auto picks it on CPUs)
  --mlx              also Loom's MLX 4-bit against its Q4_0 of the same model
  --dir DIR          where the model files are written and reused (default $TMPDIR/loom-peer-bench)
  --json FILE        also write every figure as JSON
env: LLAMA_BENCH=/path/to/llama-bench, LOOM_BIN=/path/to/loom`;

function parseArgs(argv) {
  const o = { types: ["q4_0", "q4_k_m", "q8_0"], depths: [0, 4096], rounds: 3, p: 128, n: 64,
    threads: 2, shape: "tinyllama-1.1b", layers: 0, peer: process.env.LLAMA_BENCH ? "llama-bench"
      : "node", flashAttn: true, mlx: false, dir: path.join(os.tmpdir(), "loom-peer-bench"),
    json: "" };
  const num = (a, v) => {
    const x = Number(v);
    if (!Number.isInteger(x) || x < 0) throw new Error(`${a}: expected a whole number, got '${v}'`);
    return x;
  };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--help" || a === "-h") {
      console.log(kUsage);
      process.exit(0);
    } else if (a === "--types") o.types = v().split(",").filter((t) => t !== "");
    else if (a === "--depths") o.depths = v().split(",").map((d) => num(a, d));
    else if (a === "--rounds") o.rounds = num(a, v());
    else if (a === "-p") o.p = num(a, v());
    else if (a === "-n") o.n = num(a, v());
    else if (a === "--threads") o.threads = num(a, v());
    else if (a === "--shape") o.shape = v();
    else if (a === "--arch") o.arch = v();
    else if (a === "--layers") o.layers = num(a, v());
    else if (a === "--peer") o.peer = v();
    else if (a === "--flash-attn") {
      const f = v();
      if (f !== "on" && f !== "off") throw new Error(`--flash-attn: expected on or off, got '${f}'`);
      o.flashAttn = f === "on";
    } else if (a === "--mlx") o.mlx = true;
    else if (a === "--dir") o.dir = v();
    else if (a === "--json") o.json = v();
    else throw new Error(`unknown argument '${a}' (see --help)`);
  }
  if (!["llama-bench", "node", "both"].includes(o.peer)) {
    throw new Error(`--peer: expected llama-bench, node or both, got '${o.peer}'`);
  }
  if (o.rounds < 1 || o.p < 1 || o.n < 1 || o.threads < 1) {
    throw new Error("--rounds, -p, -n and --threads must be at least 1");
  }
  return o;
}

// Failures after the start (a loom or llama-bench run that fails) end the run with their message.
process.on("uncaughtException", (e) => {
  console.error(`peer_bench: ${e.message}`);
  process.exit(1);
});

let opt;
let nodePeer = null;
const llamaBench = process.env.LLAMA_BENCH || "";
try {
  opt = parseArgs(process.argv.slice(2));
  checkLoom("peer_bench");
  if (opt.peer !== "node") {
    if (!llamaBench) throw new Error("peer_bench: --peer llama-bench needs LLAMA_BENCH=/path/to/llama-bench");
    checkLlamaBench("peer_bench", llamaBench);
  }
  if (opt.peer !== "llama-bench") nodePeer = await openNodeLlama("peer_bench", opt.threads);
} catch (e) {
  console.error(`peer_bench: ${e.message.replace(/^peer_bench: /, "")}`);
  process.exit(2);
}
fs.mkdirSync(opt.dir, { recursive: true });

// The file declares the shape's context, or one that holds the deepest run when that needs more
// than 2048 tokens (TinyLlama's own).
const maxDepth = Math.max(...opt.depths);
let context = 0;
if (maxDepth + opt.p + opt.n + 16 > 2048) {
  context = 2048;
  while (context < maxDepth + opt.p + opt.n + 16) context *= 2;
}
// An architecture other than llama names the file, unless the shape has no other (qwen3-30b-a3b).
const archName = opt.arch && opt.arch !== "llama" && opt.shape !== "qwen3-30b-a3b" ? `-${opt.arch}` : "";
const base = `${opt.shape}${archName}${opt.layers ? `-L${opt.layers}` : ""}${context ? `-c${context}` : ""}`;
const synthArgs = (type) => ["--shape", opt.shape, "--type", type,
  ...(opt.arch ? ["--arch", opt.arch] : []),
  ...(context ? ["--context", String(context)] : []),
  ...(opt.layers ? ["--layers", String(opt.layers)] : [])];

const fmt = (x, d = 1) => (x === undefined || x === null || Number.isNaN(x) ? "-" : x.toFixed(d));
const gb = (x) => fmt(x / 1e9);

async function loomDepthRound(file, depth) {
  try {
    return await loomRound(file, { p: opt.p, n: opt.n, threads: opt.threads, depth });
  } catch (e) {
    if (depth > 0 && /--depth/.test(e.message)) {
      throw new Error(`this loom bench takes no --depth (${e.message.split("\n")[0]}); ` +
        "use --depths 0 or a newer build");
    }
    throw e;
  }
}

const report = { threads: opt.threads, prompt_tokens: opt.p, gen_tokens: opt.n,
  rounds: opt.rounds, shape: opt.shape, arch: opt.arch ?? "llama", layers: opt.layers, context, peer: opt.peer,
  flash_attn: opt.flashAttn, host: { cpus: os.cpus().length, cpu: os.cpus()[0]?.model },
  load_start: load(), llama_cpp: {}, rows: [], mlx: [] };

// The per-token JavaScript overhead of node-llama-cpp on a model whose decode is nearly free.
if (nodePeer) {
  const tiny = await synth("peer_bench", opt.dir, "tiny-f32", ["--shape", "tiny", "--type", "f32"],
    opt.threads);
  const model = await nodePeer.llama.loadModel({ modelPath: tiny });
  try {
    const r = await nodePeer.round(model, 512, { p: 16, n: 32, flashAttention: opt.flashAttn });
    report.js_overhead = { tg_wall: r.tg_wall, tg: r.tg, js_us_per_token: r.js_us_per_token };
  } finally {
    await model.dispose();
  }
  report.llama_cpp.node = nodePeer.info();
}

for (const type of opt.types) {
  const file = await synth("peer_bench", opt.dir, `${base}-${type}`, synthArgs(type), opt.threads);
  const info = JSON.parse(await loom(["info", "-m", file, "--json"]));
  const vocab = info.hparams.vocab_size;
  const model = nodePeer ? await nodePeer.llama.loadModel({ modelPath: file }) : null;
  try {
    for (const depth of opt.depths) {
      const rounds = [];
      for (let r = 0; r < opt.rounds; ++r) {
        const round = { load: load() };
        round.loom = await loomDepthRound(file, depth);
        if (opt.peer !== "node") {
          const b = await llamaBenchRound(llamaBench, file, { p: opt.p, n: opt.n,
            threads: opt.threads, depth, flashAttention: opt.flashAttn });
          report.llama_cpp.llama_bench = b.info;
          round.bench = { pp: b.pp, tg: b.tg };
        }
        if (nodePeer) {
          round.node = await nodePeer.round(model, vocab, { p: opt.p, n: opt.n, depth,
            flashAttention: opt.flashAttn });
        }
        rounds.push(round);
        const a = round.loom;
        console.error(`peer_bench: ${type} depth ${depth} round ${r + 1}: loom pp ${fmt(a.pp)} tg ` +
          `${fmt(a.tg, 2)} (${gb(a.bw)} GB/s, ${fmt(a.roofline_fraction, 2)} of roofline)` +
          (round.bench ? ` | llama-bench pp ${fmt(round.bench.pp)} tg ${fmt(round.bench.tg, 2)}` : "") +
          (round.node ? ` | node-llama-cpp pp ${fmt(round.node.pp)} tg ${fmt(round.node.tg, 2)} ` +
            `(JS ${fmt(round.node.tg_wall, 2)})` : "") + ` | load ${load()}`);
      }
      const m = (f) => median(rounds.map(f).filter((x) => x !== undefined));
      const row = { type, depth, file, file_bytes: fs.statSync(file).size,
        loom_pp: m((r) => r.loom.pp), loom_tg: m((r) => r.loom.tg),
        bandwidth_per_round: rounds.map((r) => r.loom.bw),
        roofline_fraction_per_round: rounds.map((r) => r.loom.roofline_fraction),
        load_per_round: rounds.map((r) => r.load), rounds };
      if (opt.peer !== "node") {
        row.bench_pp = m((r) => r.bench.pp);
        row.bench_tg = m((r) => r.bench.tg);
      }
      if (nodePeer) {
        row.node_pp = m((r) => r.node.pp);
        row.node_tg = m((r) => r.node.tg);
        row.node_pp_wall = m((r) => r.node.pp_wall);
        row.node_tg_wall = m((r) => r.node.tg_wall);
      }
      row.peer_pp = row.bench_pp ?? row.node_pp;
      row.peer_tg = row.bench_tg ?? row.node_tg;
      row.pp_ratio = row.loom_pp / row.peer_pp;
      row.tg_ratio = row.loom_tg / row.peer_tg;
      report.rows.push(row);
    }
  } finally {
    if (model) await model.dispose();
  }
}

// MLX 4-bit against Q4_0, Loom only (the same weights: converted from the Q8_0 file).
if (opt.mlx) {
  const q8 = await synth("peer_bench", opt.dir, `${base}-q8_0`, synthArgs("q8_0"), opt.threads);
  const q4 = await synth("peer_bench", opt.dir, `${base}-q4_0`, synthArgs("q4_0"), opt.threads);
  const mlxDir = path.join(opt.dir, `${base}-mlx4-g64`);
  if (!fs.existsSync(path.join(mlxDir, "config.json"))) {
    console.error(`peer_bench: converting ${q8} to ${mlxDir}`);
    await loom(["convert", "-m", q8, "-o", mlxDir, "--to", "mlx", "--bits", "4",
      "--group-size", "64"]);
  }
  for (const depth of opt.depths) {
    const rounds = [];
    for (let r = 0; r < opt.rounds; ++r) {
      const q = await loomDepthRound(q4, depth);
      const x = await loomDepthRound(mlxDir, depth);
      rounds.push({ q4_0: q, mlx4: x, load: load() });
      console.error(`peer_bench: mlx4 depth ${depth} round ${r + 1}: q4_0 tg ${fmt(q.tg, 2)} ` +
        `(${fmt(q.roofline_fraction, 2)} of roofline) | mlx4 tg ${fmt(x.tg, 2)} ` +
        `(${fmt(x.roofline_fraction, 2)}) | load ${load()}`);
    }
    const m = (f) => median(rounds.map(f));
    report.mlx.push({ depth, dir: mlxDir, q4_0_pp: m((r) => r.q4_0.pp), q4_0_tg: m((r) => r.q4_0.tg),
      mlx4_pp: m((r) => r.mlx4.pp), mlx4_tg: m((r) => r.mlx4.tg),
      q4_0_roofline: m((r) => r.q4_0.roofline), mlx4_roofline: m((r) => r.mlx4.roofline),
      q4_0_fraction: m((r) => r.q4_0.roofline_fraction),
      mlx4_fraction: m((r) => r.mlx4.roofline_fraction), rounds });
  }
}
report.load_end = load();

// The report.
const lc = report.llama_cpp;
console.log(`${opt.shape}${opt.layers ? ` (${opt.layers} layers)` : ""}, threads ${opt.threads}, ` +
  `prompt ${opt.p}, generation ${opt.n}, ${opt.rounds} alternated rounds, medians; ` +
  `llama.cpp flash attention ${opt.flashAttn ? "on" : "off"}`);
if (lc.llama_bench) {
  const b = lc.llama_bench;
  console.log(`llama-bench: ${llamaBench}, build ${b.build_commit} (${b.build_number}), ` +
    `${b.backends}, cpu ${b.cpu_info}`);
}
if (lc.node) {
  const nd = lc.node;
  console.log(`node-llama-cpp ${nd.node_llama_cpp} (${nd.build_type}), llama.cpp release ` +
    `${nd.llama_cpp?.release}, CPU variant ${nd.cpu_variant}; JS overhead on a tiny model ` +
    `${fmt(report.js_overhead.js_us_per_token, 0)} us/token`);
  console.log(`  ${nd.system_info.trim()}`);
}
console.log(`load average ${report.load_start} at the start, ${report.load_end} at the end`);
const peerName = lc.llama_bench ? "llama-bench" : "llama.cpp";
const nodeCols = lc.node && lc.llama_bench;
if (report.rows.length > 0) {
  console.log(`| type | depth | loom pp | ${peerName} pp | ratio | loom tg | ${peerName} tg |` +
    (nodeCols ? " node-llama-cpp tg (JS wall) |" : lc.node ? " (JS wall) |" : "") +
    " ratio | GB/s per round | roofline fraction per round |");
  console.log("| --- | --- | --- | --- | --- | --- | --- |" + (lc.node ? " --- |" : "") + " --- | --- | --- |");
  for (const r of report.rows) {
    const nodeCell = nodeCols ? ` ${fmt(r.node_tg, 2)} (${fmt(r.node_tg_wall, 2)}) |`
      : lc.node ? ` (${fmt(r.node_tg_wall, 2)}) |` : "";
    console.log(`| ${r.type} | ${r.depth} | ${fmt(r.loom_pp)} | ${fmt(r.peer_pp)} | ` +
      `${fmt(r.pp_ratio, 2)}x | ${fmt(r.loom_tg, 2)} | ${fmt(r.peer_tg, 2)} |${nodeCell} ` +
      `${fmt(r.tg_ratio, 2)}x | ${r.bandwidth_per_round.map(gb).join(", ")} | ` +
      `${r.roofline_fraction_per_round.map((f) => fmt(f, 2)).join(", ")} |`);
  }
}
if (report.mlx.length > 0) {
  console.log("| depth | q4_0 pp | mlx4 pp | q4_0 tg | mlx4 tg | mlx4/q4_0 tg | q4_0 roofline " +
    "(fraction) | mlx4 roofline (fraction) |");
  console.log("| --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const r of report.mlx) {
    console.log(`| ${r.depth} | ${fmt(r.q4_0_pp)} | ${fmt(r.mlx4_pp)} | ${fmt(r.q4_0_tg, 2)} | ` +
      `${fmt(r.mlx4_tg, 2)} | ${fmt(r.mlx4_tg / r.q4_0_tg, 2)}x | ${fmt(r.q4_0_roofline)} ` +
      `(${fmt(r.q4_0_fraction, 2)}) | ${fmt(r.mlx4_roofline)} (${fmt(r.mlx4_fraction, 2)}) |`);
  }
}
if (opt.json) fs.writeFileSync(opt.json, JSON.stringify(report, null, 2));
