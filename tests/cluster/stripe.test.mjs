// Two links of one kind between two machines (two veth pairs, each shaped to 800 Mbit/s with
// `tc tbf`, like two Thunderbolt cables): the daemon measures each, then both together with the
// tcp backend striping large messages over them, and the pair's fastest link is the striped one at
// about twice the bandwidth.  Ranks then dial "a+b" addresses (cluster run uses the fastest link).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Machines, cannotRun } from "./netns.mjs";

const why = cannotRun();
let m, one, two;

before(() => {
  if (why) return;
  m = new Machines(["a", "b"]);
  one = m.link("a", "b", { rate: "800mbit" });
  two = m.link("a", "b", { rate: "800mbit" });
});

after(() => m?.close());

test("two links between a pair are striped and double its bandwidth", { skip: why || false, timeout: 120000 }, () => {
  for (const name of ["a", "b"]) {
    m.spawn(name, ["cluster", "join", "--secret", "s", "--control", m.socket(name), "--name", name]);
  }
  let view;
  try {
    view = m.status("a", ["--wait-members", "2", "--wait", "60"]);
  } catch (e) {
    throw new Error(`${e.message}\n${m.logs()}`);
  }
  const single = view.links.filter((l) => !l.interface.includes("+"));
  const striped = view.links.filter((l) => l.interface.includes("+"));
  console.log(view.links.map((l) => `${l.interface} ${l.a_host} -> ${l.b_host}: ` +
    `${l.latency_us.toFixed(0)} us, ${l.gbytes_per_s.toFixed(3)} GB/s`).join("\n"));
  assert.equal(single.length, 2, JSON.stringify(view.links));
  assert.equal(striped.length, 1);
  for (const l of single) assert.ok(Math.abs(l.gbytes_per_s - 0.1) <= 0.02, `${l.interface}: ${l.gbytes_per_s}`);
  const ratio = striped[0].gbytes_per_s / Math.max(...single.map((l) => l.gbytes_per_s));
  console.log(`striped / one link: ${ratio.toFixed(2)}x`);
  assert.ok(ratio >= 1.7, `striped ${ratio}x`);
  assert.equal(view.fastest.length, 1);
  assert.deepEqual(view.fastest[0], striped[0]);
  // One end's two addresses on one side, the other end's on the other.
  const sides = [striped[0].a_host.split("+").sort(), striped[0].b_host.split("+").sort()];
  const machineA = [one.a, two.a].sort(), machineB = [one.b, two.b].sort();
  assert.ok((JSON.stringify(sides[0]) === JSON.stringify(machineA) && JSON.stringify(sides[1]) === JSON.stringify(machineB)) ||
            (JSON.stringify(sides[0]) === JSON.stringify(machineB) && JSON.stringify(sides[1]) === JSON.stringify(machineA)),
            JSON.stringify(sides));
});
