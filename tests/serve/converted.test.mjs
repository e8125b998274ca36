// Converted models serve as written (issue 19): stories260K.gguf converted by `loom convert` into a
// Hugging Face directory with only tokenizer.json beside the weights and an MLX directory (8-bit)
// with only tokenizer.model; `loom serve` on each, with no --tokenizer, gives the llama2.c golden
// completions through the OpenAI client, streamed and not.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import OpenAI from "openai";

import { LOOM, requireShared, sharedDir, startServer, storiesModel, tmpDir } from "./helpers.mjs";

const execFileP = promisify(execFile);

const DIRS = [
  { name: "stories-hf", args: ["--to", "hf"], drop: ["tokenizer.model"], keep: "tokenizer.json" },
  {
    name: "stories-mlx",
    args: ["--to", "mlx", "--bits", "8", "--group-size", "32"],
    drop: ["tokenizer.json", "tokenizer_config.json"],
    keep: "tokenizer.model",
  },
];

function golden() {
  const file = path.join(sharedDir(), "golden/stories260K_greedy.json");
  return JSON.parse(fs.readFileSync(file, "utf8")).entries.filter((e) => e.steps === 64);
}

for (const d of DIRS) {
  describe(`loom serve on ${d.name} (only ${d.keep})`, () => {
    let server;
    let client;

    before(async () => {
      if (!storiesModel()) return;
      const dir = path.join(tmpDir(), d.name);
      await execFileP(LOOM, ["convert", "-m", storiesModel(), "-o", dir, ...d.args]);
      for (const f of d.drop) fs.rmSync(path.join(dir, f));
      assert.ok(fs.existsSync(path.join(dir, d.keep)));
      server = await startServer(dir);
      client = new OpenAI({ baseURL: server.base, apiKey: "unused", maxRetries: 0 });
    });
    after(async () => server && (await server.stop()));

    test("greedy completions reproduce the golden outputs", async (t) => {
      if (!requireShared(t)) return;
      const entries = golden();
      assert.ok(entries.length >= 3);
      for (const e of entries) {
        // llama2.c's steps count the prompt's positions; its last one yields the first token.
        const maxTokens = e.steps - (e.prompt_token_ids.length - 1);
        const got = await client.completions.create({
          model: d.name, prompt: e.prompt, max_tokens: maxTokens, temperature: 0,
        });
        assert.equal(e.prompt + got.choices[0].text, e.text, e.prompt);
        assert.equal(got.usage.prompt_tokens, e.prompt_token_ids.length, e.prompt);
        assert.equal(got.usage.completion_tokens, e.generated_token_ids.length, e.prompt);
      }
    });

    test("streamed completions give the same text", async (t) => {
      if (!requireShared(t)) return;
      const e = golden().find((x) => x.prompt !== "");
      const maxTokens = e.steps - (e.prompt_token_ids.length - 1);
      const stream = await client.completions.create({
        model: d.name, prompt: e.prompt, max_tokens: maxTokens, temperature: 0, stream: true,
      });
      let text = "";
      for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
      assert.equal(e.prompt + text, e.text);
    });
  });
}
