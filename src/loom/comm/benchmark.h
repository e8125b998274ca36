// The measurement behind `loom comm-bench`: latency and bandwidth of each collective over a range
// of message sizes, on whatever group the caller passes (every rank calls it with the same
// options).  With `check`, every iteration's result is verified against a serial reference
// (integer-valued data, so sums are exact in f32, f16 and bf16 and must match bit for bit).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/comm/group.h"

namespace loom::comm {

struct BenchOptions {
  // Any of "allreduce", "allgather", "broadcast", "sendrecv", "barrier".
  std::vector<std::string> ops = {"allreduce", "allgather", "broadcast", "sendrecv", "barrier"};
  ElementType dtype = ElementType::kF32;  // for allreduce
  int64_t min_bytes = 64;
  int64_t max_bytes = int64_t{64} << 20;
  int64_t size_factor = 4;       // sizes: min, min * factor, ... up to max
  int64_t iters = 0;             // per size; 0 = enough for ~target_seconds
  double target_seconds = 0.25;  // per (op, size) when iters == 0
  int64_t warmup = 3;
  bool check = false;
};

struct BenchRow {
  std::string op;
  int64_t bytes = 0;  // allreduce/broadcast: the buffer; allgather: the gathered output;
                      // sendrecv: one message (rank 0 <-> 1 ping-pong, one-way time)
  int64_t iters = 0;
  double median_us = 0;  // the slowest rank's median time per operation
  double p10_us = 0;
  double p90_us = 0;
  double algbw_gbs = 0;  // bytes / median time, GB/s (1e9 bytes)
  double busbw_gbs = 0;  // NCCL convention: allreduce x 2(n-1)/n, allgather x (n-1)/n
  int64_t errors = 0;    // elements that failed --check on any rank (0 also when not checked)
  bool checked = false;
};

// Measures every (op, size).  `on_row` (if set) is called on every rank as each row completes.
// Fails on a communication error; check failures are reported in the rows, not as an error.
StatusOr<std::vector<BenchRow>> RunCommBenchmark(
    Group& group, const BenchOptions& options, const std::function<void(const BenchRow&)>& on_row);

// The fixed-width table: a header line and one line per row.
std::string BenchTableHeader();
std::string BenchTableRow(const BenchRow& row);

// Parses "allreduce,sendrecv" style lists; checks the names.
Status ParseBenchOps(const std::string& text, std::vector<std::string>* ops);
StatusOr<ElementType> ParseElementType(const std::string& text);

}  // namespace loom::comm
