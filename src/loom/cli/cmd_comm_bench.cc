// `loom comm-bench`: latency and bandwidth of every collective over message sizes, run under
// `loom launch` (or mpirun, which measures Open MPI's own collectives through the mpi backend).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/comm/benchmark.h"
#include "loom/comm/config.h"

namespace loom::cli {

namespace {

struct CommBenchFlags {
  std::string ops = "allreduce,allgather,broadcast,sendrecv,barrier";
  std::string dtype = "f32";
  std::string min_bytes = "64";
  std::string max_bytes = "64M";
  int64_t factor = 4;
  int64_t iters = 0;
  double seconds = 0.25;
  bool check = false;
  bool json = false;
};

int RunCommBench(const CommBenchFlags& f) {
  comm::BenchOptions o;
  Status parsed = comm::ParseBenchOps(f.ops, &o.ops);
  if (!parsed.ok()) return Fail("comm-bench", parsed);
  auto dtype = comm::ParseElementType(f.dtype);
  if (!dtype.ok()) return Fail("comm-bench", dtype.status());
  o.dtype = *dtype;
  auto min_bytes = comm::ParseByteSize(f.min_bytes);
  auto max_bytes = comm::ParseByteSize(f.max_bytes);
  if (!min_bytes.ok()) return Fail("comm-bench", min_bytes.status());
  if (!max_bytes.ok()) return Fail("comm-bench", max_bytes.status());
  o.min_bytes = *min_bytes;
  o.max_bytes = *max_bytes;
  o.size_factor = f.factor;
  o.iters = f.iters;
  o.target_seconds = f.seconds;
  o.check = f.check;

  auto config = comm::GroupConfigFromEnvironment();
  if (!config.ok()) return Fail("comm-bench", config.status());
  auto group = comm::CreateGroup(*config);
  if (!group.ok()) return Fail("comm-bench", group.status());
  comm::Group& g = **group;
  const bool printer = g.rank() == 0;
  if (printer) {
    if (g.size() == 1) {
      std::fprintf(stderr, "loom comm-bench: one rank only; start it under `loom launch -n N`\n");
    }
    const comm::LinkEmulation& link = config->options.link;
    std::string emulation = "none";
    if (link.enabled() && g.backend() == "tcp") {
      emulation = StrCat("one-way delay ", link.delay_us, " us, ",
                         link.gbps > 0 ? StrCat(link.gbps, " Gbit/s") : std::string("no cap"));
    }
    if (!f.json) {
      std::printf(
          "# loom comm-bench: backend %s, %d ranks, all-reduce type %s, check %s, "
          "link emulation: %s\n",
          std::string(g.backend()).c_str(), g.size(), f.dtype.c_str(), f.check ? "on" : "off",
          emulation.c_str());
      std::printf("%s\n", comm::BenchTableHeader().c_str());
      std::fflush(stdout);
    }
  }
  auto on_row = [&](const comm::BenchRow& row) {
    if (!printer) return;
    if (f.json) {
      nlohmann::json j = {{"backend", std::string(g.backend())},
                          {"ranks", g.size()},
                          {"op", row.op},
                          {"bytes", row.bytes},
                          {"iters", row.iters},
                          {"median_us", row.median_us},
                          {"p10_us", row.p10_us},
                          {"p90_us", row.p90_us},
                          {"algbw_gbs", row.algbw_gbs},
                          {"busbw_gbs", row.busbw_gbs}};
      if (row.checked) j["errors"] = row.errors;
      if (row.op == "allreduce") j["dtype"] = f.dtype;
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%s\n", comm::BenchTableRow(row).c_str());
    }
    std::fflush(stdout);
  };
  auto rows = comm::RunCommBenchmark(g, o, on_row);
  if (!rows.ok()) return Fail("comm-bench", rows.status());
  int64_t errors = 0;
  for (const comm::BenchRow& r : *rows) errors += r.errors;
  if (errors > 0) {
    if (printer)
      std::fprintf(stderr, "loom comm-bench: %lld wrong results\n", static_cast<long long>(errors));
    return 1;
  }
  return 0;
}

}  // namespace

void AddCommBenchCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand(
      "comm-bench",
      "measure collective latency and bandwidth (run it under `loom launch -n N`; under mpirun it "
      "measures Open MPI's own collectives)");
  auto f = std::make_shared<CommBenchFlags>();
  sub->add_option("--ops", f->ops,
                  "comma-separated: allreduce,allgather,broadcast,sendrecv,barrier");
  sub->add_option("--dtype", f->dtype, "all-reduce element type: f32, f16 or bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  sub->add_option("--min-bytes", f->min_bytes, "smallest message (e.g. 64, 16K)");
  sub->add_option("--max-bytes", f->max_bytes, "largest message (e.g. 64M)");
  sub->add_option("--factor", f->factor, "size step: each size is the previous times this")
      ->check(CLI::Range(2, 1024));
  sub->add_option("--iters", f->iters, "iterations per size (default: about --seconds worth)")
      ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  sub->add_option("--seconds", f->seconds, "target time per size when --iters is not given")
      ->check(CLI::Range(0.001, 3600.0));
  sub->add_flag("--check", f->check, "verify every result against a serial reference");
  sub->add_flag("--json", f->json, "one JSON object per row instead of the table");
  sub->callback([f, action] { *action = [f] { return RunCommBench(*f); }; });
}

}  // namespace loom::cli
