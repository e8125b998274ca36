// `loom cluster run` across "machines" (network namespaces): the daemons start the ranks (no
// ssh), and the greedy tokens equal `loom run` in one process, for tensor and pipeline splits and
// for the plan the cost model picks itself.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { LOOM, Machines, cannotRun } from "./netns.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const shared = process.env.LOOM_SHARED_DIR || path.resolve(here, "../../../shared");
const model = path.join(shared, "models/stories260K/stories260K.gguf");
const why = cannotRun() || (fs.existsSync(model) ? "" :
  "SHARED DATA MISSING: ../shared (or $LOOM_SHARED_DIR) not found");
const ARGS = ["-p", "Once upon a time", "-n", "40", "--temp", "0", "--json", "--threads", "1"];
let m, reference, small, smallReference;

before(() => {
  if (why) return;
  reference = JSON.parse(execFileSync(LOOM, ["run", "-m", model, ...ARGS],
                                      { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }));
  m = new Machines(["a", "b", "c"]);
  m.link("a", "b");
  m.link("a", "c");
  m.link("b", "c");
  // Each member lends 140 MiB: too little for the synthetic "small" model (117 MB of f32 weights
  // and its KV cache) on one member, enough for half of it.
  small = path.join(m.dir, "small.gguf");
  execFileSync(LOOM, ["synth", "--shape", "small", "--type", "f32", "-o", small], { stdio: "ignore" });
  smallReference = JSON.parse(execFileSync(LOOM, ["run", "-m", small, ...ARGS, "--ctx", "512"],
                                           { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }));
  for (const name of ["a", "b", "c"]) {
    m.spawn(name, ["cluster", "join", "--secret", "s", "--control", m.socket(name), "--name", name,
                   "--memory", "140M"]);
  }
  m.status("a", ["--wait-members", "3", "--wait", "60"]);
});

after(() => m?.close());

// Returns loom run's JSON and the command's stderr.
function clusterRun(extra, file = model) {
  const r = m.runFull("a", ["cluster", "run", "--control", m.socket("a"), "-m", file, ...extra,
                            ...ARGS], { timeout: 120000 });
  assert.equal(r.status, 0, `${r.stderr}\n${m.logs()}`);
  return { out: JSON.parse(r.stdout), err: r.stderr };
}

for (const split of [["--tp", "2"], ["--pp", "2"], ["--tp", "2", "--pp", "1"], ["--pp", "3"]]) {
  test(`loom cluster run ${split.join(" ")} gives loom run's greedy tokens`,
       { skip: why || false, timeout: 180000 }, () => {
    const { out, err } = clusterRun(split);
    assert.match(err, /loom cluster run: tp \d x pp \d on a\S*, /);
    assert.equal(reference.generated_token_ids.length, 40);
    assert.deepEqual(out.generated_token_ids, reference.generated_token_ids);
    assert.equal(out.text, reference.text);
    assert.equal(out.tp * out.pp, split.includes("--pp") && split[split.indexOf("--pp") + 1] === "3" ? 3 : 2);
  });
}

test("loom cluster run without a split runs the plan it picks", { skip: why || false, timeout: 180000 }, () => {
  const { out, err } = clusterRun(["--ctx", "512"], small);
  assert.ok(out.tp * out.pp >= 2, "the model does not fit one member: it must be split");
  assert.deepEqual(out.generated_token_ids, smallReference.generated_token_ids);
  // The prediction before, the measurement after.
  assert.match(err, /predicted [0-9.]+ tokens\/s/);
  assert.match(err, /measured [0-9.]+ tokens\/s/);
  console.log(err.split("\n").filter((l) => l.startsWith("loom cluster run")).join("\n"));
});
