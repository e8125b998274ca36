// The parts of Loom-against-llama.cpp benchmarks that bench/moe_bench.mjs and
// bench/peer_bench.mjs share: running `loom synth` / `loom bench`, and timing llama.cpp on the
// same file, either with llama.cpp's own llama-bench (a path in LLAMA_BENCH) or through the npm
// package node-llama-cpp (its prebuilt CPU binary, installed by tests/serve/install.sh tests/moe).
//
// node-llama-cpp figures come in two kinds: llama.cpp's own timers (llama_perf_context: "prompt
// eval time" over the prompt's batches, "eval time" over the one-token decodes), read with
// printTimings, which leave out everything between llama_decode calls (sampling, the JavaScript
// await per token), and the wall clock seen from JavaScript around the same calls.
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";

const execFileP = promisify(execFile);
const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, "..");
export const LOOM = process.env.LOOM_BIN || path.join(root, "build/src/loom/cli/loom");
const nlcPath = path.join(root, "tests/moe/node_modules/node-llama-cpp/dist/index.js");

export const median = (v) => {
  const s = [...v].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
export const load = () => os.loadavg().map((x) => x.toFixed(2)).join(" ");

// Fails with a clear message when the loom binary is missing.
export function checkLoom(tool) {
  if (!fs.existsSync(LOOM)) {
    throw new Error(`${tool}: no loom binary at ${LOOM} (build it: scripts/build.sh, or set ` +
      "LOOM_BIN)");
  }
}

export async function loom(args) {
  try {
    const { stdout } = await execFileP(LOOM, args, { maxBuffer: 64 << 20 });
    return stdout;
  } catch (e) {
    throw new Error(`loom ${args.join(" ")} failed: ${(e.stderr || e.message).trim()}`);
  }
}

// `loom synth -o DIR/NAME.gguf ARGS`, once: an existing file is reused.
export async function synth(tool, dir, name, args, threads) {
  const file = path.join(dir, name + ".gguf");
  if (!fs.existsSync(file)) {
    console.error(`${tool}: writing ${file}`);
    await loom(["synth", "-o", file, "--threads", String(threads), ...args]);
  }
  return file;
}

// One `loom bench --json -r 1` round.  Per-round bandwidth and fraction of the roofline come from
// its "bandwidth_per_round" / "fraction_of_roofline_per_round" when it prints them, else from the
// run's "bandwidth_bytes_per_s" / "fraction_of_roofline".
export async function loomRound(file, { p, n, threads, depth = 0, extra = [] }) {
  const args = ["bench", "-m", file, "-p", String(p), "-n", String(n), "-r", "1",
    "--threads", String(threads), "--json", ...extra];
  if (depth > 0) args.push("--depth", String(depth));
  const j = JSON.parse(await loom(args));
  if (depth > 0 && j.depth !== depth) {
    throw new Error(`loom bench ran at depth ${j.depth}, not ${depth} (does it take --depth?)`);
  }
  const first = (a, b) => (Array.isArray(a) && a.length > 0 ? a[0] : b);
  return { pp: j.prompt_tokens_per_s_median, tg: j.gen_tokens_per_s_median,
    bw: first(j.bandwidth_per_round, j.bandwidth_bytes_per_s),
    roofline_fraction: first(j.fraction_of_roofline_per_round, j.fraction_of_roofline),
    roofline: j.roofline_tokens_per_s, bytes_per_token: j.weight_bytes_per_token,
    bw_before: j.bandwidth_before, bw_after: j.bandwidth_after };
}

// A fixed pseudo-random prompt of ordinary ids (no special tokens), BOS first.
export function promptIds(vocab, n, seed) {
  let s = seed >>> 0;
  const ids = [1];
  while (ids.length < n) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    ids.push(3 + (s % (vocab - 3)));
  }
  return ids.slice(0, n);
}

// "prompt eval time = X ms / N tokens" and "eval time = Y ms / M runs" of the last printTimings.
export function parseTimings(lines) {
  const text = "\n" + lines.join("\n");
  const grab = (re) => {
    const m = text.match(re);
    return m ? { ms: Number(m[1]), count: Number(m[2]) } : null;
  };
  return { prompt: grab(/prompt eval time =\s*([\d.]+) ms \/\s*(\d+) tokens/),
    eval: grab(/\n[^\n]*?\beval time =\s*([\d.]+) ms \/\s*(\d+) runs/) };
}

// llama.cpp through node-llama-cpp.  Returns { llama, info, round(model, vocab, opts) }.
export async function openNodeLlama(tool, threads) {
  if (!fs.existsSync(nlcPath)) {
    throw new Error(`${tool}: node-llama-cpp is not installed; run tests/serve/install.sh ` +
      "tests/moe");
  }
  const { getLlama, LlamaLogLevel } = await import(pathToFileURL(nlcPath).href);
  // llama.cpp's log lines, collected for printTimings (and for the CPU backend it loaded).
  let logLines = [];
  const allLines = [];
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.info,
    logger: (level, message) => { logLines.push(message); allLines.push(message); } });
  const pkg = JSON.parse(fs.readFileSync(path.join(path.dirname(nlcPath), "../package.json"),
    "utf8"));

  // The CPU backend library llama.cpp chose (its CPU variant), from its load log or failing that
  // from the libraries mapped into this process.
  const cpuVariant = () => {
    for (const l of allLines) {
      const m = l.match(/libggml-cpu-?([\w-]*)\.so/);
      if (m) return m[1] || "generic";
    }
    try {
      const maps = fs.readFileSync("/proc/self/maps", "utf8");
      const m = maps.match(/libggml-cpu-?([\w-]*)\.so/);
      if (m) return m[1] || "generic";
    } catch { /* not Linux */ }
    return "unknown";
  };

  const info = () => ({ engine: "node-llama-cpp", node_llama_cpp: pkg.version,
    llama_cpp: llama.llamaCppRelease, build_type: llama.buildType, cpu_variant: cpuVariant(),
    system_info: llama.systemInfo, cpu_math_cores: llama.cpuMathCores,
    max_threads: llama.maxThreads });

  // One round: a short warm-up pass (pages the weights in), then a measured one: `depth`
  // tokens evaluated first (untimed), the prompt of p tokens in one batch, then n greedy
  // one-token decodes.
  async function round(model, vocab, { p, n, depth = 0, flashAttention }) {
    const context = await model.createContext({ contextSize: depth + p + n + 16,
      batchSize: Math.max(512, p), threads: { ideal: threads, min: threads },
      ...(flashAttention === undefined ? {} : { flashAttention }), performanceTracking: true });
    try {
      if (context.currentThreads !== threads) {
        throw new Error(`llama.cpp context runs ${context.currentThreads} threads, not ${threads}`);
      }
      const sequence = context.getSequence();
      const prompt = promptIds(vocab, p, 42);
      const prefix = depth > 0 ? promptIds(vocab, depth, 7) : [];
      let out = null;
      for (const pass of [{ warm: true, d: 0, n: Math.min(n, 8) }, { warm: false, d: depth, n }]) {
        await sequence.clearHistory();
        if (pass.d > 0) {
          await sequence.evaluateWithoutGeneratingNewTokens(prefix);
        }
        await context.printTimings();  // resets llama.cpp's counters
        logLines = [];
        // After a prefix the prompt is not the sequence's start: p ordinary ids, no BOS.
        const ids = pass.d > 0 ? promptIds(vocab, p + 1, 42).slice(1) : prompt;
        const t0 = performance.now();
        await sequence.evaluateWithoutGeneratingNewTokens(ids);
        const t1 = performance.now();
        let count = 0;
        for await (const _ of sequence.evaluate([prompt[1]], { temperature: 0 })) {
          if (++count >= pass.n) break;
        }
        const t2 = performance.now();
        logLines = [];
        await context.printTimings();
        if (pass.warm) continue;
        const tm = parseTimings(logLines);
        if (!tm.prompt || !tm.eval) throw new Error("no llama.cpp timings in:\n" + logLines.join(""));
        if (sequence.nextTokenIndex !== pass.d + p + n) {
          console.error(`warning: node-llama-cpp's sequence holds ${sequence.nextTokenIndex} tokens, ` +
            `not depth + p + n = ${pass.d + p + n}`);
        }
        out = {
          pp_wall: p / ((t1 - t0) / 1e3), tg_wall: n / ((t2 - t1) / 1e3),
          pp: tm.prompt.count / (tm.prompt.ms / 1e3), tg: tm.eval.count / (tm.eval.ms / 1e3),
          eval_runs: tm.eval.count, prompt_tokens: tm.prompt.count,
          js_us_per_token: ((t2 - t1) * 1e3 - tm.eval.ms * 1e3) / n,
          context_tokens: sequence.nextTokenIndex,  // depth + p + n when all went in
        };
      }
      return out;
    } finally {
      await context.dispose();
    }
  }
  return { llama, info, round };
}

// llama.cpp's own llama-bench at `bin`: one run of `-p P -n N -t T -r 1 -d D -o json`; its pp and
// tg tests' avg_ts, and the build and CPU it reports.
export async function llamaBenchRound(bin, file, { p, n, threads, depth = 0, flashAttention = true }) {
  const args = ["-m", file, "-p", String(p), "-n", String(n), "-t", String(threads), "-r", "1",
    "-d", String(depth), "-fa", flashAttention ? "1" : "0", "-o", "json"];
  let stdout;
  try {
    ({ stdout } = await execFileP(bin, args, { maxBuffer: 64 << 20 }));
  } catch (e) {
    throw new Error(`${bin} ${args.join(" ")} failed: ${(e.stderr || e.message).trim()}`);
  }
  const tests = JSON.parse(stdout);
  const pick = (pred) => {
    const t = tests.find(pred);
    if (!t) throw new Error(`llama-bench printed no such test in:\n${stdout}`);
    return t;
  };
  const ppTest = pick((t) => t.n_prompt === p && t.n_gen === 0);
  const tgTest = pick((t) => t.n_gen === n && t.n_prompt === 0);
  return { pp: ppTest.avg_ts, tg: tgTest.avg_ts,
    info: { engine: "llama-bench", build_commit: tgTest.build_commit,
      build_number: tgTest.build_number, cpu_info: tgTest.cpu_info, backends: tgTest.backends,
      n_threads: tgTest.n_threads, flash_attn: tgTest.flash_attn, type_k: tgTest.type_k } };
}

export function checkLlamaBench(tool, bin) {
  if (!fs.existsSync(bin)) throw new Error(`${tool}: LLAMA_BENCH=${bin}: no such file`);
  try {
    fs.accessSync(bin, fs.constants.X_OK);
  } catch {
    throw new Error(`${tool}: LLAMA_BENCH=${bin} is not executable`);
  }
}
