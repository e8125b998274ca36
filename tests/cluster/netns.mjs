// "Machines" for the cluster tests: Linux network namespaces joined by veth pairs, each pair its
// own /30 inside 10.200.0.0/24, optionally shaped with `tc tbf`.  Needs root (CI runs as root);
// everything made here is removed again, also when a test fails.
import { execFileSync, spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
export const LOOM = process.env.LOOM_BIN || path.resolve(here, "../../build/src/loom/cli/loom");

// Why these tests cannot run here, or "" when they can.
export function cannotRun() {
  if (process.getuid && process.getuid() !== 0) return "needs root (network namespaces)";
  try {
    execFileSync("ip", ["netns", "list"], { stdio: "ignore" });
  } catch {
    return "`ip netns` is not available (install iproute2)";
  }
  return "";
}

function ip(...args) {
  execFileSync("ip", args, { stdio: ["ignore", "ignore", "pipe"] });
}

export class Machines {
  constructor(names) {
    this.prefix = `loomc${process.pid % 100000}`;
    this.names = names;
    this.ns = Object.fromEntries(names.map((n) => [n, `${this.prefix}-${n}`]));
    this.nextSubnet = 0;
    this.procs = [];
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), "loom-cluster-test-"));
    for (const n of names) {
      ip("netns", "add", this.ns[n]);
      ip("-n", this.ns[n], "link", "set", "lo", "up");
    }
  }

  // A veth pair between two machines; returns their addresses.  `rate` shapes both directions
  // (tbf with a 512 KiB bucket: with 64 KiB, two shaped links striped together measured only
  // 1.5-1.75x one link on a loaded machine, 1.97-2.0x with 512 KiB; one link 0.095-0.097 GB/s
  // of 0.1 either way).
  link(a, b, { rate } = {}) {
    const index = this.nextSubnet++;
    const base = 4 * index;
    if (base + 2 > 254) throw new Error("out of test subnets");
    // Interface names have at most 15 characters: "loomc" + pid (5) + ends (2) + index (2).
    const ea = `${this.prefix}${a}${b}${index}`, eb = `${this.prefix}${b}${a}${index}`;
    ip("link", "add", ea, "netns", this.ns[a], "type", "veth", "peer", "name", eb, "netns", this.ns[b]);
    const addrA = `10.200.0.${base + 1}`, addrB = `10.200.0.${base + 2}`;
    ip("-n", this.ns[a], "addr", "add", `${addrA}/30`, "dev", ea);
    ip("-n", this.ns[b], "addr", "add", `${addrB}/30`, "dev", eb);
    ip("-n", this.ns[a], "link", "set", ea, "up", "multicast", "on");
    ip("-n", this.ns[b], "link", "set", eb, "up", "multicast", "on");
    if (rate) {
      for (const [ns, dev] of [[this.ns[a], ea], [this.ns[b], eb]]) {
        execFileSync("ip", ["netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
          "rate", rate, "burst", "512kb", "latency", "100ms"]);
      }
    }
    return { [a]: addrA, [b]: addrB, devices: { [a]: ea, [b]: eb } };
  }

  // Starts `loom ARGS` inside machine `name`; output goes to a log file in this.dir.
  spawn(name, args, env = {}) {
    const log = path.join(this.dir, `${name}-${this.procs.length}.log`);
    const out = fs.openSync(log, "w");
    const child = spawn("ip", ["netns", "exec", this.ns[name], LOOM, ...args], {
      stdio: ["ignore", out, out],
      env: { ...process.env, ...env },
    });
    fs.closeSync(out);
    child.log = log;
    this.procs.push(child);
    return child;
  }

  // Runs `loom ARGS` inside machine `name` and returns its stdout.
  run(name, args, { timeout = 60000, env = {} } = {}) {
    return execFileSync("ip", ["netns", "exec", this.ns[name], LOOM, ...args], {
      encoding: "utf8", timeout, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"],
    });
  }

  // Runs `loom ARGS` inside machine `name`; returns { status, stdout, stderr }.
  runFull(name, args, { timeout = 60000, env = {} } = {}) {
    const r = spawnSync("ip", ["netns", "exec", this.ns[name], LOOM, ...args], {
      encoding: "utf8", timeout, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"],
    });
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  }

  socket(name) {
    return path.join(this.dir, `${name}.sock`);
  }

  status(name, extra = []) {
    return JSON.parse(this.run(name, ["cluster", "status", "--json", "--control", this.socket(name), ...extra]));
  }

  logs() {
    return this.procs.map((p) => `--- ${p.log}\n${fs.existsSync(p.log) ? fs.readFileSync(p.log, "utf8") : ""}`).join("\n");
  }

  close() {
    for (const p of this.procs) {
      if (p.exitCode === null && p.signalCode === null) {
        try { process.kill(p.pid, "SIGCONT"); } catch {}
        try { process.kill(p.pid, "SIGKILL"); } catch {}
      }
    }
    // And whatever those started inside a machine (a daemon's ranks sit in their own process
    // groups and outlive a killed daemon): every process left in the namespace.
    for (const n of this.names) {
      let pids = [];
      try {
        pids = execFileSync("ip", ["netns", "pids", this.ns[n]], { encoding: "utf8" })
          .split(/\s+/).filter(Boolean);
      } catch {}
      for (const pid of pids) {
        try { process.kill(Number(pid), "SIGKILL"); } catch {}
      }
    }
    for (const n of this.names) {
      try { ip("netns", "del", this.ns[n]); } catch {}
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls `f` (returning a value or a falsy one) every 100 ms until it returns truthy or `ms` pass.
export async function waitFor(f, ms, what) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      last = f();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await sleep(100);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}
