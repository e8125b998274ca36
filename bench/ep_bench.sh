#!/usr/bin/env bash
# Expert parallelism (docs/benchmarks.md, "Expert parallelism"): one process with two threads
# against an expert-parallel pod of two local ranks with one thread each (and, for scale, one
# process with one thread), on the same mixture-of-experts model: generation and prompt tokens/s,
# medians of alternating runs (A B C A B C ...) and the ratio EP=2 / one process.
#
#   bench/ep_bench.sh MODEL [REPEATS=5] [GEN_TOKENS=64]
#
# Environment: LOOM (the binary, default build/src/loom/cli/loom), BACKEND (the pod's transport,
# default shm), PROMPT_IDS (default: 128 token ids).
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1
repeats=${2:-5}
gen=${3:-64}
loom=${LOOM:-build/src/loom/cli/loom}
backend=${BACKEND:-shm}
prompt_ids=${PROMPT_IDS:-$(seq -s, 300 427)}

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

configs=("one process, 2 threads|--threads 2" "EP=2, 1 thread/rank|--ep 2 --threads 1 --backend $backend"
         "one process, 1 thread|--threads 1")
declare -A gen_s prompt_s tokens
echo "# ep_bench: $model, $repeats alternating rounds, $gen generated tokens, pod backend $backend"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < repeats; r++)); do
  for c in "${configs[@]}"; do
    name=${c%%|*}
    flags=${c#*|}
    # shellcheck disable=SC2086
    out=$("$loom" run -m "$model" --prompt-ids "$prompt_ids" -n "$gen" --temp 0 --json $flags 2>/dev/null)
    gen_s[$name]+="$(jq .timings.decode_tokens_per_s <<<"$out") "
    prompt_s[$name]+="$(jq .timings.prompt_tokens_per_s <<<"$out") "
    tokens[$name]=$(jq -c .generated_token_ids <<<"$out")
  done
done
printf '%-24s %12s %14s   %s\n' "configuration" "gen tok/s" "prompt tok/s" "generation runs"
declare -A med_gen med_prompt
for c in "${configs[@]}"; do
  name=${c%%|*}
  med_gen[$name]=$(tr ' ' '\n' <<<"${gen_s[$name]}" | grep . | median)
  med_prompt[$name]=$(tr ' ' '\n' <<<"${prompt_s[$name]}" | grep . | median)
  printf '%-24s %12.2f %14.1f   %s\n' "$name" "${med_gen[$name]}" "${med_prompt[$name]}" "${gen_s[$name]}"
done
one="one process, 2 threads"
ep="EP=2, 1 thread/rank"
awk -v a="${med_gen[$ep]}" -v b="${med_gen[$one]}" -v c="${med_prompt[$ep]}" -v d="${med_prompt[$one]}" \
  'BEGIN {printf "EP=2 / one process (2 threads): generation %.3fx, prompt %.3fx\n", a / b, c / d}'
if [ "${tokens[$ep]}" = "${tokens[$one]}" ]; then
  echo "greedy tokens: EP=2 equals one process"
else
  echo "greedy tokens: EP=2 DIFFERS from one process (random weights: near-ties; see docs/parallel.md)"
fi
