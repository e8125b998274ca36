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
function pickAt(delayUs, speeds = []) {
  const env = (peer) => (delayUs > 0 ? { LOOM_LINK_DELAY_US: `${peer}=${delayUs}` } : {});
  const procs = [
    m.spawn("a", ["cluster", "join", "--secret", "s", "--control", m.socket("a"), "--name", "a", "--memory", "140M"], env(ab.b)),
    m.spawn("b", ["cluster", "join", "--secret", "s", "--control", m.socket("b"), "--name", "b", "--memory", "140M"], env(ab.a)),
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
    assert.equal(single.feasible, false, "the whole model must not fit in one member's 140M");
    assert.match(single.why_not, /needs/);
    // The pick is the fastest feasible prediction.
    const best = feasible.reduce((x, y) => (y.decode_tokens_per_s > x.decode_tokens_per_s ? y : x));
    assert.equal(name(plan.pick), name(best));
    return { pick: name(plan.pick), latency: link.latency_us };
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
