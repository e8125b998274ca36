#!/usr/bin/env bash
# Cross-builds the engine layers (base, kernels, model, text, engine) for linux-arm64 with Debian's
# cross compiler and multiarch -dev packages, and runs their tests under qemu-user: once on a
# NEON-only CPU and once on qemu's "max" CPU (SVE/SVE2; the kernels dispatch to NEON there, see
# src/loom/kernels/CMakeLists.txt).  Installs what is missing (apt-get, as scripts/setup.sh).
#
#   scripts/arm64.sh            kernel, model, text and engine tests (everything built)
#   scripts/arm64.sh --quick    the subset scripts/test.sh runs: kernels_test and the golden
#                               generation tests (greedy runs against ../shared/golden)
#   scripts/arm64.sh --install  only install the packages
#
# Exit status 0: all passed; 1: a test or the build failed; 2: the packages could not be installed
# (no network, no root): the caller reports that loudly.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=full
case "${1:-}" in
  --quick) mode=quick ;;
  --install) mode=install ;;
  "") ;;
  *) echo "usage: scripts/arm64.sh [--quick|--install]" >&2; exit 1 ;;
esac

say() { echo "arm64: $*" >&2; }
start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start ))s"; }

# --- packages ---------------------------------------------------------------------------------
host_packages=(g++-aarch64-linux-gnu qemu-user ninja-build cmake pkg-config nlohmann-json3-dev)
arm64_packages=(libc6:arm64 libstdc++6:arm64 libhwy-dev:arm64 libgtest-dev:arm64 libpcre2-dev:arm64 libicu-dev:arm64)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${host_packages[@]}" "${arm64_packages[@]}"; do
  installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      say "need root (or sudo) to install: ${missing[*]}"
      exit 2
    fi
    sudo_cmd=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    "${sudo_cmd[@]}" dpkg --add-architecture arm64
  fi
  if ! { "${sudo_cmd[@]}" apt-get update -qq &&
         "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
  then
    say "could not install ${missing[*]} (no network?)"
    exit 2
  fi
  say "packages installed ($(elapsed))"
fi
[ "$mode" = install ] && exit 0

# --- build ------------------------------------------------------------------------------------
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
fi
jobs=${LOOM_JOBS:-$(nproc 2>/dev/null || echo 2)}
build=build-arm64
if [ ! -f "$build/build.ninja" ]; then
  say "configuring $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
    -DLOOM_ENGINE_ONLY=ON -DLOOM_BUILD_BENCH=OFF -DLOOM_WITH_MPI=OFF >/dev/null
fi
if [ "$mode" = quick ]; then
  targets=(kernels_test engine_test)
else
  targets=(base_test kernels_test model_test transformer_test hf_model_test model_cache_test
           text_test engine_test batch_engine_test)
fi
say "building ${targets[*]} (-j$jobs)"
ninja -C "$build" -j "$jobs" "${targets[@]}"
say "built ($(elapsed))"

# --- tests under qemu -------------------------------------------------------------------------
# ctest runs each test through CMAKE_CROSSCOMPILING_EMULATOR (qemu-aarch64 -L ...); QEMU_CPU picks
# the emulated CPU.  The kernel tests run every kernel on each SIMD target Highway finds (NEON and
# the portable EMU128 on arm64), against the scalar references.
run_ctest() {  # cpu, ctest selection args...
  local cpu=$1; shift
  say "ctest under qemu-aarch64 -cpu $cpu $*"
  QEMU_CPU=$cpu ctest --test-dir "$build" --output-on-failure --timeout 900 -j "$jobs" "$@"
}
if [ "$mode" = quick ]; then
  # The kernels on a NEON-only CPU (the binary directly: one process, every kernel test), the
  # golden generation tests (whole greedy runs of the real model, token for token against
  # llama2.c's in ../shared/golden) on both CPUs.
  say "kernels_test under qemu-aarch64 -cpu cortex-a53"
  QEMU_CPU=cortex-a53 qemu-aarch64 -L / \
    "$build/src/loom/kernels/kernels_test" --gtest_brief=1 ||
    { say "FAILED (kernels_test, NEON cpu) after $(elapsed)"; exit 1; }
  for cpu in cortex-a53 max; do
    run_ctest "$cpu" -R GoldenGeneration || { say "FAILED (golden, $cpu cpu) after $(elapsed)"; exit 1; }
  done
else
  run_ctest cortex-a53 || { say "FAILED (NEON cpu) after $(elapsed)"; exit 1; }
  run_ctest max || { say "FAILED (max cpu) after $(elapsed)"; exit 1; }
fi
say "all passed ($(elapsed))"
