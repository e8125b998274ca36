// Self-forming pods on "machines" that are network namespaces of this host (root needed), for
// docs/benchmarks.md ("Pods that form themselves"):
//  1. discovery to a ready plan: 4 namespaces (a veth pair between each two), daemons started
//     at once; the time until `loom cluster status -m MODEL` returns with all 4 members, all 6
//     links measured and the plan (fixed rank speeds, so no calibration is timed); median of runs.
//  2. scaling and the plan against the measurement: `loom cluster run` with TP=2 (one thread per
//     rank) on two namespaces against one process with one thread and one with two (the machine's
//     ceiling for two ranks), alternated, at each emulated one-way delay; each cluster run's
//     printed prediction beside its measurement.
//  3. re-plan: `loom cluster serve` on 3 namespaces, the second member of its pod killed
//     (SIGKILL of every process of that machine) while idle; the time until the endpoint serves a
//     request again.
//
//   sudo node bench/cluster_bench.mjs MODEL [ROUNDS=3] [GEN_TOKENS=64]
//   env: LOOM (binary), DELAYS ("0 50 300")
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
process.env.LOOM_BIN ||= process.env.LOOM || path.resolve(here, "../build/src/loom/cli/loom");
const { LOOM, Machines, cannotRun, waitFor, sleep } = await import("../tests/cluster/netns.mjs");

const [model, roundsArg, genArg] = process.argv.slice(2);
if (!model) {
  console.error("usage: node bench/cluster_bench.mjs MODEL [ROUNDS=3] [GEN_TOKENS=64]");
  process.exit(2);
}
const why = cannotRun();
if (why) {
  console.error(`cluster bench: ${why}`);
  process.exit(1);
}
const rounds = Number(roundsArg || 3), gen = String(genArg || 64);
const delays = (process.env.DELAYS || "0 50 300").split(/\s+/).filter(Boolean).map(Number);
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const RUN = ["-p", "Once upon a time", "-n", gen, "--temp", "0", "--json"];

function join(m, name, env = {}, extra = []) {
  return m.spawn(name, ["cluster", "join", "--secret", "bench", "--control", m.socket(name), "--name", name, ...extra], env);
}

// 1. Discovery to a ready plan.
const discovery = [];
for (let r = 0; r < rounds; ++r) {
  const m = new Machines(["a", "b", "c", "d"]);
  try {
    for (const [x, y] of [["a", "b"], ["a", "c"], ["a", "d"], ["b", "c"], ["b", "d"], ["c", "d"]]) m.link(x, y);
    const t0 = Date.now();
    for (const n of ["a", "b", "c", "d"]) join(m, n);
    m.status("a", ["--wait-members", "4", "--wait", "60", "-m", model, "--decode-gbs", "10", "--prompt-gflops", "50"]);
    discovery.push((Date.now() - t0) / 1000);
  } finally {
    m.close();
  }
}
console.log(`discovery to a ready plan, 4 members, 6 links: ${discovery.map((x) => x.toFixed(2)).join(" ")} s; median ${median(discovery).toFixed(2)} s`);

// 2. Scaling and prediction.
function localRun(threads) {
  const out = JSON.parse(execFileSync(LOOM, ["run", "-m", model, ...RUN, "--threads", String(threads)],
                                      { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }));
  return out.timings.decode_tokens_per_s;
}
console.log("\n| link | one process, 2 threads | one process, 1 thread | cluster TP=2 (predicted) | TP=2 / 2 threads |");
console.log("|---|---|---|---|---|");
for (const delay of delays) {
  const m = new Machines(["a", "b"]);
  try {
    const ab = m.link("a", "b");
    const env = (peer) => (delay > 0 ? { LOOM_LINK_DELAY_US: `${peer}=${delay}` } : {});
    join(m, "a", env(ab.b));
    join(m, "b", env(ab.a));
    const view = m.status("a", ["--wait-members", "2", "--wait", "60"]);
    const link = view.fastest[0].latency_us;
    const two = [], one = [], tp = [], predicted = [];
    for (let r = 0; r < rounds; ++r) {
      two.push(localRun(2));
      one.push(localRun(1));
      const res = m.runFull("a", ["cluster", "run", "--control", m.socket("a"), "-m", model, "--tp", "2", ...RUN, "--threads", "1"],
                            { timeout: 600000, env: env(ab.b) });
      if (res.status !== 0) throw new Error(res.stderr);
      tp.push(JSON.parse(res.stdout).timings.decode_tokens_per_s);
      // The prediction for the split run: the plan's TP=2 row.
      const plan = m.status("a", ["-m", model]).plan;
      const row = plan.plans.find((p) => p.tp === 2 && p.pp === 1);
      predicted.push(row?.feasible ? row.decode_tokens_per_s : NaN);
    }
    const t = median(tp), p = median(predicted);
    console.log(`| ${link.toFixed(0)} us measured (${delay} emulated) | ${median(two).toFixed(1)} | ${median(one).toFixed(1)} | ` +
                `**${t.toFixed(1)}** (${p.toFixed(1)}, ${p > 0 ? ((p / t - 1) * 100).toFixed(0) : "?"}%) | ${(t / median(two)).toFixed(2)}x |`);
  } finally {
    m.close();
  }
}

// 3. Re-plan after a member dies (idle).
const replans = [];
for (let r = 0; r < rounds; ++r) {
  const m = new Machines(["a", "b", "c"]);
  try {
    m.link("a", "b"); m.link("a", "c"); m.link("b", "c");
    for (const n of ["a", "b", "c"]) join(m, n);
    m.status("a", ["--wait-members", "3", "--wait", "60"]);
    const serve = m.spawn("a", ["cluster", "serve", "--control", m.socket("a"), "-m", model, "--tp", "2", "--port", "0", "--threads", "1"]);
    const url = await waitFor(() => fs.readFileSync(serve.log, "utf8").match(/listening on (http:\/\/\S+)/)?.[1], 120000, "cluster serve");
    const victim = fs.readFileSync(serve.log, "utf8").match(/pod 1: tp \d x pp \d on a, (\w)/)[1];
    const t0 = Date.now();
    for (const pid of execFileSync("ip", ["netns", "pids", m.ns[victim]], { encoding: "utf8" }).split("\n").filter(Boolean)) {
      try { process.kill(Number(pid), "SIGKILL"); } catch {}
    }
    await waitFor(() => /pod 2 ready/.test(fs.readFileSync(serve.log, "utf8")), 120000, "the second pod");
    const s = (Date.now() - t0) / 1000;
    const log = fs.readFileSync(serve.log, "utf8");
    replans.push(s);
    console.log(`re-plan ${r + 1}: ${s.toFixed(2)} s from the kill to the new pod serving (${log.match(/pod 1 failed \(([^)]*)\)/)?.[1]})`);
    await sleep(100);
    void url;
  } finally {
    m.close();
  }
}
console.log(`re-plan after a member dies, idle: median ${median(replans).toFixed(2)} s`);
