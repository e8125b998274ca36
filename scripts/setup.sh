#!/usr/bin/env bash
# Installs what building and testing Loom needs, from Debian packages only.  Idempotent: installs
# nothing when everything is present.  Uses sudo when not run as root.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git jq
  libhwy-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  libpcre2-dev libcurl4-openssl-dev libssl-dev libicu-dev
  libboost1.81-dev libsqlite3-dev libpq-dev postgresql openssl
  iproute2
  clang libclang-rt-14-dev
  chromium
)

# Node.js runs the black-box serve tests and the tokenizer reference vectors; Debian's nodejs and
# npm unless a Node.js is already installed (another source's nodejs would conflict with npm).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
