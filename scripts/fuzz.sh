#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/ and runs each for a while over its seed
# corpus; fails if any target crashes (or leaks, or hits undefined behaviour).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET=20] [TARGET...]
#
# Corpus per target: build-fuzz/corpus/<target>/ (kept between runs, so it grows), seeded from the
# committed files in fuzz/corpus/<target>/ and the generated seeds of fuzz_seeds.  Crash inputs go
# to build-fuzz/artifacts/<target>/; a crasher worth keeping becomes a regression input in
# fuzz/corpus/<target>/ and a unit test.  Environment: JOBS (build parallelism, default 2),
# FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seconds=${1:-20}
shift || true
build="$root/build-fuzz"
jobs=${JOBS:-2}

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DLOOM_FUZZ=ON -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_BENCH=OFF \
    >/dev/null
fi
ninja -C "$build" -j "$jobs" fuzz_all

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(grep -v '^$' "$build/fuzz_targets.txt")
fi

"$build/fuzz/fuzz_seeds" "$build/seeds"

failed=()
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  artifacts="$build/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  for seeds in "$root/fuzz/corpus/$t" "$build/seeds/$t"; do
    if [ -d "$seeds" ]; then
      find "$seeds" -maxdepth 1 -type f ! -name '*.md' -exec cp -n {} "$corpus/" \;
    fi
  done
  echo "fuzz: $t for ${seconds}s ($(find "$corpus" -type f | wc -l) corpus files)" >&2
  # shellcheck disable=SC2086
  if ! "$build/fuzz/$t" "$corpus" -max_total_time="$seconds" -print_final_stats=1 \
      -artifact_prefix="$artifacts/" ${FUZZ_ARGS:-} >"$build/$t.log" 2>&1; then
    echo "fuzz: $t FAILED; see $build/$t.log and $artifacts/" >&2
    tail -40 "$build/$t.log" >&2
    failed+=("$t")
  else
    grep -E '^stat::(number_of_executed_units|new_units_added)' "$build/$t.log" | sed "s/^/fuzz: $t /" >&2 || true
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds}s without a crash" >&2
