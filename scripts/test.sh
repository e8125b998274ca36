#!/usr/bin/env bash
# The README's second command: installs what is missing, builds Loom (Release) and runs every
# test: unit, golden (needs ../shared; reported when missing), multi-process and fuzz-regression
# tests through CTest, then the arm64 kernel and golden tests under qemu-user (scripts/arm64.sh).
#
#   scripts/test.sh [extra ctest args, e.g. -R golden]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
if [ ! -d ../shared ] && [ -z "${LOOM_SHARED_DIR:-}" ]; then
  echo "WARNING: ../shared is missing: the real-model and golden tests will be SKIPPED" >&2
fi
# The serve tests' npm packages (OpenAI client, playwright-core) and the tokenizer reference
# packages (tests/text); each skipped when current.
if command -v npm >/dev/null; then
  tests/serve/install.sh
  tests/serve/install.sh tests/network
  tests/serve/install.sh tests/moe
  tests/text/install.sh
else
  echo "WARNING: npm is missing: the serve black-box tests will fail (install Node.js >= 20)" >&2
fi
jobs=$(nproc 2>/dev/null || echo 2)
status=0
ctest --test-dir build --output-on-failure --timeout 600 -j "$jobs" "$@" || status=$?
# arm64 (Apple Silicon's instruction set): the kernel tests and the golden generations, cross-built
# and run under qemu-user (docs/portability.md).  LOOM_ARM64=0 skips it.
if [ "${LOOM_ARM64:-1}" != 0 ]; then
  arm64=0
  scripts/arm64.sh --quick || arm64=$?
  if [ "$arm64" -eq 2 ]; then
    echo "WARNING: the arm64 tests did not run: their packages could not be installed" >&2
  elif [ "$arm64" -ne 0 ]; then
    status=$arm64
  fi
fi
exit "$status"
