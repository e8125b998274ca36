// The plan a pod gets follows its measured links: two "machines" (network namespaces) that each
// lend too little memory for the whole model split it; over a fast link tensor parallelism is
// predicted fastest, and once the tcp backend's link emulation adds latency the cost model moves
// to a pipeline split (the seed's advice: TP needs a low-latency link, over TCP prefer PP).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import path from "node:path";
import { after, before, test } from "node:test";

import { LOOM, Machines, cannotRun } from "./netns.mjs";

const why = cannotRun();
let m, ab, model;

before(() => {
  if (why) return;
  m = new Machines(["a", "b"]);
  ab = m.link("a", "b");
  model = path.join(m.dir, "small.gguf");
  execFileSync(LOOM, ["synth", "--shape", "small", "--type", "f32", "-o", model], { stdio: "ignore" });
});

after(() => m?.close());

// `speeds`: extra `cluster status` arguments; none = measure the model on this machine.
// `memory`: what a and b lend; `body(view)` runs while the daemons are up.
function pickAt(delayUs, speeds = [], memory = ["140M", "140M"], body = null) {
  const env = (peer) => (delayUs > 0 ? { LOOM_LINK_DELAY_US: `${peer}=${delayUs}` } : {});
  const procs = [
    m.spawn("a", ["cluster", "join", "--secret", "s", "--control", m.socket("a"), "--name", "a", "--memory", memory[0]], env(ab.b)),
    m.spawn("b", ["cluster", "join", "--secret", "s", "--control", m.socket("b"), "--name", "b", "--memory", memory[1]], env(ab.a)),
  ];
  try {
    const view = m.status("a", ["--wait-members", "2", "--wait", "60", "-m", model, ...speeds]);
    const plan = view.plan;
    const link = view.fastest[0];
    const name = (p) => `tp${p.tp} pp${p.pp}`;
    const feasible = plan.plans.filter((p) => p.feasible);
    console.log(`link ${link.latency_us.toFixed(0)} us: ` +
                feasible.map((p) => `${name(p)} ${p.decode_tokens_per_s.toFixed(1)} tok/s`).join(", ") +
                ` -> ${name(plan.pick)}`);
    const single = plan.plans.find((p) => p.tp === 1 && p.pp === 1);
    assert.equal(single.feasible, false, "the whole model must not fit in one member");
    assert.match(single.why_not, /needs/);
    // The pick is the fastest feasible prediction.
    const best = feasible.reduce((x, y) => (y.decode_tokens_per_s > x.decode_tokens_per_s ? y : x));
    assert.equal(name(plan.pick), name(best));
    if (body) body(view, env(ab.b));
    return { pick: name(plan.pick), latency: link.latency_us, plan };
  } finally {
    for (const p of procs) p.kill("SIGKILL");
  }
}

// Ranks of the speed of one member of a real pod (a machine each, not two namespaces sharing this
// machine's two cores and memory bus), so that only the measured links decide.
const SPEEDS = ["--decode-gbs", "10", "--prompt-gflops", "50"];

test("the chosen plan moves from tensor to pipeline parallelism as link latency grows",
     { skip: why || false, timeout: 180000 }, async () => {
  const fast = pickAt(0, SPEEDS);
  const slow = pickAt(1000, SPEEDS);
  assert.ok(slow.latency > fast.latency + 800, `measured ${fast.latency} and ${slow.latency} us`);
  assert.equal(fast.pick, "tp2 pp1");
  assert.equal(slow.pick, "tp1 pp2");
});

test("with this machine measured, the pick is the cost model's fastest feasible plan",
     { skip: why || false, timeout: 180000 }, async () => {
  pickAt(0);
});

test("members that lend different memory get pipeline stages in proportion, and run them",
     { skip: why || false, timeout: 180000 }, async () => {
  const reference = JSON.parse(execFileSync(LOOM, ["run", "-m", model, "-p", "Once upon a time", "-n", "16",
                                                   "--temp", "0", "--json", "--threads", "1"],
                                            { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }));
  const { pick, plan } = pickAt(1000, SPEEDS, ["170M", "85M"], (view, env) => {
    const r = m.runFull("a", ["cluster", "run", "--control", m.socket("a"), "-m", model, ...SPEEDS, "-p",
                              "Once upon a time", "-n", "16", "--temp", "0", "--json", "--threads", "1"],
                        { timeout: 120000, env });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /tp 1 x pp 2 on a, b \(layers 5,3\)/);
    assert.deepEqual(JSON.parse(r.stdout).generated_token_ids, reference.generated_token_ids);
  });
  assert.equal(pick, "tp1 pp2");
  // 8 layers over 170 and 85 MiB: 5 and 3.
  assert.deepEqual(plan.pick.stage_layers, [5, 3]);
  assert.deepEqual(plan.members.map((x) => x.name), ["a", "b"]);
});
