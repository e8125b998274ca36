#!/usr/bin/env bash
# The README's first command: installs what is missing, builds Loom, writes a synthetic
# TinyLlama-1.1B-shaped model (RANDOM weights: the text is gibberish, the speed is real),
# generates text with it in one process, then runs the same prompt on a pod of local ranks
# (pipeline-parallel PP=2 and tensor-parallel TP=2) and shows that the tokens are identical.
#
#   scripts/quickstart.sh [PROMPT]
#
# Environment: LOOM_DEMO_SHAPE (default tinyllama-1.1b), LOOM_DEMO_TYPE (default q4_0),
# LOOM_CACHE (default ~/.cache/loom).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh

loom=build/src/loom/cli/loom
shape=${LOOM_DEMO_SHAPE:-tinyllama-1.1b}
type=${LOOM_DEMO_TYPE:-q4_0}
cache=${LOOM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loom}
model="$cache/models/synth-$shape-$type.gguf"
prompt=${1:-Once upon a time}

mkdir -p "$(dirname "$model")"
if [ ! -f "$model" ]; then
  echo "== writing a synthetic $shape model ($type, random weights) to $model" >&2
  "$loom" synth --shape "$shape" --type "$type" -o "$model"
fi
"$loom" info -m "$model" | head -n 12
echo
echo "== loom run (random weights: expect gibberish text at real speed)" >&2
"$loom" run -m "$model" -p "$prompt" -n 64 --seed 1

echo
echo "== the same prompt, greedy, on one process and on pods of 2 local ranks" >&2
printf '%-26s %-10s %14s %14s\n' "run" "tokens" "prompt tok/s" "gen tok/s"
first=""
for mode in "one process:" "pipeline PP=2:--pp 2" "tensor TP=2:--tp 2"; do
  name=${mode%%:*}
  flags=${mode#*:}
  # shellcheck disable=SC2086
  out=$("$loom" run -m "$model" -p "$prompt" -n 32 --temp 0 --json $flags 2>/dev/null)
  ids=$(jq -c .generated_token_ids <<<"$out")
  [ -n "$first" ] || first=$ids
  same=$([ "$ids" = "$first" ] && echo identical || echo DIFFERENT)
  printf '%-26s %-10s %14.1f %14.1f\n' "$name" "$same" \
    "$(jq .timings.prompt_tokens_per_s <<<"$out")" "$(jq .timings.decode_tokens_per_s <<<"$out")"
done
