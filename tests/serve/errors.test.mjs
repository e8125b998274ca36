// Bad input gets OpenAI-shaped errors with the right status, and the server keeps serving:
// malformed JSON, wrong types, unknown model, prompt longer than the context, absurd max_tokens,
// oversized bodies, slow-loris clients, unknown routes, API keys, non-loopback binding.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import OpenAI from "openai";

import { startServer, synthModel, LOOM } from "./helpers.mjs";
import { spawnSync } from "node:child_process";

function assertErrorShape(body) {
  assert.equal(typeof body.error, "object", JSON.stringify(body));
  assert.equal(typeof body.error.message, "string");
  assert.ok(body.error.message.length > 0);
  assert.equal(typeof body.error.type, "string");
  assert.ok("param" in body.error && "code" in body.error, JSON.stringify(body));
}

async function post(server, path, body, headers = {}) {
  const res = await fetch(server.base + path, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const json = await res.json();
  return { status: res.status, json, headers: res.headers };
}

// Sends raw bytes and returns everything the server answers until it closes (or timeoutMs).
function raw(port, chunks, { gapMs = 0, timeoutMs = 5000 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, "127.0.0.1");
    let data = "";
    const started = Date.now();
    const timer = setTimeout(() => sock.destroy(), timeoutMs);
    sock.on("data", (d) => (data += d));
    sock.on("error", () => {});
    sock.on("close", () => {
      clearTimeout(timer);
      resolve({ data, ms: Date.now() - started });
    });
    let i = 0;
    const next = () => {
      if (sock.destroyed || i >= chunks.length) return;
      sock.write(chunks[i++]);
      setTimeout(next, gapMs);
    };
    sock.on("connect", next);
  });
}

describe("errors", () => {
  let server;
  let client;
  let model;
  before(async () => {
    model = await synthModel("q8_0");
    // Small context and body limit so that the limits are cheap to reach; short read timeout.
    server = await startServer(model, ["--ctx", "128", "--max-body", "65536", "--read-timeout", "1"]);
    client = new OpenAI({ baseURL: server.base, apiKey: "unused", maxRetries: 0 });
  });
  after(async () => server && (await server.stop()));

  test("malformed JSON and non-object bodies: 400", async () => {
    for (const body of ["{nope", "[1,2]", "", "\"hi\"", "{\"model\": \"tiny-q8_0\", }"]) {
      const r = await post(server, "/chat/completions", body);
      assert.equal(r.status, 400, body);
      assertErrorShape(r.json);
      assert.equal(r.json.error.type, "invalid_request_error");
    }
  });

  test("wrong types name the field: 400", async () => {
    const base = { model: "tiny-q8_0", messages: [{ role: "user", content: "hi" }] };
    const cases = [
      [{ temperature: "hot" }, "temperature"],
      [{ max_tokens: "12" }, "max_tokens"],
      [{ max_tokens: 1.5 }, "max_tokens"],
      [{ stream: 1 }, "stream"],
      [{ stop: 7 }, "stop"],
      [{ seed: "x" }, "seed"],
      [{ n: 3 }, "n"],
      [{ messages: "hi" }, "messages"],
      [{ messages: [{ role: "user", content: 5 }] }, "messages[0].content"],
      [{ messages: [{ role: "robot", content: "x" }] }, "messages[0].role"],
      [{ model: 12 }, "model"],
    ];
    for (const [patch, param] of cases) {
      const r = await post(server, "/chat/completions", { ...base, ...patch });
      assert.equal(r.status, 400, JSON.stringify(patch));
      assertErrorShape(r.json);
      assert.equal(r.json.error.param, param, JSON.stringify(r.json));
    }
    // Through the client library: a BadRequestError carrying the same fields.
    await assert.rejects(
        client.chat.completions.create({ ...base, temperature: 5 }),
        (e) => e.status === 400 && e.param === "temperature" && e.type === "invalid_request_error");
  });

  test("unknown model: 404 model_not_found", async () => {
    await assert.rejects(
        client.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] }),
        (e) => e.status === 404 && e.code === "model_not_found" && e.param === "model");
    await assert.rejects(client.models.retrieve("gpt-4o"), (e) => e.status === 404);
  });

  test("prompt longer than the context: 400 context_length_exceeded", async () => {
    const prompt = "hello world ".repeat(200);  // far more than 128 tokens
    await assert.rejects(
        client.completions.create({ model: "tiny-q8_0", prompt, max_tokens: 4 }),
        (e) => e.status === 400 && e.code === "context_length_exceeded" && e.param === "prompt");
    await assert.rejects(
        client.chat.completions.create({
          model: "tiny-q8_0", messages: [{ role: "user", content: prompt }] }),
        (e) => e.status === 400 && e.code === "context_length_exceeded" && e.param === "messages");
  });

  test("absurd max_tokens: 400; within the context it is honoured", async () => {
    for (const max_tokens of [0, -1, 129, 1e12]) {
      await assert.rejects(
          client.completions.create({ model: "tiny-q8_0", prompt: "x", max_tokens }),
          (e) => e.status === 400 && e.param === "max_tokens", String(max_tokens));
    }
    // The whole context asked for: generation ends when the context is full.
    const r = await client.completions.create({
      model: "tiny-q8_0", prompt: "Once", max_tokens: 128, temperature: 0, ignore_eos: true });
    assert.equal(r.choices[0].finish_reason, "length");
    assert.equal(r.usage.prompt_tokens + r.usage.completion_tokens, 129);
  });

  test("oversized body: 413 before it is read", async () => {
    const r = await post(server, "/completions",
                         { model: "tiny-q8_0", prompt: "x".repeat(100000) });
    assert.equal(r.status, 413);
    assertErrorShape(r.json);
    assert.equal(r.json.error.code, "request_too_large");
  });

  test("slow-loris: a dribbling client gets 408 after the read timeout; others are served", async () => {
    const head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
    const dribble = [head, ...Array.from({ length: 40 }, (_, i) => `X-Drip-${i}: 1\r\n`)];
    const slow = raw(server.port, dribble, { gapMs: 100, timeoutMs: 6000 });
    // Meanwhile normal requests go through.
    for (let i = 0; i < 3; i++) {
      const r = await client.completions.create({ model: "tiny-q8_0", prompt: "Hi", max_tokens: 2 });
      assert.equal(r.object, "text_completion");
    }
    const { data, ms } = await slow;
    assert.match(data, /^HTTP\/1\.1 408 /);
    assert.match(data, /"code":"request_timeout"/);
    assert.ok(ms < 3000, `closed after ${ms} ms`);
    // A body that never finishes arriving times out too.
    const body = raw(server.port, [
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"model\":"], { timeoutMs: 6000 });
    const r = await body;
    assert.match(r.data, /^HTTP\/1\.1 408 /);
  });

  test("garbage and malformed HTTP: 4xx, and the server goes on", async () => {
    for (const bytes of ["\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n",
                         "GET /v1/models HTTP/9.9\r\n\r\n",
                         "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                         "GET / HTTP/1.1\r\nBad Header\r\n\r\n"]) {
      const { data } = await raw(server.port, [bytes]);
      assert.match(data, /^HTTP\/1\.1 4\d\d |^HTTP\/1\.1 505 /, JSON.stringify(bytes));
      assert.match(data, /\{"error":\{/);
    }
    const health = await fetch(server.url + "health");
    assert.equal(health.status, 200);
  });

  test("unknown routes 404, wrong methods 405", async () => {
    let res = await fetch(server.base + "/embeddings", { method: "POST", body: "{}" });
    assert.equal(res.status, 404);
    assertErrorShape(await res.json());
    res = await fetch(server.base + "/chat/completions");
    assert.equal(res.status, 405);
    assert.equal(res.headers.get("allow"), "POST");
    assertErrorShape(await res.json());
  });
});

describe("API keys", () => {
  let server;
  before(async () => {
    server = await startServer(await synthModel("q8_0"), ["--api-key", "sk-loom-test"]);
  });
  after(async () => server && (await server.stop()));

  test("requests without the right bearer key get 401; with it they pass", async () => {
    const none = await fetch(server.base + "/models");
    assert.equal(none.status, 401);
    assertErrorShape(await none.json());
    const wrong = new OpenAI({ baseURL: server.base, apiKey: "sk-wrong", maxRetries: 0 });
    await assert.rejects(wrong.models.list(), (e) => e.status === 401 && e.code === "invalid_api_key");
    await assert.rejects(
        wrong.chat.completions.create({ model: "tiny-q8_0", messages: [{ role: "user", content: "x" }] }),
        (e) => e.status === 401);
    const right = new OpenAI({ baseURL: server.base, apiKey: "sk-loom-test", maxRetries: 0 });
    const r = await right.chat.completions.create({
      model: "tiny-q8_0", messages: [{ role: "user", content: "x" }], max_tokens: 2 });
    assert.equal(r.object, "chat.completion");
    assert.equal((await fetch(server.url + "metrics")).status, 401);
    assert.equal((await fetch(server.url + "metrics",
                              { headers: { Authorization: "Bearer sk-loom-test" } })).status, 200);
    // The page and the health check stay public (the page asks for the key itself).
    assert.equal((await fetch(server.url)).status, 200);
    assert.equal((await fetch(server.url + "health")).status, 200);
  });

  test("binding a non-loopback address needs --api-key or --insecure", async () => {
    const r = spawnSync(LOOM, ["serve", "-m", await synthModel("q8_0"), "--host", "0.0.0.0",
                               "--port", "0"], { encoding: "utf8", timeout: 20000 });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /--api-key/);
  });
});
