#!/usr/bin/env bash
# Installs the serve tests' npm packages (the official OpenAI client, playwright-core) into
# tests/serve/node_modules with `npm ci`, exactly as package-lock.json pins them.  Idempotent: does
# nothing when node_modules was installed from the current lock file.  No browser is downloaded:
# the tests drive Debian's /usr/bin/chromium.
set -euo pipefail
# An argument names another test folder with its own package-lock.json (tests/network).
cd "${1:-$(dirname "$0")}"
if ! command -v npm >/dev/null; then
  echo "serve tests: npm not found; install Node.js (>= 20) to run them" >&2
  exit 1
fi
stamp=node_modules/.loom-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "serve tests: npm ci" >&2
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >&2
echo "$want" > "$stamp"
