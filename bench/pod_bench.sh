#!/usr/bin/env bash
# Pod benchmarks (docs/benchmarks.md, "Pods"): one process vs tensor-parallel and pipeline-parallel
# pods of local ranks on the same model, generation and prompt tokens/s, medians of alternating runs
# (A B C A B C ...), with optional emulated link delay, next to what `loom plan` predicts.
#
#   bench/pod_bench.sh MODEL [REPEATS=5] [GEN_TOKENS=64]
#
# Environment: LOOM (the binary, default build/src/loom/cli/loom), DELAYS (one-way link delays in
# microseconds to emulate on the tcp backend, default "0 50 300"), PROMPT (prompt tokens for the
# chunked-prefill comparison, default 1024), CHUNK (default 128).
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1
repeats=${2:-5}
gen=${3:-64}
loom=${LOOM:-build/src/loom/cli/loom}
delays=${DELAYS:-0 50 300}
prompt_len=${PROMPT:-1024}
chunk=${CHUNK:-128}

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

run_json() {  # FLAGS... -> one JSON line
  "$loom" run -m "$model" -p "Once upon a time" -n "$gen" --temp 0 --json "$@" 2>/dev/null
}

# The loopback link's own latency (a one-shot 8 KiB all-reduce over tcp, 2 ranks): what `loom plan`
# must add to an emulated delay to describe the link the pods really run on.
base_us=$("$loom" launch -n 2 --backend tcp -- "$loom" comm-bench --ops allreduce --min-bytes 8K \
  --max-bytes 8K --seconds 1 --json 2>/dev/null | jq -s '.[0].median_us')
echo "# pod_bench: $model, $repeats alternating runs, $gen generated tokens"
echo "# loopback tcp all-reduce (8 KiB, 2 ranks): ${base_us} us, added to each emulated delay for the plan"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
declare -A gen_tps
configs=("one process, 2 threads|--threads 2" "one process, 1 thread|--threads 1"
         "TP=2, 1 thread/rank|--tp 2 --threads 1 --backend tcp"
         "PP=2, 1 thread/rank|--pp 2 --threads 1 --backend tcp")
plan_json() {  # LINK_US -> the plan's JSON (it calibrates on this machine each time)
  "$loom" plan -m "$model" --ranks 2 --ranks-per-host 2 --link-latency-us "$1" --link-gbps 40 \
    --json 2>/dev/null
}
for delay in $delays; do
  declare -A samples=()
  link_us=$(awk -v a="$delay" -v b="$base_us" 'BEGIN{print a+b}')
  # The plan calibrates on the machine as it is at that moment, and the machine drifts: predict
  # once per round, between the runs, and compare medians with medians.
  predictions=""
  for ((r = 0; r < repeats; r++)); do
    predictions+="$(plan_json "$link_us" | jq -c '[.plans[] | select(.feasible)]')"$'\n'
    for c in "${configs[@]}"; do
      name=${c%%|*}
      flags=${c#*|}
      # shellcheck disable=SC2086
      tps=$(LOOM_LINK_DELAY_US=$delay run_json $flags | jq .timings.decode_tokens_per_s)
      samples[$name]+="$tps "
    done
  done
  echo
  echo "## link delay ${delay} us one-way (emulated on tcp; 0 = plain loopback)"
  printf '%-28s %10s   %s\n' "configuration" "median" "runs (generation tokens/s)"
  for c in "${configs[@]}"; do
    name=${c%%|*}
    m=$(tr ' ' '\n' <<<"${samples[$name]}" | grep -v '^$' | median)
    gen_tps["$delay|$name"]=$m
    printf '%-28s %10.1f   %s\n' "$name" "$m" "${samples[$name]}"
  done
  base=${gen_tps["$delay|one process, 2 threads"]}
  echo "TP=2 / one process (2 threads): $(awk -v a="${gen_tps["$delay|TP=2, 1 thread/rank"]}" -v b="$base" 'BEGIN{printf "%.2f", a/b}')"
  echo "plan predictions (2 ranks on this host, ${link_us} us; medians of the $repeats rounds' plans):"
  jq -s -r 'def median: sort | if length % 2 == 1 then .[length / 2 | floor]
                              else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    [.[][]] | group_by("\(.tp) \(.pp)")[] |
    "  tp\(.[0].tp) pp\(.[0].pp): generation \(map(.decode_tokens_per_s) | median * 10 | round / 10) tok/s (\(map(.decode_tokens_per_s * 10 | round / 10) | join(", "))), prompt \(map(.prompt_tokens_per_s) | median | round) tok/s"' \
    <<<"$predictions"
done

echo
echo "## chunked pipelined prefill: PP=2, ${prompt_len}-token prompt"
ids=$(seq -s, 100 $((100 + prompt_len - 2)))
ids="1,$ids"
declare -A pre=()
for ((r = 0; r < repeats; r++)); do
  for b in "$chunk" "$prompt_len"; do
    tps=$("$loom" run -m "$model" --prompt-ids "$ids" -n 1 --temp 0 --json --pp 2 --threads 1 \
      --backend tcp --batch "$b" 2>/dev/null | jq .timings.prompt_tokens_per_s)
    pre[$b]+="$tps "
  done
done
for b in "$chunk" "$prompt_len"; do
  m=$(tr ' ' '\n' <<<"${pre[$b]}" | grep -v '^$' | median)
  label=$([ "$b" = "$prompt_len" ] && echo "unchunked (one ${b}-token pass)" || echo "chunks of $b")
  printf '%-34s %10.1f prompt tokens/s   (%s)\n' "$label" "$m" "${pre[$b]}"
done
