// The hub over TLS with a certificate the test makes itself (openssl CLI): a node enrols over
// HTTPS and connects over wss:// trusting only that certificate, the official OpenAI client (in a
// child process told of the certificate by NODE_EXTRA_CA_CERTS) gets a greedy completion equal to
// `loom run`, and a non-loopback listener without TLS is refused with the reason.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { LOOM, loomRun, requireShared, selfSignedCert, storiesModel, tmpDir } from "../serve/helpers.mjs";
import { hubStatus, makeKey, startHub, startNode, waitForNode } from "./helpers.mjs";

const execFileP = promisify(execFile);
const here = path.dirname(fileURLToPath(import.meta.url));

describe("hub over TLS", () => {
  let hub;
  let node;
  let cert;
  let key;

  before(async () => {
    if (!storiesModel()) return;
    ({ cert, key } = await selfSignedCert("tls-"));
    hub = await startHub({ args: ["--tls-cert", cert, "--tls-key", key], ca: cert });
    node = await startNode(hub, "t", [storiesModel()], {
      args: ["--max-memory", "50M", "--ca-file", cert], enrollArgs: ["--ca-file", cert],
    });
  });
  after(async () => {
    if (node) await node.stop("SIGKILL");
    if (hub) await hub.stop();
  });

  test("a node over wss and the OpenAI client over https, trusting the test's certificate", async (t) => {
    if (!requireShared(t)) return;
    await waitForNode(hub, node.id);
    const apiKey = await makeKey(hub.db);
    const script = `
      import OpenAI from "openai";
      const client = new OpenAI({ baseURL: process.argv[1], apiKey: process.argv[2], maxRetries: 0 });
      const r = await client.completions.create({
        model: "stories260K", prompt: "Once upon a time", max_tokens: 16, temperature: 0 });
      console.log(JSON.stringify(r));`;
    const { stdout } = await execFileP(process.execPath, ["--input-type=module", "-e", script, hub.base, apiKey], {
      cwd: here, env: { ...process.env, NODE_EXTRA_CA_CERTS: cert },
    });
    const got = JSON.parse(stdout);
    const want = await loomRun(storiesModel(), "Once upon a time", 16);
    assert.equal(got.choices[0].text, want.text);
    // Plain HTTP to the TLS port gets nowhere.
    await assert.rejects(fetch(hub.base.replace("https", "http") + "/models"));
    const s = await hubStatus(hub);
    assert.ok(s.nodes.some((n) => n.node_id === node.id));
  });

  test("a non-loopback listener without TLS is refused, saying why", async (t) => {
    if (!requireShared(t)) return;
    const r = await execFileP(LOOM, ["hub", "--listen", "0.0.0.0:0", "--db", path.join(tmpDir(), "x.db")])
        .then(() => ({ code: 0, stderr: "" }), (e) => ({ code: e.code, stderr: e.stderr }));
    assert.equal(r.code, 2);
    assert.match(r.stderr, /without TLS/);
    assert.match(r.stderr, /--tls-cert/);
  });
});
