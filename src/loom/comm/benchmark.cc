#include "loom/comm/benchmark.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "loom/base/aligned_buffer.h"
#include "loom/base/half.h"

namespace loom::comm {

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Small integers: every partial sum of up to 16 ranks is exact in f32, f16 and bf16.
int32_t Pattern(int64_t i, int rank, int64_t it) {
  return static_cast<int32_t>((i * 7 + rank * 13 + it * 3) % 17) - 8;
}
uint8_t BytePattern(int64_t j, int rank, int64_t it) {
  return static_cast<uint8_t>(j * 31 + rank * 7 + it);
}

void StoreValue(std::byte* p, int64_t i, ElementType type, float v) {
  if (type == ElementType::kF32) {
    std::memcpy(p + i * 4, &v, 4);
  } else {
    const uint16_t h = type == ElementType::kF16 ? base::F32ToF16(v) : base::F32ToBf16(v);
    std::memcpy(p + i * 2, &h, 2);
  }
}
bool SameValue(const std::byte* p, int64_t i, ElementType type, float v) {
  if (type == ElementType::kF32) {
    float got;
    std::memcpy(&got, p + i * 4, 4);
    return got == v;
  }
  uint16_t got;
  std::memcpy(&got, p + i * 2, 2);
  return got == (type == ElementType::kF16 ? base::F32ToF16(v) : base::F32ToBf16(v));
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// One (op, size) measurement.  The three functions run one iteration, fill inputs, verify.
struct Case {
  std::function<Status(int64_t)> run;
  std::function<void(int64_t)> fill;
  std::function<int64_t(int64_t)> verify;
  double time_scale = 1.0;  // sendrecv: a round trip is two one-way messages
};

class Runner {
 public:
  Runner(Group& g, const BenchOptions& o)
      : g_(g),
        o_(o),
        data_(std::max<int64_t>(o.max_bytes, 64)),
        out_(std::max<int64_t>(o.max_bytes, 64)) {}

  StatusOr<BenchRow> Measure(const std::string& op, int64_t bytes) {
    LOOM_ASSIGN_OR_RETURN(Case c, MakeCase(op, &bytes));
    BenchRow row;
    row.op = op;
    row.bytes = bytes;
    row.checked = o_.check;
    for (int64_t it = 0; it < o_.warmup; ++it) {
      if (o_.check) c.fill(it);
      LOOM_RETURN_IF_ERROR(c.run(it));
    }
    int64_t iters = o_.iters;
    if (iters <= 0) {
      // Rank 0 sizes the run from a few timed iterations; everyone uses its count.
      const int64_t t0 = NowNs();
      for (int64_t it = 0; it < 3; ++it) LOOM_RETURN_IF_ERROR(c.run(it));
      const double per = std::max<double>(static_cast<double>(NowNs() - t0) / 3.0, 1.0);
      iters = std::clamp<int64_t>(static_cast<int64_t>(o_.target_seconds * 1e9 / per), 5, 20000);
      LOOM_RETURN_IF_ERROR(g_.Broadcast(&iters, sizeof(iters), 0));
    }
    times_.assign(static_cast<size_t>(iters), 0.0);
    int64_t errors = 0;
    LOOM_RETURN_IF_ERROR(g_.Barrier());
    for (int64_t it = 0; it < iters; ++it) {
      if (o_.check) c.fill(it);
      const int64_t t0 = NowNs();
      LOOM_RETURN_IF_ERROR(c.run(it));
      times_[static_cast<size_t>(it)] = static_cast<double>(NowNs() - t0) * 1e-3 * c.time_scale;
      if (o_.check) errors += c.verify(it);
    }
    // Every rank's median and percentiles; the row reports the slowest rank.
    double mine[4] = {Percentile(times_, 0.5), Percentile(times_, 0.1), Percentile(times_, 0.9),
                      static_cast<double>(errors)};
    std::vector<double> all(4 * static_cast<size_t>(g_.size()));
    LOOM_RETURN_IF_ERROR(g_.AllGather(mine, all.data(), sizeof(mine)));
    for (int r = 0; r < g_.size(); ++r) {
      row.median_us = std::max(row.median_us, all[4 * r]);
      row.p10_us = std::max(row.p10_us, all[4 * r + 1]);
      row.p90_us = std::max(row.p90_us, all[4 * r + 2]);
      row.errors += static_cast<int64_t>(all[4 * r + 3]);
    }
    row.iters = iters;
    const double n = g_.size();
    if (row.median_us > 0) row.algbw_gbs = static_cast<double>(bytes) / (row.median_us * 1e3);
    row.busbw_gbs = row.algbw_gbs;
    if (op == "allreduce") row.busbw_gbs = row.algbw_gbs * 2 * (n - 1) / n;
    if (op == "allgather") row.busbw_gbs = row.algbw_gbs * (n - 1) / n;
    return row;
  }

 private:
  StatusOr<Case> MakeCase(const std::string& op, int64_t* bytes) {
    const int n = g_.size();
    const int r = g_.rank();
    std::byte* d = data_.data();
    Case c;
    if (op == "allreduce") {
      const ElementType type = o_.dtype;
      const int64_t es = ElementSize(type);
      const int64_t count = *bytes / es;
      *bytes = count * es;
      std::memset(d, 0, static_cast<size_t>(*bytes));
      c.run = [this, d, count, type](int64_t) { return g_.AllReduceSum(d, count, type); };
      c.fill = [d, count, type, r](int64_t it) {
        for (int64_t i = 0; i < count; ++i) StoreValue(d, i, type, float(Pattern(i, r, it)));
      };
      c.verify = [d, count, type, n](int64_t it) {
        int64_t bad = 0;
        for (int64_t i = 0; i < count; ++i) {
          int32_t sum = 0;
          for (int q = 0; q < n; ++q) sum += Pattern(i, q, it);
          bad += SameValue(d, i, type, float(sum)) ? 0 : 1;
        }
        return bad;
      };
    } else if (op == "allgather") {
      const int64_t piece = *bytes / n;
      *bytes = piece * n;
      std::byte* out = out_.data();
      std::byte* mine = out + r * piece;
      c.run = [this, mine, out, piece](int64_t) { return g_.AllGather(mine, out, piece); };
      c.fill = [mine, piece, r, out, n](int64_t it) {
        std::memset(out, 0xEE, static_cast<size_t>(piece * n));
        for (int64_t j = 0; j < piece; ++j) mine[j] = std::byte{BytePattern(j, r, it)};
      };
      c.verify = [out, piece, n](int64_t it) {
        int64_t bad = 0;
        for (int q = 0; q < n; ++q) {
          for (int64_t j = 0; j < piece; ++j) {
            bad += out[q * piece + j] == std::byte{BytePattern(j, q, it)} ? 0 : 1;
          }
        }
        return bad;
      };
    } else if (op == "broadcast") {
      const int64_t b = *bytes;
      const bool check = o_.check;
      auto root_of = [n, check](int64_t it) { return check ? static_cast<int>(it % n) : 0; };
      c.run = [this, d, b, root_of](int64_t it) { return g_.Broadcast(d, b, root_of(it)); };
      c.fill = [d, b, r, root_of](int64_t it) {
        const int root = root_of(it);
        for (int64_t j = 0; j < b; ++j) {
          d[j] = r == root ? std::byte{BytePattern(j, root, it)} : std::byte{0xEE};
        }
      };
      c.verify = [d, b, root_of](int64_t it) {
        int64_t bad = 0;
        for (int64_t j = 0; j < b; ++j) {
          bad += d[j] == std::byte{BytePattern(j, root_of(it), it)} ? 0 : 1;
        }
        return bad;
      };
    } else if (op == "sendrecv") {
      if (n < 2) return FailedPreconditionError("comm-bench: sendrecv needs two ranks");
      const int64_t b = *bytes;
      c.time_scale = 0.5;
      c.run = [this, d, b, r](int64_t it) -> Status {
        if (r == 0) {
          LOOM_RETURN_IF_ERROR(g_.Send(d, b, 1, 0));
          return g_.Recv(d, b, 1, 0);
        }
        if (r == 1) {
          LOOM_RETURN_IF_ERROR(g_.Recv(d, b, 0, 0));
          return g_.Send(d, b, 0, 0);
        }
        return OkStatus();
      };
      c.fill = [d, b, r](int64_t it) {
        if (r == 0) {
          for (int64_t j = 0; j < b; ++j) d[j] = std::byte{BytePattern(j, 0, it)};
        }
      };
      c.verify = [d, b, r](int64_t it) {
        int64_t bad = 0;
        if (r > 1) return bad;
        for (int64_t j = 0; j < b; ++j) bad += d[j] == std::byte{BytePattern(j, 0, it)} ? 0 : 1;
        return bad;
      };
    } else if (op == "barrier") {
      *bytes = 0;
      c.run = [this](int64_t) { return g_.Barrier(); };
      c.fill = [](int64_t) {};
      c.verify = [](int64_t) { return int64_t{0}; };
    } else {
      return InvalidArgumentError("comm-bench: unknown op '", op, "'");
    }
    return c;
  }

  Group& g_;
  const BenchOptions& o_;
  base::AlignedBuffer<std::byte> data_;  // (max_bytes) the operation's buffer
  base::AlignedBuffer<std::byte> out_;   // (max_bytes) all-gather output
  std::vector<double> times_;            // (iters) microseconds
};

}  // namespace

StatusOr<std::vector<BenchRow>> RunCommBenchmark(
    Group& group, const BenchOptions& options, const std::function<void(const BenchRow&)>& on_row) {
  if (options.min_bytes < 1 || options.max_bytes < options.min_bytes || options.size_factor < 2 ||
      options.max_bytes > (int64_t{1} << 34)) {
    return InvalidArgumentError("comm-bench: sizes ", options.min_bytes, "..", options.max_bytes,
                                " x", options.size_factor, " are invalid");
  }
  Runner runner(group, options);
  std::vector<BenchRow> rows;
  for (const std::string& op : options.ops) {
    if (op == "sendrecv" && group.size() < 2) continue;
    for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes;
         bytes *= options.size_factor) {
      auto row = runner.Measure(op, bytes);
      if (!row.ok()) return row.status().WithContext(StrCat("comm-bench: ", op, " ", bytes, " B"));
      if (on_row) on_row(*row);
      rows.push_back(*row);
      if (op == "barrier") break;
    }
  }
  return rows;
}

std::string BenchTableHeader() {
  char line[160];
  std::snprintf(line, sizeof(line), "%-10s %11s %7s %10s %10s %10s %11s %11s %8s", "op", "bytes",
                "iters", "median_us", "p10_us", "p90_us", "algbw_GB/s", "busbw_GB/s", "check");
  return line;
}

std::string BenchTableRow(const BenchRow& row) {
  const std::string check =
      !row.checked ? "-" : (row.errors == 0 ? "ok" : StrCat("FAIL:", row.errors));
  char line[200];
  std::snprintf(line, sizeof(line), "%-10s %11lld %7lld %10.2f %10.2f %10.2f %11.3f %11.3f %8s",
                row.op.c_str(), static_cast<long long>(row.bytes),
                static_cast<long long>(row.iters), row.median_us, row.p10_us, row.p90_us,
                row.algbw_gbs, row.busbw_gbs, check.c_str());
  return line;
}

Status ParseBenchOps(const std::string& text, std::vector<std::string>* ops) {
  ops->clear();
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string op = text.substr(start, comma - start);
    if (op != "allreduce" && op != "allgather" && op != "broadcast" && op != "sendrecv" &&
        op != "barrier") {
      return InvalidArgumentError("comm-bench: unknown op '", op,
                                  "' (use allreduce, allgather, broadcast, sendrecv, barrier)");
    }
    ops->push_back(op);
    start = comma + 1;
  }
  return OkStatus();
}

StatusOr<ElementType> ParseElementType(const std::string& text) {
  if (text == "f32") return ElementType::kF32;
  if (text == "f16") return ElementType::kF16;
  if (text == "bf16") return ElementType::kBF16;
  return InvalidArgumentError("comm: element type '", text, "' is not f32, f16 or bf16");
}

}  // namespace loom::comm
