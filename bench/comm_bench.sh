#!/usr/bin/env bash
# Measures what docs/benchmarks.md reports for the comm layer, alternating the candidates (A B A B
# ...) so that drift hits them equally; prints every run's row, then the median per candidate.
#
#   bench/comm_bench.sh [BUILD_DIR=build] [ROUNDS=3]
#
# Needs: BUILD_DIR/src/loom/cli/loom, BUILD_DIR/bench/comm_raw_tcp_bench, mpirun (optional).
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
loom="$build/src/loom/cli/loom"
raw="$build/bench/comm_raw_tcp_bench"
mpi_flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && mpi_flags+=(--allow-run-as-root)
have_mpi=0
command -v mpirun >/dev/null && have_mpi=1
results=$(mktemp)
trap 'rm -f "$results"' EXIT

# row NAME COMMAND...: runs a comm-bench command, records "NAME median_us busbw" of its last row.
row() {
  local name=$1
  shift
  local line
  line=$("$@" 2>/dev/null | grep -v '^#' | tail -1)
  echo "$name | $line"
  echo "$name $(echo "$line" | awk '{print $4, $8}')" >>"$results"
}

small=(comm-bench --ops allreduce --min-bytes 16K --max-bytes 16K --seconds 1)
large=(comm-bench --ops allreduce --min-bytes 64M --max-bytes 64M --iters 10)
echo "## $(date -u +%FT%TZ) on $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= rounds; i++)); do
  echo "--- round $i"
  row "tcp-16K" "$loom" launch -n 2 -- "$loom" "${small[@]}"
  row "shm-16K" "$loom" launch -n 2 --backend shm -- "$loom" "${small[@]}"
  if [ $have_mpi = 1 ]; then
    row "mpi-default-16K" mpirun -n 2 "${mpi_flags[@]}" "$loom" "${small[@]}"
    row "mpi-tuned-16K" mpirun -n 2 "${mpi_flags[@]}" --mca btl_vader_eager_limit 32768 \
      "$loom" "${small[@]}"
    row "mpi-tcp-16K" mpirun -n 2 "${mpi_flags[@]}" --mca btl tcp,self "$loom" "${small[@]}"
  fi
  row "tcp-64M" "$loom" launch -n 2 -- "$loom" "${large[@]}"
  if [ $have_mpi = 1 ]; then
    row "mpi-tcp-64M" mpirun -n 2 "${mpi_flags[@]}" --mca btl tcp,self "$loom" "${large[@]}"
  fi
  # With the link (not the CPU) as the bottleneck: an emulated 8 Gbit/s (1 GB/s) link per direction.
  row "tcp-64M-cap1GBps" env LOOM_LINK_GBPS=8 "$loom" launch -n 2 -- "$loom" "${large[@]}"
  "$raw" --seconds 1 | tee /dev/stderr | awk '/^stream/ {print "raw-stream 0", $(NF-1)} /^duplex/ {print "raw-duplex 0", $(NF-3)}' >>"$results"
  for delay in 50 300; do
    row "tcp-16K-delay$delay-oneshot" env LOOM_LINK_DELAY_US=$delay "$loom" launch -n 2 -- \
      "$loom" comm-bench --ops allreduce --min-bytes 16K --max-bytes 16K --iters 300
    row "tcp-16K-delay$delay-ring" env LOOM_LINK_DELAY_US=$delay LOOM_TCP_ONESHOT_MAX=0 \
      "$loom" launch -n 2 -- "$loom" comm-bench --ops allreduce --min-bytes 16K --max-bytes 16K \
      --iters 300
  done
done
echo "## medians over $rounds rounds: name, median_us, busbw_GB/s"
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
for name in $(cut -d' ' -f1 "$results" | sort -u); do
  t=$(awk -v k="$name" '$1 == k { print $2 }' "$results" | median)
  b=$(awk -v k="$name" '$1 == k { print $3 }' "$results" | median)
  printf "%-28s %10s %8s\n" "$name" "$t" "$b"
done
