// `loom plan`: every feasible way to split a model over N ranks (pipeline, tensor, hybrid) with
// the prompt and generation speed the cost model predicts, and the plan it would pick.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/base/sysinfo.h"
#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/cluster/cost_model.h"
#include "loom/comm/config.h"

namespace loom::cli {
namespace {

struct PlanOptions {
  std::string model;
  int ranks = 2;
  int ranks_per_host = 1;
  double link_latency_us = 50;
  double link_gbps = 10;
  std::string rank_memory;
  double decode_gbs = 0;
  double prompt_gflops = 0;
  int64_t prompt_tokens = 512;
  int64_t chunk = 256;
  int64_t context = 0;
  bool json = false;
};

int Plan(const PlanOptions& o) {
  auto file = model::OpenModel(o.model);
  if (!file.ok()) return Fail("plan", file.status());
  cluster::CostInputs in;
  in.ranks = o.ranks;
  in.prompt_tokens = o.prompt_tokens;
  in.chunk = o.chunk;
  in.context = o.context;
  in.link.latency_s = o.link_latency_us * 1e-6;
  in.link.bytes_per_s = o.link_gbps * 1e9 / 8;
  if (o.decode_gbs > 0 && o.prompt_gflops > 0) {
    in.rank.decode_bytes_per_s = o.decode_gbs * 1e9;
    in.rank.prompt_flops = o.prompt_gflops * 1e9;
  } else {
    std::fprintf(stderr, "plan: measuring this machine with the model's kernels...\n");
    auto facts = cluster::Calibrate(**file, o.ranks_per_host);
    if (!facts.ok()) return Fail("plan", facts.status());
    in.rank = *facts;
    if (o.decode_gbs > 0) in.rank.decode_bytes_per_s = in.rank.decode_bytes_per_s_shared = o.decode_gbs * 1e9;
    if (o.prompt_gflops > 0) in.rank.prompt_flops = o.prompt_gflops * 1e9;
  }
  if (!o.rank_memory.empty()) {
    auto bytes = comm::ParseByteSize(o.rank_memory);
    if (!bytes.ok()) return Fail("plan", bytes.status());
    in.rank.memory_bytes = *bytes;
  } else {
    in.rank.memory_bytes = base::ReadMemoryInfo().available_bytes / o.ranks_per_host;
  }
  const std::vector<cluster::Prediction> all = cluster::PredictAll(**file, in);
  const cluster::Prediction* best = cluster::PickBest(all);

  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["ranks"] = o.ranks;
    j["link"] = {{"latency_us", o.link_latency_us}, {"gbps", o.link_gbps}};
    j["rank"] = {{"memory_bytes", in.rank.memory_bytes},
                 {"decode_bytes_per_s", in.rank.decode_bytes_per_s},
                 {"decode_bytes_per_s_shared", in.rank.decode_bytes_per_s_shared},
                 {"prompt_flops", in.rank.prompt_flops}};
    for (const auto& p : all) {
      nlohmann::json e = {{"tp", p.tp}, {"pp", p.pp}, {"feasible", p.feasible}};
      if (p.feasible) {
        e["decode_tokens_per_s"] = p.decode_tokens_per_s;
        e["prompt_tokens_per_s"] = p.prompt_tokens_per_s;
        e["decode_compute_ms"] = p.decode_compute_s * 1e3;
        e["decode_link_ms"] = p.decode_link_s * 1e3;
        e["layout"] = p.plan.Describe();
      } else {
        e["why_not"] = p.why_not;
      }
      j["plans"].push_back(e);
    }
    if (best != nullptr) j["pick"] = {{"tp", best->tp}, {"pp", best->pp}};
    std::printf("%s\n", j.dump().c_str());
    return best != nullptr ? 0 : 1;
  }
  std::printf("model %s, up to %d ranks; link %.0f us one-way, %.1f Gbit/s\n", o.model.c_str(),
              o.ranks, o.link_latency_us, o.link_gbps);
  std::printf("per rank: decode %.1f GB/s (%.1f GB/s with %d on a host), prompt %.0f GFLOP/s, "
              "memory %.1f GiB\n\n",
              in.rank.decode_bytes_per_s / 1e9,
              (in.rank.decode_bytes_per_s_shared > 0 ? in.rank.decode_bytes_per_s_shared
                                                     : in.rank.decode_bytes_per_s) / 1e9,
              o.ranks_per_host, in.rank.prompt_flops / 1e9,
              static_cast<double>(in.rank.memory_bytes) / (1 << 30));
  std::printf("%-10s %12s %12s %11s %11s  %s\n", "plan", "gen tok/s", "prompt tok/s",
              "compute ms", "link ms", "layout");
  for (const auto& p : all) {
    const std::string name = "tp" + std::to_string(p.tp) + " pp" + std::to_string(p.pp);
    if (!p.feasible) {
      std::printf("%-10s %12s  %s\n", name.c_str(), "-", p.why_not.c_str());
      continue;
    }
    std::printf("%-10s %12.1f %12.1f %11.2f %11.2f  %s%s\n", name.c_str(), p.decode_tokens_per_s,
                p.prompt_tokens_per_s, p.decode_compute_s * 1e3, p.decode_link_s * 1e3,
                p.plan.Describe().c_str(), &p == best ? "   <- pick" : "");
  }
  if (best == nullptr) return Fail("plan", ResourceExhaustedError("no feasible plan"));
  return 0;
}

}  // namespace

void AddPlanCommand(CLI::App& app, Action* action) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Predict prompt and generation speed of every way to split a model over ranks");
  sub->add_option("-m,--model", o->model, "Model file")->required();
  sub->add_option("--ranks", o->ranks, "Ranks available (plans use up to this many)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  sub->add_option("--ranks-per-host", o->ranks_per_host,
                  "Ranks sharing one machine's memory bandwidth (1: a machine each)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  sub->add_option("--link-latency-us", o->link_latency_us, "One-way link latency, microseconds")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  sub->add_option("--link-gbps", o->link_gbps, "Link bandwidth, gigabits/s")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e5));
  sub->add_option("--rank-memory", o->rank_memory,
                  "Memory per rank, e.g. 16G (default: this machine's available memory)");
  sub->add_option("--decode-gbs", o->decode_gbs,
                  "Weight GB/s of one rank's matrix-vector products (default: measured here)");
  sub->add_option("--prompt-gflops", o->prompt_gflops,
                  "GFLOP/s of one rank's batched products (default: measured here)");
  sub->add_option("--prompt-tokens", o->prompt_tokens, "Prompt length for prompt speed")
      ->capture_default_str();
  sub->add_option("--chunk", o->chunk, "Prompt tokens per forward pass")->capture_default_str();
  sub->add_option("--ctx", o->context, "KV-cache positions for the memory check");
  sub->add_flag("--json", o->json, "Print one JSON object");
  sub->callback([o, action] { *action = [o] { return Plan(*o); }; });
}

}  // namespace loom::cli
