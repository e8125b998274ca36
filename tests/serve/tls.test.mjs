// `loom serve` over TLS with a certificate the test makes itself (openssl CLI): the official OpenAI
// client (in a child process told of the certificate by NODE_EXTRA_CA_CERTS) gets greedy
// completions, whole and streamed, equal to `loom run`, over HTTP/1.1 on TLS; a client that leaves
// mid-stream frees its slot; plain HTTP to the TLS port gets no answer; and the rule for listening
// beyond loopback: without TLS or without an API key it is refused, saying why; with both it
// serves.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import fs from "node:fs";
import https from "node:https";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { LOOM, loomRun, selfSignedCert, startServer, synthModel, tmpDir, waitFor } from "./helpers.mjs";

const execFileP = promisify(execFile);
const here = path.dirname(fileURLToPath(import.meta.url));

// GET over HTTPS trusting only `ca`; resolves { status, body, protocol }.
function httpsGet(url, ca, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = https.get(url, { ca, headers }, (res) => {
      const protocol = res.socket.getProtocol();  // the socket is released at the end
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode, body, protocol, version: res.httpVersion }));
    });
    req.on("error", reject);
  });
}

// Runs `script` (an ES module) in a child node that trusts `cert`; returns its stdout as JSON.
async function inClient(script, args, cert) {
  const { stdout } = await execFileP(process.execPath, ["--input-type=module", "-e", script, ...args], {
    cwd: here, env: { ...process.env, NODE_EXTRA_CA_CERTS: cert }, maxBuffer: 16 << 20,
  });
  return JSON.parse(stdout);
}

describe("loom serve over TLS", () => {
  let cert;
  let key;
  let model;
  let server;
  let ca;

  before(async () => {
    ({ cert, key } = await selfSignedCert("tls-"));
    ca = fs.readFileSync(cert);
    model = await synthModel("q8_0");
    server = await startServer(model, ["--tls-cert", cert, "--tls-key", key, "--parallel", "2"]);
  });
  after(async () => server && (await server.stop()));

  test("prints an https URL and answers HTTP/1.1 over TLS 1.2+", async () => {
    assert.match(server.stdout(), /^loom serve: https:\/\/127\.0\.0\.1:\d+\//);
    const health = await httpsGet(server.url + "health", ca);
    assert.equal(health.status, 200);
    assert.equal(health.version, "1.1");
    assert.match(health.protocol, /^TLSv1\.[23]$/);
    assert.equal(JSON.parse(health.body).status, "ok");
  });

  test("the OpenAI client gets greedy completions equal to loom run, whole and streamed", async () => {
    const want = await loomRun(model, "Once upon a time", 16);
    const got = await inClient(`
      import OpenAI from "openai";
      const client = new OpenAI({ baseURL: process.argv[1], apiKey: "unused", maxRetries: 0 });
      const models = [];
      for await (const m of await client.models.list()) models.push(m.id);
      const whole = await client.completions.create({
        model: "tiny-q8_0", prompt: "Once upon a time", max_tokens: 16, temperature: 0 });
      let streamed = "";
      let finish = null;
      const stream = await client.chat.completions.create({
        model: "tiny-q8_0", messages: [{ role: "user", content: "Once upon a time" }],
        max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true } });
      let usage = null;
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        const c = chunk.choices[0];
        if (!c) continue;
        streamed += c.delta.content ?? "";
        if (c.finish_reason) finish = c.finish_reason;
      }
      const chat = await client.chat.completions.create({
        model: "tiny-q8_0", messages: [{ role: "user", content: "Once upon a time" }],
        max_tokens: 16, temperature: 0 });
      console.log(JSON.stringify({ models, whole, streamed, finish, usage, chat }));`,
      [server.base], cert);
    assert.deepEqual(got.models, ["tiny-q8_0"]);
    assert.equal(got.whole.choices[0].text, want.text);
    assert.equal(got.whole.usage.completion_tokens, want.generated_token_ids.length);
    // The streamed chat adds up to the whole chat reply.
    assert.equal(got.streamed, got.chat.choices[0].message.content);
    assert.equal(got.finish, got.chat.choices[0].finish_reason);
    assert.deepEqual(got.usage, got.chat.usage);
  });

  test("a client that leaves mid-stream frees its slot", async () => {
    const got = await inClient(`
      import OpenAI from "openai";
      const client = new OpenAI({ baseURL: process.argv[1], apiKey: "unused", maxRetries: 0 });
      const controller = new AbortController();
      const stream = await client.completions.create(
          { model: "tiny-q8_0", prompt: "Once", max_tokens: 500, ignore_eos: true,
            temperature: 0, stream: true },
          { signal: controller.signal });
      let pieces = 0;
      try {
        for await (const chunk of stream) if (++pieces === 3) controller.abort();
      } catch (e) {}
      console.log(JSON.stringify({ pieces }));`,
      [server.base], cert);
    assert.ok(got.pieces >= 3);
    const freed = await waitFor(async () => {
      const h = JSON.parse((await httpsGet(server.url + "health", ca)).body);
      return h.slots_busy === 0;
    }, { timeoutMs: 5000 });
    assert.ok(freed, "the slot is still busy after the client left");
    const metrics = (await httpsGet(server.url + "metrics", ca)).body;
    assert.match(metrics, /^loom_requests_cancelled_total 1$/m);
  });

  test("plain HTTP to the TLS port gets no answer", async () => {
    await assert.rejects(fetch(server.url.replace("https:", "http:") + "health"));
    const h = await httpsGet(server.url + "health", ca);  // and the server goes on
    assert.equal(h.status, 200);
  });
});

describe("listening beyond loopback", () => {
  let cert;
  let key;
  before(async () => {
    ({ cert, key } = await selfSignedCert("tls-rule-"));
  });

  const serve = async (args) => spawnSync(LOOM, ["serve", "-m", await synthModel("q8_0"), "--port", "0", ...args],
                                         { encoding: "utf8", timeout: 20000 });

  test("without TLS, or without an API key, is refused with the reason", async () => {
    let r = await serve(["--host", "0.0.0.0", "--api-key", "k"]);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /without TLS/);
    assert.match(r.stderr, /--tls-cert FILE --tls-key FILE/);
    assert.match(r.stderr, /in the clear/);
    assert.match(r.stderr, /--insecure/);
    r = await serve(["--host", "0.0.0.0", "--tls-cert", cert, "--tls-key", key]);
    assert.equal(r.status, 2);
    assert.doesNotMatch(r.stderr, /without TLS/);
    assert.match(r.stderr, /--api-key KEY/);
  });

  test("--tls-cert and --tls-key go together, and unreadable files are named", async () => {
    let r = await serve(["--tls-cert", cert]);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /--tls-cert and --tls-key go together/);
    const missing = path.join(tmpDir(), "no-such-cert.pem");
    r = await serve(["--tls-cert", missing, "--tls-key", key]);
    assert.notEqual(r.status, 0);
    assert.ok(r.stderr.includes(missing), r.stderr);
  });

  test("with TLS and an API key it serves", async () => {
    const proc = spawn(LOOM, ["serve", "-m", await synthModel("q8_0"), "--host", "0.0.0.0",
                              "--port", "0", "--tls-cert", cert, "--tls-key", key,
                              "--api-key", "sk-rule"], { stdio: ["ignore", "pipe", "pipe"] });
    try {
      let out = "";
      const port = await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("did not start")), 30000);
        proc.stdout.on("data", (d) => {
          out += d;
          const m = out.match(/https:\/\/0\.0\.0\.0:(\d+)\//);
          if (m) {
            clearTimeout(timer);
            resolve(Number(m[1]));
          }
        });
        proc.on("exit", (code) => reject(new Error(`exited with ${code}`)));
      });
      const ca = fs.readFileSync(cert);
      const base = `https://127.0.0.1:${port}/`;
      assert.equal((await httpsGet(base + "v1/models", ca)).status, 401);
      const ok = await httpsGet(base + "v1/models", ca, { Authorization: "Bearer sk-rule" });
      assert.equal(ok.status, 200);
      assert.equal(JSON.parse(ok.body).data[0].id, "tiny-q8_0");
    } finally {
      const exited = once(proc, "exit");
      proc.kill("SIGTERM");
      await exited;
    }
  });
});
