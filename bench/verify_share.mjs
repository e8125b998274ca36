#!/usr/bin/env node
// What verification costs (docs/network.md, "Verification"): a `loom hub` at its default rates
// (--verify-rate 0.5 falling to --verify-floor 0.02) with two honest `loom node`s serving
// stories260K, and R rounds of C concurrent completions (half greedy, half sampled at T 0.8, 16-40
// tokens).  After each round it prints the share of the network's tokens spent on checks (the
// hub's `verification.share`) and the checks so far; at the end, the log-probability statistics
// of the honest sampled and greedy checks (what the thresholds must let through).
//
//   node bench/verify_share.mjs [--rounds 20] [--concurrency 8] [--canary-interval-s 300] [--json]
//
// Binary: $LOOM_BIN, else build/src/loom/cli/loom; model: ../shared (or $LOOM_SHARED_DIR).
import crypto from "node:crypto";

import { hubStatus, loom, makeKey, startHub, startNode } from "../tests/network/helpers.mjs";
import { storiesModel } from "../tests/serve/helpers.mjs";

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const rounds = arg("rounds", 20), concurrency = arg("concurrency", 8);
const asJson = process.argv.includes("--json");
if (!storiesModel()) throw new Error("no ../shared/models/stories260K");

const hub = await startHub({ args: ["--price", "*=1000:2000", "--verify-window-s", "3600",
                                    "--canary-interval-s", String(arg("canary-interval-s", 300))] });
const key = await makeKey(hub.db, "bench");
await loom(["hub", "account", "credit", "bench", "1000", "--db", hub.db]);
const nodes = [];
for (const name of ["a", "b"]) nodes.push(await startNode(hub, name, [storiesModel()]));
const PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went", "One day a bird",
                 "Tim had a big red", "The sun was hot and"];
const rows = [];
try {
  for (let r = 0; r < rounds; r++) {
    const all = [];
    for (let i = 0; i < concurrency; i++) {
      const greedy = i % 2 === 0;
      all.push(fetch(hub.base + "/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json", Authorization: `Bearer ${key}` },
        body: JSON.stringify({
          model: "stories260K", prompt: PROMPTS[crypto.randomInt(PROMPTS.length)],
          max_tokens: 16 + crypto.randomInt(24),
          ...(greedy ? { temperature: 0 } : { temperature: 0.8, seed: crypto.randomInt(1e9) }),
        }),
      }).then((res) => res.json()));
    }
    await Promise.all(all);
    const v = (await hubStatus(hub)).verification;
    const row = { round: r + 1, requests: (r + 1) * concurrency, share: v.share,
                  passed: v.checks_passed, failed: v.checks_failed, dropped: v.checks_dropped,
                  rates: v.nodes.map((n) => n.rate) };
    rows.push(row);
    if (!asJson) {
      console.log(`round ${row.round}: ${row.requests} requests, share ${row.share.toFixed(4)}, ` +
                  `checks ${row.passed} passed / ${row.failed} failed / ${row.dropped} dropped, ` +
                  `rates ${row.rates.map((x) => x.toFixed(3)).join(" ")}`);
    }
  }
  await new Promise((r) => setTimeout(r, 2000));
  const v = (await hubStatus(hub)).verification;
  const stats = (list) => {
    const means = list.map((c) => c.mean_logprob).sort((a, b) => a - b);
    const mins = list.map((c) => c.min_logprob).sort((a, b) => a - b);
    return { checks: list.length, mean_of_means: means.reduce((a, b) => a + b, 0) / (means.length || 1),
             lowest_mean: means[0], lowest_token: mins[0],
             mismatches: list.reduce((a, c) => a + (c.mismatches ?? 0), 0) };
  };
  const scored = v.recent.filter((c) => c.mean_logprob !== undefined);
  const summary = {
    share: v.share, served_tokens: v.served_tokens, check_tokens: v.check_tokens,
    checks_passed: v.checks_passed, checks_failed: v.checks_failed, checks_dropped: v.checks_dropped,
    sampled: stats(scored.filter((c) => !c.greedy)), greedy: stats(scored.filter((c) => c.greedy)),
  };
  console.log(asJson ? JSON.stringify({ rows, summary }) : JSON.stringify(summary, null, 1));
} finally {
  for (const n of nodes) await n.stop();
  await hub.stop();
}
