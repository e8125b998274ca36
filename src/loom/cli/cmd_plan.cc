// `loom plan`: every feasible way to split a model over N ranks (pipeline, tensor, hybrid) with
// the prompt and generation speed the cost model predicts, and the plan it would pick.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "loom/base/sysinfo.h"
#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/cluster/cost_model.h"
#include "loom/cluster/profiles.h"
#include "loom/cluster/shape_model.h"
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
  std::string machine;  // profile name or file; empty: measure this machine
  std::string link;     // profile name or file; empty: --link-latency-us / --link-gbps
  std::string type;     // storage type for a config.json model
  bool json = false;
};

// The model to plan for.  Measuring this machine needs the weights (OpenModel); with the speeds
// given (a profile, or --decode-gbs and --prompt-gflops) shapes are enough: a GGUF header or a
// config.json plans without the data (cluster::OpenShapeOnly).
StatusOr<std::unique_ptr<model::ModelFile>> OpenForPlan(const PlanOptions& o, bool need_weights) {
  if (!o.type.empty() && need_weights) {
    return InvalidArgumentError(
        "--type sizes a model from its config only; give --machine (or "
        "--decode-gbs and --prompt-gflops) too");
  }
  if (o.type.empty()) {
    auto file = model::OpenModel(o.model);
    if (file.ok()) return file;
    if (need_weights) {
      return InvalidArgumentError(file.status().message(),
                                  " (measuring this machine needs the weights; --machine NAME|FILE "
                                  "plans from a GGUF header or a config.json)");
    }
    auto shape = cluster::OpenShapeOnly(o.model, "");
    if (shape.ok()) return shape;
    return InvalidArgumentError(shape.status().message(),
                                " (opened as a model to run: ", file.status().message(), ")");
  }
  return cluster::OpenShapeOnly(o.model, o.type);
}

int Plan(const PlanOptions& o) {
  std::optional<cluster::MachineProfile> machine;
  std::optional<cluster::LinkProfile> link;
  if (!o.machine.empty()) {
    auto p = cluster::LoadMachineProfile(o.machine);
    if (!p.ok()) return Fail("plan", p.status());
    machine = std::move(*p);
  }
  if (!o.link.empty()) {
    auto p = cluster::LoadLinkProfile(o.link);
    if (!p.ok()) return Fail("plan", p.status());
    link = std::move(*p);
  }
  const bool measure = !machine && !(o.decode_gbs > 0 && o.prompt_gflops > 0);
  auto file = OpenForPlan(o, measure);
  if (!file.ok()) return Fail("plan", file.status());
  const model::ParameterCounts counts = model::CountParameters(**file);
  const int64_t total_bytes = (*file)->total_tensor_bytes();
  cluster::CostInputs in;
  in.ranks = o.ranks;
  in.prompt_tokens = o.prompt_tokens;
  in.chunk = o.chunk;
  in.context = o.context;
  in.link.latency_s = o.link_latency_us * 1e-6;
  in.link.bytes_per_s = o.link_gbps * 1e9 / 8;
  if (link) in.link = link->Facts();
  if (machine) {
    // Published numbers, no measuring; one rank per machine unless --ranks-per-host shares it.
    in.rank = machine->Facts();
    in.rank.memory_bytes /= o.ranks_per_host;
    if (o.ranks_per_host > 1) {
      in.rank.decode_bytes_per_s_shared = in.rank.decode_bytes_per_s / o.ranks_per_host;
    }
    if (o.decode_gbs > 0)
      in.rank.decode_bytes_per_s = in.rank.decode_bytes_per_s_shared = o.decode_gbs * 1e9;
    if (o.prompt_gflops > 0) in.rank.prompt_flops = o.prompt_gflops * 1e9;
  } else if (o.decode_gbs > 0 && o.prompt_gflops > 0) {
    in.rank.decode_bytes_per_s = o.decode_gbs * 1e9;
    in.rank.prompt_flops = o.prompt_gflops * 1e9;
  } else {
    std::fprintf(stderr, "plan: measuring this machine with the model's kernels...\n");
    auto facts = cluster::Calibrate(**file, o.ranks_per_host);
    if (!facts.ok()) return Fail("plan", facts.status());
    in.rank = *facts;
    if (o.decode_gbs > 0)
      in.rank.decode_bytes_per_s = in.rank.decode_bytes_per_s_shared = o.decode_gbs * 1e9;
    if (o.prompt_gflops > 0) in.rank.prompt_flops = o.prompt_gflops * 1e9;
  }
  if (!o.rank_memory.empty()) {
    auto bytes = comm::ParseByteSize(o.rank_memory);
    if (!bytes.ok()) return Fail("plan", bytes.status());
    in.rank.memory_bytes = *bytes;
  } else if (!machine) {
    in.rank.memory_bytes = base::ReadMemoryInfo().available_bytes / o.ranks_per_host;
  }
  const double link_latency_us = in.link.latency_s * 1e6;
  const double link_gbps = in.link.bytes_per_s * 8 / 1e9;
  const std::vector<cluster::Prediction> all = cluster::PredictAll(**file, in);
  const cluster::Prediction* best = cluster::PickBest(all);

  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["ranks"] = o.ranks;
    j["link"] = {{"latency_us", link_latency_us}, {"gbps", link_gbps}};
    if (link) j["link"]["profile"] = link->name;
    if (machine) j["machine"] = machine->name;
    j["format"] = (*file)->format;
    j["total_bytes"] = total_bytes;
    j["active_bytes_per_token"] = counts.active_bytes_per_token;
    j["total_parameters"] = counts.total;
    j["active_parameters"] = counts.active;
    j["rank"] = {{"memory_bytes", in.rank.memory_bytes},
                 {"decode_bytes_per_s", in.rank.decode_bytes_per_s},
                 {"decode_bytes_per_s_shared", in.rank.decode_bytes_per_s_shared},
                 {"prompt_flops", in.rank.prompt_flops}};
    for (const auto& p : all) {
      nlohmann::json e = {{"tp", p.tp}, {"ep", p.ep}, {"pp", p.pp}, {"feasible", p.feasible}};
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
    if (best != nullptr) j["pick"] = {{"tp", best->tp}, {"ep", best->ep}, {"pp", best->pp}};
    std::printf("%s\n", j.dump().c_str());
    return best != nullptr ? 0 : 1;
  }
  std::printf("model %s, up to %d ranks; link %.0f us one-way, %.1f Gbit/s%s%s\n", o.model.c_str(),
              o.ranks, link_latency_us, link_gbps, link ? " (profile " : "",
              link ? (link->name + ")").c_str() : "");
  std::printf(
      "weights %.2f GiB in all (%.1fB parameters); a token reads %.2f GiB (%.1fB "
      "active)%s\n",
      static_cast<double>(total_bytes) / (1 << 30), static_cast<double>(counts.total) / 1e9,
      static_cast<double>(counts.active_bytes_per_token) / (1 << 30),
      static_cast<double>(counts.active) / 1e9,
      (*file)->format == "config"        ? "; sized from config.json, no weights"
      : (*file)->format == "gguf-header" ? "; from the GGUF header, no weights"
                                         : "");
  if (machine) {
    std::printf("machine profile %s: %.0f GB/s x %.2f efficiency\n", machine->name.c_str(),
                machine->memory_bytes_per_s / 1e9, machine->decode_efficiency);
  }
  std::printf(
      "per rank: decode %.1f GB/s (%.1f GB/s with %d on a host), prompt %.0f GFLOP/s, "
      "memory %.1f GiB\n\n",
      in.rank.decode_bytes_per_s / 1e9,
      (in.rank.decode_bytes_per_s_shared > 0 ? in.rank.decode_bytes_per_s_shared
                                             : in.rank.decode_bytes_per_s) /
          1e9,
      o.ranks_per_host, in.rank.prompt_flops / 1e9,
      static_cast<double>(in.rank.memory_bytes) / (1 << 30));
  std::printf("%-10s %12s %12s %11s %11s  %s\n", "plan", "gen tok/s", "prompt tok/s", "compute ms",
              "link ms", "layout");
  for (const auto& p : all) {
    const std::string name = p.Name();
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
  sub->add_option("-m,--model", o->model,
                  "Model file or directory; with --machine a GGUF header or a config.json is "
                  "enough")
      ->required();
  sub->add_option("--machine", o->machine,
                  "Machine profile (m3-ultra-512g, m4-max-128g, m4-pro-64g, or a JSON file) "
                  "instead of measuring this machine");
  sub->add_option("--link", o->link,
                  "Link profile (tb5-rdma, tb4-tcp, 10gbe, or a JSON file) instead of "
                  "--link-latency-us / --link-gbps");
  sub->add_option("--type", o->type,
                  "Storage type to size a config.json model for (f32, f16, bf16, q8_0, q4_0, "
                  "mlx4, mlx8; default: its quantization, else bf16)");
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
