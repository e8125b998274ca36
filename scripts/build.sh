#!/usr/bin/env bash
# Configures and builds Loom (Release) into build/.  Usage: scripts/build.sh [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The land outlines of the hub's world page (the world-atlas npm package, embedded at build time).
# Without npm, or offline, the page is built without them and says so.
if command -v npm >/dev/null; then
  tests/serve/install.sh src/loom/network/hub/atlas ||
    echo "WARNING: world-atlas not installed: the world page will have no land outlines" >&2
else
  echo "note: npm is missing: the hub's world page is built without land outlines" >&2
fi
jobs=$(nproc 2>/dev/null || echo 2)
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
cmake --build build -j "$jobs"
