// Bad and hostile input at the hub: wrong API keys, malformed and oversized bodies, slow clients,
// malformed node frames, unenrolled nodes, a replayed challenge answer, a reused enrolment token.
// Each gets a clear error, and the hub keeps serving everyone else.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import OpenAI from "openai";

import { requireShared, storiesModel } from "../serve/helpers.mjs";
import {
  FACTS, handMadeNode, hubStatus, makeKey, nodeSocket, startHub, startNode,
} from "./helpers.mjs";

describe("hostile input at the hub", () => {
  let hub;
  let node;
  let key;

  before(async () => {
    if (!storiesModel()) return;
    hub = await startHub({ args: ["--max-body", "65536", "--read-timeout", "1", "--grace-s", "0"] });
    key = await makeKey(hub.db);
    node = await startNode(hub, "h", [storiesModel()], { args: ["--max-memory", "50M"] });
  });
  after(async () => {
    if (node) await node.stop("SIGKILL");
    if (hub) await hub.stop();
  });

  // The network still answers a good request.
  async function stillServes() {
    const client = new OpenAI({ baseURL: hub.base, apiKey: key, maxRetries: 0 });
    const got = await client.completions.create({
      model: "stories260K", prompt: "Once upon a time", max_tokens: 4, temperature: 0,
    });
    assert.equal(got.usage.completion_tokens, 4);
  }

  const post = (path, body, headers = {}) => fetch(hub.base + path, {
    method: "POST", body,
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${key}`, ...headers },
  });

  test("API keys: missing, wrong and revoked-looking keys get 401", async (t) => {
    if (!requireShared(t)) return;
    for (const auth of [undefined, "Bearer nope", "Basic abc", `Bearer ${key}x`]) {
      const res = await fetch(hub.base + "/models", { headers: auth ? { Authorization: auth } : {} });
      assert.equal(res.status, 401);
      assert.equal((await res.json()).error.code, "invalid_api_key");
    }
    await stillServes();
  });

  test("malformed, invalid and oversized bodies get loom serve's errors", async (t) => {
    if (!requireShared(t)) return;
    let res = await post("/completions", "{not json");
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.type, "invalid_request_error");
    res = await post("/completions", JSON.stringify({ model: "stories260K", prompt: 5 }));
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.param, "prompt");
    res = await post("/completions", JSON.stringify({ model: "stories260K", prompt: "x".repeat(70000) }));
    assert.equal(res.status, 413);
    res = await post("/completions", JSON.stringify({ model: "no-such-model", prompt: "hi" }));
    assert.equal(res.status, 503);
    assert.equal((await res.json()).error.code, "no_node_for_model");
    // A prompt longer than the context: counted exactly at the hub when it is token ids; found by
    // the node when it is text (3-byte characters take a byte-fallback token per byte here, far
    // more than the hub's estimate): the same 400 either way.
    res = await post("/completions", JSON.stringify({ model: "stories260K", prompt: "x", max_tokens: 9999 }));
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.param, "max_tokens");
    for (const prompt of [Array(600).fill(300), "\u4e2d".repeat(200)]) {
      res = await post("/completions", JSON.stringify({ model: "stories260K", prompt, max_tokens: 4 }));
      assert.equal(res.status, 400);
      assert.equal((await res.json()).error.code, "context_length_exceeded");
    }
    await stillServes();
  });

  test("a slow client gets 408 and does not hold the hub", async (t) => {
    if (!requireShared(t)) return;
    const sock = net.connect(hub.port, "127.0.0.1");
    await new Promise((r) => sock.on("connect", r));
    let answer = "";
    sock.on("data", (d) => (answer += d));
    sock.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{");
    await stillServes();
    await new Promise((r) => sock.on("close", r));
    assert.match(answer, /^HTTP\/1\.1 408/);
  });

  test("malformed frames and unenrolled nodes close that connection only", async (t) => {
    if (!requireShared(t)) return;
    for (const bad of ["not json", "{}", JSON.stringify({ v: 2, type: "hello", node_id: "x" }),
                       JSON.stringify({ v: 1, type: "hello", node_id: "x", extra: 1 }),
                       JSON.stringify({ v: 1, type: "heartbeat", running: 0, waiting: 0,
                                        mem_free_bytes: 0, draining: false, paused: false,
                                        loaded: [] })]) {
      const ws = await nodeSocket(hub);
      ws.send(bad);
      const f = await ws.next();
      assert.equal(f?.type, "error", bad);
      assert.ok(["bad_frame", "unexpected_frame"].includes(f.code), JSON.stringify(f));
      assert.equal((await ws.closedWith()).code, 1008);
    }
    const ws = await nodeSocket(hub);
    ws.send({ v: 1, type: "hello", node_id: "node-0000000000000000" });
    const f = await ws.next();
    assert.equal(f.type, "error");
    assert.equal(f.code, "unenrolled");
    await ws.closedWith();
    // The real node is still there and serving.
    const s = await hubStatus(hub);
    assert.ok(s.nodes.some((n) => n.node_id === node.id));
    await stillServes();
  });

  test("a challenge answer replayed on another connection is refused", async (t) => {
    if (!requireShared(t)) return;
    const me = await handMadeNode(hub);
    const register = (signature) => ({
      v: 1, type: "register", node_id: me.id, signature, facts: FACTS, models: [],
      pod: null, max_concurrency: 1,
    });
    const first = await nodeSocket(hub);
    first.send({ v: 1, type: "hello", node_id: me.id });
    const ch1 = await first.next();
    assert.equal(ch1.type, "challenge");
    const answer = me.sign(ch1.nonce, ch1.hub_id);
    first.send(register(answer));
    assert.equal((await first.next()).type, "welcome");
    first.close();

    const second = await nodeSocket(hub);
    second.send({ v: 1, type: "hello", node_id: me.id });
    const ch2 = await second.next();
    assert.notEqual(ch2.nonce, ch1.nonce);
    second.send(register(answer));
    const f = await second.next();
    assert.equal(f.type, "error");
    assert.equal(f.code, "bad_signature");
    assert.equal((await second.closedWith()).code, 1008);

    // The enrolment token was single-use.
    const res = await fetch(hub.base + "/nodes/enroll", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: me.token, public_key: Buffer.alloc(32, 7).toString("base64"),
                             name: "again" }),
    });
    assert.equal(res.status, 401);
    await stillServes();
  });
});
