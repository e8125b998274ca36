// `loom cluster serve` keeps serving when a member of its pod dies: three "machines", a model
// that fits no single member (each lends 140 MiB), a pod on two of them; mid-stream every process
// of the second machine is killed (SIGKILL), the pod is planned again on the two left, and the
// stream (the official OpenAI client) completes with the text of an uninterrupted run.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { LOOM, Machines, cannotRun, waitFor } from "./netns.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const openai = path.resolve(here, "../serve/node_modules/openai");
const why = cannotRun() || (fs.existsSync(openai) ? "" : "the openai package is not installed (tests/serve/install.sh)");
const PROMPT = "Once upon a time";
const N = 1000;  // long enough (seconds) that the kill lands mid-generation
let m, model, reference;

before(() => {
  if (why) return;
  m = new Machines(["a", "b", "c"]);
  m.link("a", "b");
  m.link("a", "c");
  m.link("b", "c");
  model = path.join(m.dir, "small.gguf");
  execFileSync(LOOM, ["synth", "--shape", "small", "--type", "f32", "-o", model], { stdio: "ignore" });
  reference = JSON.parse(execFileSync(LOOM, ["run", "-m", model, "-p", PROMPT, "-n", String(N), "--temp", "0",
                                             "--json", "--ctx", "1100"],
                                      { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }));
  for (const name of ["a", "b", "c"]) {
    m.spawn(name, ["cluster", "join", "--secret", "s", "--control", m.socket(name), "--name", name,
                   "--memory", "140M"]);
  }
  m.status("a", ["--wait-members", "3", "--wait", "60"]);
});

after(() => m?.close());

test("a member of a serving pod dies mid-stream: the pod is planned again and the stream completes",
     { skip: why || false, timeout: 300000 }, async () => {
  const serve = m.spawn("a", ["cluster", "serve", "--control", m.socket("a"), "-m", model, "--port", "0",
                              "--ctx", "1100", "--parallel", "1", "--threads", "1"]);
  const url = await waitFor(() => {
    const log = fs.readFileSync(serve.log, "utf8");
    if (serve.exitCode !== null) throw new Error(`cluster serve exited:\n${log}`);
    const u = log.match(/listening on (http:\/\/\S+)/);
    return u ? `${u[1]}/v1` : null;
  }, 120000, "cluster serve to listen");
  const log = fs.readFileSync(serve.log, "utf8");
  const pod = log.match(/pod 1: tp (\d) x pp (\d) on a, (\w)/);
  assert.ok(pod, log);
  const victim = pod[3];
  const client = spawn("ip", ["netns", "exec", m.ns.a, process.execPath, path.join(here, "stream_client.mjs"),
                              url, "small", PROMPT, String(N)], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  client.stderr.on("data", (d) => { stderr += d; });
  let text = "", pieces = 0, killedAt = -1, finish = null;
  const t0 = Date.now();
  for await (const line of readline.createInterface({ input: client.stdout })) {
    const e = JSON.parse(line);
    if (e.done) { finish = e.finish; console.log(`done after ${Date.now() - t0} ms, ${pieces} pieces`); break; }
    text += e.text;
    if (++pieces === 10) {
      killedAt = text.length;
      const pids = execFileSync("ip", ["netns", "pids", m.ns[victim]], { encoding: "utf8" }).split("\n").filter(Boolean);
      for (const pid of pids) { try { process.kill(Number(pid), "SIGKILL"); } catch {} }
      console.log(`killed ${pids.length} processes of ${victim} after ${Date.now() - t0} ms`);
    }
  }
  await new Promise((r) => setTimeout(r, 300));
  const all = fs.readFileSync(serve.log, "utf8");
  assert.ok(finish !== null, `the stream did not finish\n${all}\n${stderr}`);
  assert.ok(killedAt > 0, `the stream ended before the kill\n${all}\n${stderr}`);
  assert.match(all, /pod 1 failed/, all);
  const again = all.match(/pod 2: tp (\d) x pp (\d) on a, (\w)/);
  assert.ok(again, all);
  assert.notEqual(again[3], victim);
  const resumed = all.match(/serving again after ([0-9.]+) s/);
  console.log(`killed ${victim} after ${pieces >= 10 ? 10 : pieces} pieces; ${again[0]}; serving again after ${resumed?.[1]} s`);
  assert.equal(finish, "length", stderr);
  assert.equal(text, reference.text);

  // The machine comes back; `loom cluster rebalance` plans again with it, and serving goes on.
  m.spawn(victim, ["cluster", "join", "--secret", "s", "--control", m.socket(victim), "--name", victim,
                   "--memory", "140M"]);
  m.status("a", ["--wait-members", "3", "--wait", "60"]);
  const answer = JSON.parse(m.run("a", ["cluster", "rebalance", "--url", url.replace(/\/v1$/, "")]));
  assert.equal(answer.generation, 3);
  assert.equal(answer.ready, true);
  assert.match(fs.readFileSync(serve.log, "utf8"), /pod 3: tp \d x pp \d on a, \w/);
  const short = execFileSync("ip", ["netns", "exec", m.ns.a, process.execPath, path.join(here, "stream_client.mjs"),
                                    url, "small", PROMPT, "20"], { encoding: "utf8" });
  const shortText = short.split("\n").filter(Boolean).map((l) => JSON.parse(l)).map((e) => e.text ?? "").join("");
  assert.ok(shortText.length > 0 && reference.text.startsWith(shortText), shortText);
});
