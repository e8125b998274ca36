// Shared pieces of the black-box tests: where the binary and the models are, starting a server
// on a free port (always stopped again), `loom run --json` for reference outputs.
import { spawn, execFile } from "node:child_process";
import { once } from "node:events";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const execFileP = promisify(execFile);

// The loom binary: $LOOM_BIN (CTest passes it), else build/src/loom/cli/loom.
export const LOOM = process.env.LOOM_BIN || path.join(repo, "build/src/loom/cli/loom");

// ../shared (or $LOOM_SHARED_DIR); "" when missing.
export function sharedDir() {
  const dir = process.env.LOOM_SHARED_DIR || path.resolve(repo, "../shared");
  return fs.existsSync(dir) ? dir : "";
}

export function storiesModel() {
  const dir = sharedDir();
  return dir ? path.join(dir, "models/stories260K/stories260K.gguf") : "";
}

// Skips the test loudly when the shared folder is missing.
export function requireShared(t) {
  if (!storiesModel()) {
    t.skip("SHARED DATA MISSING: ../shared (or $LOOM_SHARED_DIR) not found");
    return false;
  }
  return true;
}

let tmpRoot = "";
export function tmpDir() {
  if (!tmpRoot) tmpRoot = fs.mkdtempSync(path.join(os.tmpdir(), "loom-serve-test-"));
  return tmpRoot;
}
process.on("exit", () => {
  if (tmpRoot) fs.rmSync(tmpRoot, { recursive: true, force: true });
});

// A synthetic model (written once per test file with `loom synth`); `shape` as `loom synth --shape`.
// A self-signed certificate for localhost and 127.0.0.1 (P-256, one day), made with the openssl CLI
// in a new temporary directory.  Returns { cert, key } (PEM file paths).
export async function selfSignedCert(prefix = "tls-") {
  const dir = fs.mkdtempSync(path.join(tmpDir(), prefix));
  const cert = path.join(dir, "cert.pem");
  const key = path.join(dir, "key.pem");
  await execFileP("openssl", [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
    "-keyout", key, "-out", cert]);
  return { cert, key };
}

// Callers that ask at once share one `loom synth`, and the file appears whole (written under
// another name, then renamed), so nobody can open it half written.
const synthesizing = new Map();
export async function synthModel(type = "q8_0", shape = "tiny") {
  const file = path.join(tmpDir(), `${shape}-${type}.gguf`);
  if (fs.existsSync(file)) return file;
  if (!synthesizing.has(file)) {
    const part = path.join(tmpDir(), `${shape}-${type}.part.gguf`);
    synthesizing.set(file, execFileP(LOOM, ["synth", "--shape", shape, "--type", type, "--seed", "3",
                                            "-o", part]).then(() => fs.renameSync(part, file)));
  }
  await synthesizing.get(file);
  return file;
}

const running = new Set();
process.on("exit", () => {
  for (const p of running) p.kill("SIGKILL");
});

// Starts `loom serve -m model --port 0 ...args` and waits for its URL (http:// or, with
// --tls-cert, https://).  Returns { url, base, port, stop(), stdout(), stderr() }.  Register
// stop() with t.after().
export async function startServer(model, args = [], { timeoutMs = 30000 } = {}) {
  const proc = spawn(LOOM, ["serve", "-m", model, "--port", "0", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  running.add(proc);
  let out = "";
  let err = "";
  proc.stdout.on("data", (d) => (out += d));
  proc.stderr.on("data", (d) => (err += d));
  const exited = once(proc, "exit");
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start:\n" + err)), timeoutMs);
    const check = () => {
      const m = out.match(/https?:\/\/127\.0\.0\.1:(\d+)\//);
      if (m) {
        clearTimeout(timer);
        resolve(m[0]);
      }
    };
    proc.stdout.on("data", check);
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before starting:\n${err}`));
    });
  });
  const port = Number(new URL(url).port);
  let stopped = false;
  return {
    url,
    base: url + "v1",
    port,
    stdout: () => out,
    stderr: () => err,
    async stop() {
      if (stopped) return;
      stopped = true;
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 10000);
      await exited;
      clearTimeout(timer);
      running.delete(proc);
    },
    exitCode: async () => (await exited)[0],
  };
}

// `loom run --json` (greedy unless sampling flags are given): the reference for API outputs.
export async function loomRun(model, prompt, maxNew, extra = ["--temp", "0"]) {
  const { stdout } = await execFileP(
    LOOM, ["run", "-m", model, "-p", prompt, "-n", String(maxNew), "--json", ...extra],
    { maxBuffer: 16 << 20 });
  return JSON.parse(stdout);
}

// Reads a streamed response's server-sent events: the parsed data objects, in order.
export async function readSse(res) {
  const text = await res.text();
  const events = [];
  for (const block of text.split("\n\n")) {
    const line = block.trim();
    if (!line) continue;
    if (!line.startsWith("data: ")) throw new Error("not an SSE data line: " + line);
    const data = line.slice(6);
    events.push(data === "[DONE]" ? "[DONE]" : JSON.parse(data));
  }
  return events;
}

export async function metric(server, name, headers = {}) {
  const res = await fetch(server.url + "metrics", { headers });
  const text = await res.text();
  const m = text.match(new RegExp("^" + name.replace(/[{}"]/g, "\\$&") + " (\\S+)$", "m"));
  return m ? Number(m[1]) : undefined;
}

export async function waitFor(predicate, { timeoutMs = 5000, stepMs = 20 } = {}) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await predicate();
    if (v) return v;
    if (Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, stepMs));
  }
}
