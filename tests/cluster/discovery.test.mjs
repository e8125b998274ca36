// Three "machines" (network namespaces, a veth pair between each two) find each other by
// multicast, authenticate, and measure every link: one link shaped to 800 Mbit/s with `tc tbf`,
// one given 300 us of latency with the tcp backend's link emulation.  A fourth machine with the
// wrong secret is refused; a member that stops answering has left within seconds and comes back.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Machines, cannotRun, sleep, waitFor } from "./netns.mjs";

const why = cannotRun();
const SECRET = "the pod's secret";
let m, ab, ac, bc, ad;

before(() => {
  if (why) return;
  m = new Machines(["a", "b", "c", "d"]);
  ab = m.link("a", "b", { rate: "800mbit" });
  ac = m.link("a", "c");
  bc = m.link("b", "c");
  ad = m.link("a", "d");
});

after(() => m?.close());

function join(name, env = {}, extra = []) {
  return m.spawn(name, ["cluster", "join", "--secret", SECRET, "--control", m.socket(name), "--name", name,
                        "--member-timeout", "2", ...extra], env);
}

function pair(view, x, y) {
  return view.fastest.find((l) => (l.a_host === x && l.b_host === y) || (l.a_host === y && l.b_host === x));
}

test("members find each other, and the link matrix reflects the links' latency and bandwidth",
     { skip: why || false, timeout: 120000 }, async () => {
  // Link a-c is 300 us one way, both ways: each end delays what comes from the other end's address.
  join("a", { LOOM_LINK_DELAY_US: `${ac.c}=300` });
  join("b");
  join("c", { LOOM_LINK_DELAY_US: `${ac.a}=300` });
  const started = Date.now();
  let view;
  try {
    view = m.status("a", ["--wait-members", "3", "--wait", "60"]);
  } catch (e) {
    throw new Error(`${e.message}\n${m.logs()}`);
  }
  const ready = (Date.now() - started) / 1000;
  console.log(`3 members with 3 measured links after ${ready.toFixed(1)} s`);
  assert.equal(view.members.length, 3, m.logs());
  assert.equal(view.fastest.length, 3);
  for (const member of view.members) {
    assert.ok(member.facts, `facts of ${member.name}`);
    assert.ok(member.facts.memory_total > 0 && member.facts.cores > 0 && member.facts.simd);
    assert.ok(member.facts.read_gbytes_per_s > 0);
  }
  const lab = pair(view, ab.a, ab.b), lac = pair(view, ac.a, ac.c), lbc = pair(view, bc.b, bc.c);
  assert.ok(lab && lac && lbc, JSON.stringify(view.fastest));
  console.log(`a-b ${lab.latency_us.toFixed(0)} us ${lab.gbytes_per_s.toFixed(3)} GB/s; ` +
              `a-c ${lac.latency_us.toFixed(0)} us ${lac.gbytes_per_s.toFixed(3)} GB/s; ` +
              `b-c ${lbc.latency_us.toFixed(0)} us ${lbc.gbytes_per_s.toFixed(3)} GB/s`);
  // 800 Mbit/s = 0.1 GB/s, within 20%.
  assert.ok(Math.abs(lab.gbytes_per_s - 0.1) <= 0.02, `a-b bandwidth ${lab.gbytes_per_s} GB/s`);
  // The emulated 300 us on a-c, on top of what an unemulated link of the same kind takes (b-c).
  const added = lac.latency_us - lbc.latency_us;
  assert.ok(Math.abs(added - 300) <= 60, `a-c adds ${added} us`);
  // The unshaped links are much faster than the shaped one.
  assert.ok(lbc.gbytes_per_s > 3 * lab.gbytes_per_s, `b-c ${lbc.gbytes_per_s} GB/s`);
  // Every member sees the same matrix.
  for (const name of ["b", "c"]) {
    const other = m.status(name, ["--wait-members", "3", "--wait", "30"]);
    assert.equal(other.members.length, 3);
    assert.deepEqual(other.fastest.map((l) => l.a_host + ">" + l.b_host).sort(),
                     view.fastest.map((l) => l.a_host + ">" + l.b_host).sort());
  }
});

test("a daemon with the wrong secret is refused", { skip: why || false, timeout: 60000 }, async () => {
  const peer = `${ad.a}:7470`;
  m.spawn("d", ["cluster", "join", "--secret", "not the secret", "--control", m.socket("d"),
                "--peer", peer]);
  const dview = await waitFor(() => {
    const v = m.status("d");
    return v.refused_by[peer] ? v : null;
  }, 20000, "d to be refused by a");
  assert.match(dview.refused_by[peer], /wrong cluster secret/);
  assert.equal(dview.members.length, 1);
  const aview = m.status("a");
  assert.equal(aview.members.length, 3, "d did not join");
  assert.ok(aview.refused >= 1);
  assert.ok(!aview.members.some((x) => x.name === dview.name && x.id === dview.id));
});

test("a member that stops answering has left within seconds, and rejoins when it answers again",
     { skip: why || false, timeout: 60000 }, async () => {
  const b = m.procs[1];
  const bid = m.status("b").id;
  process.kill(b.pid, "SIGSTOP");
  const stopped = Date.now();
  const view = await waitFor(() => {
    const v = m.status("a");
    return v.departed.some((d) => d.id === bid) ? v : null;
  }, 10000, "a to notice that b left");
  const noticed = (Date.now() - stopped) / 1000;
  console.log(`a noticed after ${noticed.toFixed(1)} s: ${view.departed[0].why}`);
  assert.ok(noticed < 5, `noticed after ${noticed} s`);
  assert.equal(view.members.length, 2);
  assert.match(view.departed.find((d) => d.id === bid).why, /silent/);
  process.kill(b.pid, "SIGCONT");
  await waitFor(() => m.status("a").members.length === 3, 15000, "b to rejoin");
  await sleep(100);
});
