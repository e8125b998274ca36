// Pieces of the network tests: a `loom hub` on a free port with its own store, enrolled `loom node`
// agents with their own directories and memory limits, the hub's job records, and a node speaking
// the protocol by hand (Node's WebSocket and Ed25519) for the hostile-input tests.  Every process
// started here is stopped again (SIGKILL at exit at the latest).
import { spawn, execFile } from "node:child_process";
import { once } from "node:events";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";

import { LOOM, tmpDir, waitFor } from "../serve/helpers.mjs";

const execFileP = promisify(execFile);
const running = new Set();
process.on("exit", () => {
  for (const p of running) p.kill("SIGKILL");
});

export const ADMIN_KEY = "test-admin-key";

export async function loom(args) {
  const { stdout } = await execFileP(LOOM, args, { maxBuffer: 16 << 20 });
  return stdout;
}

// Spawns `loom ...args`, resolving once a stdout line matches `ready`.  Returns the process handle
// with stop(signal) and its captured output.
async function spawnUntil(args, ready, { timeoutMs = 60000, env = {} } = {}) {
  const proc = spawn(LOOM, args, {
    stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env },
  });
  running.add(proc);
  const h = { proc, out: "", err: "", exited: once(proc, "exit") };
  proc.stdout.on("data", (d) => (h.out += d));
  proc.stderr.on("data", (d) => (h.err += d));
  h.match = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${args[0]} did not start:\n${h.err}`)), timeoutMs);
    const check = () => {
      const m = h.out.match(ready);
      if (m) {
        clearTimeout(timer);
        resolve(m);
      }
    };
    proc.stdout.on("data", check);
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${args[0]} exited with ${code} before it was ready:\n${h.err}`));
    });
  });
  h.stop = async (signal = "SIGTERM") => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill(signal);
    const timer = setTimeout(() => proc.kill("SIGKILL"), 15000);
    await h.exited;
    clearTimeout(timer);
    running.delete(proc);
  };
  return h;
}

// A hub on `port` (0 = free) with the store `db`; `ca`: the certificate of a TLS hub, which this
// process's fetch does not trust, so its status is then read through `loom hub status --ca-file`.
// Returns { url, base, port, db, ca, stop, ... }.
export async function startHub({ db, port = 0, args = [], ca = "" } = {}) {
  db = db ?? path.join(fs.mkdtempSync(path.join(tmpDir(), "hub-")), "hub.db");
  const h = await spawnUntil(
    ["hub", "--listen", `127.0.0.1:${port}`, "--db", db, "--admin-key", ADMIN_KEY,
     "--heartbeat-s", "1", ...args],
    /listening on (https?:\/\/127\.0\.0\.1:(\d+)\/)/);
  h.url = h.match[1];
  h.base = h.url + "v1";
  h.port = Number(h.match[2]);
  h.db = db;
  h.ca = ca;
  return h;
}

// An account with one API key, made on the hub's store.
export async function makeKey(db, account = "alice") {
  await loom(["hub", "account", "create", account, "--db", db]).catch(() => {});
  return (await loom(["hub", "key", "create", "--account", account, "--db", db])).trim();
}

// Enrols a node directory with the hub and starts `loom node` on it; resolves once the hub lists it.
// `tokenArgs`: for its enrolment token (`--account NAME`: the operator account that owns it).
export async function startNode(hub, name, models,
                                { args = [], dir, enrollArgs = [], tokenArgs = [] } = {}) {
  dir = dir ?? fs.mkdtempSync(path.join(tmpDir(), `node-${name}-`));
  if (!fs.existsSync(path.join(dir, "node.json"))) {
    const token = (await loom(["hub", "token", "create", "--db", hub.db, ...tokenArgs])).trim();
    await loom(["node", "enroll", "--hub", hub.url, "--token", token, "--name", name, "--dir", dir,
                ...enrollArgs]);
  }
  const id = JSON.parse(fs.readFileSync(path.join(dir, "node.json"), "utf8")).node_id;
  // Defaults for what `args` does not set.
  const defaults = [["--parallel", "2"], ["--ctx", "512"]].filter(([flag]) => !args.includes(flag));
  const n = await spawnUntil(
    ["node", "--dir", dir, "--models", models.join(","), ...defaults.flat(), ...args], /lending/);
  n.dir = dir;
  n.id = id;
  n.name = name;
  await waitForNode(hub, id);
  return n;
}

export async function hubStatus(hub) {
  if (hub.ca) {
    return JSON.parse(await loom(["hub", "status", "--hub", hub.url, "--admin-key", ADMIN_KEY,
                                  "--ca-file", hub.ca, "--json"]));
  }
  const res = await fetch(hub.url + "v1/admin/status", {
    headers: { Authorization: `Bearer ${ADMIN_KEY}` },
  });
  return res.json();
}

// Waits until the hub lists node `id` with every model it holds loaded and measured.
export async function waitForNode(hub, id, { timeoutMs = 60000 } = {}) {
  const ok = await waitFor(async () => {
    const s = await hubStatus(hub).catch(() => null);
    const n = s?.nodes?.find((x) => x.node_id === id);
    return n && n.models.every((m) => !m.loaded || m.decode_tps > 0) && n.models.some((m) => m.loaded);
  }, { timeoutMs, stepMs: 100 });
  if (!ok) {
    const s = await hubStatus(hub).catch(() => null);
    throw new Error(`node ${id} did not come up at the hub: ${JSON.stringify(s?.nodes)}\n` +
                    `hub: ${hub.err}`);
  }
}

export async function hubJobs(db) {
  return JSON.parse(await loom(["hub", "jobs", "--db", db, "--limit", "1000", "--json"])).jobs;
}

export async function decisions(hub) {
  const res = await fetch(hub.url + "v1/admin/decisions", {
    headers: { Authorization: `Bearer ${ADMIN_KEY}` },
  });
  return (await res.json()).decisions;
}

// A node identity made here (Ed25519 with Node's crypto) and enrolled through the hub's API.
export async function handMadeNode(hub, { tokenArgs = [] } = {}) {
  const { publicKey, privateKey } = crypto.generateKeyPairSync("ed25519");
  const raw = Buffer.from(publicKey.export({ format: "jwk" }).x, "base64url");
  const token = (await loom(["hub", "token", "create", "--db", hub.db, ...tokenArgs])).trim();
  const res = await fetch(hub.url + "v1/nodes/enroll", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token, public_key: raw.toString("base64"), name: "by-hand" }),
  });
  const body = await res.json();
  return {
    id: body.node_id,
    hubId: body.hub_id,
    token,
    sign: (nonce, hubId) => crypto.sign(
        null, Buffer.from(`loom-node-auth-v1\n${nonce}\n${body.node_id}\n${hubId}`), privateKey)
        .toString("base64"),
  };
}

// A WebSocket to the hub's node endpoint with a queue of received frames.
export async function nodeSocket(hub) {
  const ws = new WebSocket(hub.url.replace("http", "ws") + "v1/node/connect");
  const frames = [];
  const waiters = [];
  let closed = null;
  ws.addEventListener("message", (e) => {
    frames.push(JSON.parse(e.data));
    while (waiters.length) waiters.shift()();
  });
  ws.addEventListener("close", (e) => {
    closed = { code: e.code, reason: e.reason };
    while (waiters.length) waiters.shift()();
  });
  await once(ws, "open");
  return {
    send: (obj) => ws.send(typeof obj === "string" ? obj : JSON.stringify(obj)),
    async next(timeoutMs = 5000) {
      const end = Date.now() + timeoutMs;
      while (!frames.length && !closed && Date.now() < end) {
        await new Promise((r) => {
          waiters.push(r);
          setTimeout(r, 50);
        });
      }
      return frames.shift() ?? null;
    },
    async closedWith(timeoutMs = 5000) {
      await waitFor(() => closed !== null, { timeoutMs });
      return closed;
    },
    close: () => ws.close(),
  };
}

export const FACTS = {
  mem_total_bytes: 1e9, mem_free_bytes: 1e9, cores: 2, simd: "test", mem_bandwidth_gbps: 10,
  os: "test", version: "test",
};
