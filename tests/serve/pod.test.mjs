// A pod behind `loom serve`: with --tp 2 (two local ranks, rank 0 serving HTTP, rank 1 following
// its steps) the API answers exactly what one process answers, for concurrent requests too; the
// pod stays up while idle longer than the ranks' receive deadline (keep-alive pings), and stops
// cleanly on SIGTERM.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

import { loomRun, requireShared, startServer, storiesModel, synthModel } from "./helpers.mjs";

const PROMPTS = ["Once upon a time", "The little dog", "Lily wanted to", "One day"];

for (const which of ["stories260K", "synthetic q8_0"]) {
  describe(`tp=2 pod behind loom serve on ${which}`, () => {
    let server;
    let client;
    let model;
    let skip = false;

    before(async () => {
      model = which === "stories260K" ? storiesModel() : await synthModel("q8_0");
      if (!model) {
        skip = true;
        return;
      }
      // A short group deadline: the idle test below outlasts it, so only keep-alives save the pod.
      process.env.LOOM_COMM_TIMEOUT_S = "2";
      server = await startServer(model, ["--tp", "2", "--parallel", "4", "--threads", "1"]);
      delete process.env.LOOM_COMM_TIMEOUT_S;
      client = new OpenAI({ baseURL: server.base, apiKey: "unused", maxRetries: 0 });
    });
    after(async () => server && (await server.stop()));
    const guard = (t) => (skip ? (requireShared(t), false) : true);
    const name = () => (which === "stories260K" ? "stories260K" : "tiny-q8_0");

    test("announces the pod", (t) => {
      if (!guard(t)) return;
      assert.match(server.stdout(), /tp 2 x pp 1/);
    });

    test("concurrent greedy completions equal one process's loom run", async (t) => {
      if (!guard(t)) return;
      const want = await Promise.all(PROMPTS.map((p) => loomRun(model, p, 32)));
      const got = await Promise.all(PROMPTS.map((prompt) =>
        client.completions.create({ model: name(), prompt, max_tokens: 32, temperature: 0 })));
      for (let i = 0; i < PROMPTS.length; ++i) {
        assert.equal(got[i].choices[0].text, want[i].text, PROMPTS[i]);
        assert.equal(got[i].usage.completion_tokens, want[i].generated_token_ids.length);
      }
    });

    test("a streamed chat reply equals the non-streamed one", async (t) => {
      if (!guard(t)) return;
      const messages = [{ role: "user", content: PROMPTS[0] }];
      const whole = await client.chat.completions.create({
        model: name(), messages, max_tokens: 24, temperature: 0 });
      let text = "";
      const stream = await client.chat.completions.create({
        model: name(), messages, max_tokens: 24, temperature: 0, stream: true });
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
      assert.equal(text, whole.choices[0].message.content);
    });

    test("idle longer than the ranks' deadline, the pod still answers", async (t) => {
      if (!guard(t)) return;
      await new Promise((r) => setTimeout(r, 4500));
      const want = await loomRun(model, PROMPTS[1], 16);
      const got = await client.completions.create({
        model: name(), prompt: PROMPTS[1], max_tokens: 16, temperature: 0 });
      assert.equal(got.choices[0].text, want.text);
    });

    test("SIGTERM stops every rank and exits 0", async (t) => {
      if (!guard(t)) return;
      await server.stop();
      assert.equal(await server.exitCode(), 0, server.stderr());
    });
  });
}
