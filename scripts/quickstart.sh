#!/usr/bin/env bash
# The README's first command: installs what is missing, builds Loom, writes a synthetic
# TinyLlama-1.1B-shaped model (RANDOM weights: the text is gibberish, the speed is real),
# generates text with it in one process, then runs the same prompt on pods of local ranks
# (pipeline-parallel PP=2 and tensor-parallel TP=2): the tokens next to one process's (identical:
# docs/parallel.md, "Exactness"), and the speeds; then the same comparison on a small float model.
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

# pod_table MODEL N: the same prompt, greedy, N tokens, through one process, PP=2 and TP=2 (local
# ranks over shared memory); how many tokens match the one-process run, and each one's speed.
pod_table() {
  local m=$1 n=$2 first="" mode name flags out ids same
  printf '%-16s %-24s %14s %14s\n' "run" "tokens vs one process" "prompt tok/s" "gen tok/s"
  for mode in "one process:" "pipeline PP=2:--pp 2" "tensor TP=2:--tp 2"; do
    name=${mode%%:*}
    flags=${mode#*:}
    # shellcheck disable=SC2086
    out=$("$loom" run -m "$m" -p "$prompt" -n "$n" --temp 0 --json $flags 2>/dev/null)
    ids=$(jq -c .generated_token_ids <<<"$out")
    if [ -z "$first" ]; then
      first=$ids
      same="(the reference)"
    else
      same=$(jq -n --argjson a "$first" --argjson b "$ids" \
        '[range([$a, $b] | map(length) | min)] | map(select($a[.] != $b[.])) |
         if length == 0 then "identical" else "first \(.[0]) of \($a | length) same" end' -r)
    fi
    printf '%-16s %-24s %14.1f %14.1f\n' "$name" "$same" \
      "$(jq .timings.prompt_tokens_per_s <<<"$out")" "$(jq .timings.decode_tokens_per_s <<<"$out")"
  done
}

echo
echo "== $shape $type: one process and pods of 2 local ranks, greedy, 32 tokens" >&2
pod_table "$model" 32

# The same comparison on a small float model (float activations, no quantization step):
small="$cache/models/synth-small-f32.gguf"
[ -f "$small" ] || "$loom" synth --shape small --type f32 -o "$small" >/dev/null
echo
echo "== small f32 model (float activations): the same comparison, 64 tokens" >&2
pod_table "$small" 64
