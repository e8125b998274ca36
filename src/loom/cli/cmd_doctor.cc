// `loom doctor`: this machine's facts, its links to the other members of a cluster (when a
// cluster daemon runs), and plain advice for a model: whether it fits, which split is fastest on
// these links and why, what a faster link would change.  The logic is cluster/doctor.h; this
// gathers its inputs (measurements, the daemon's view, the cost model's rank speeds).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/base/sysinfo.h"
#include "loom/cli/cluster_common.h"
#include "loom/cli/commands.h"
#include "loom/cli/common.h"
#include "loom/cluster/cost_model.h"
#include "loom/cluster/daemon.h"
#include "loom/cluster/doctor.h"
#include "loom/cluster/machine.h"
#include "loom/comm/config.h"

namespace loom::cli {
namespace {

using json = nlohmann::json;

struct DoctorOptions {
  bool json = false;
  std::string chip;     // --chip: look this chip up instead of this machine's
  std::string control;  // the daemon's socket; "" = cluster::DefaultControlPath()
  std::string model;
  int64_t context = 0;
  std::string memory;  // memory this machine has for the model; "" = what is available
  int ranks = 2;
  double link_latency_us = 50;
  double link_gbps = 10;
  double fast_latency_us = cluster::kRdmaLatencyUs;
  double fast_gbps = cluster::kRdmaGbps;
  PlanSpeeds speeds;
};

// The cost model's inputs from `loom cluster status`'s plan (PlanFor) for the daemon's members.
cluster::CostInputs FromPlan(const json& plan) {
  cluster::CostInputs in;
  in.ranks = plan["ranks"].get<int>();
  const json& r = plan["rank"];
  in.rank.memory_bytes = r["memory_bytes"].get<int64_t>();
  in.rank.decode_bytes_per_s = r["decode_bytes_per_s"].get<double>();
  in.rank.decode_bytes_per_s_shared = r["decode_bytes_per_s_shared"].get<double>();
  in.rank.prompt_flops = r["prompt_flops"].get<double>();
  in.link.latency_s = plan["link"]["latency_us"].get<double>() * 1e-6;
  in.link.bytes_per_s = plan["link"]["gbytes_per_s"].get<double>() * 1e9;
  return in;
}

StatusOr<json> ModelAdvice(const DoctorOptions& o, const model::ModelFile& file,
                           const cluster::Facts& facts, const StatusOr<json>& view) {
  int64_t available = static_cast<int64_t>(facts.memory_available);
  if (!o.memory.empty()) {
    auto bytes = comm::ParseByteSize(o.memory);
    if (!bytes.ok()) return bytes.status().WithContext("--memory");
    available = *bytes;
  }
  cluster::ModelAdviceInputs in;
  in.model = o.model;
  in.available_here = available;
  in.fast.latency_s = o.fast_latency_us * 1e-6;
  in.fast.bytes_per_s = o.fast_gbps * 1e9 / 8;
  std::string fallback;
  if (view.ok() && (*view)["members"].size() >= 2) {
    auto plan = PlanFor(o.model, *view, o.speeds, o.json);
    if (plan.ok()) {
      in.cost = FromPlan(*plan);
      in.hypothetical = false;
    } else {
      fallback = "The cluster's members could not be planned over (" + plan.status().message() +
                 "), so the predictions are for machines like this one.";
    }
  }
  if (in.hypothetical) {
    in.cost.ranks = o.ranks;
    in.cost.link.latency_s = o.link_latency_us * 1e-6;
    in.cost.link.bytes_per_s = o.link_gbps * 1e9 / 8;
    if (o.speeds.decode_gbs > 0 && o.speeds.prompt_gflops > 0) {
      in.cost.rank.decode_bytes_per_s = o.speeds.decode_gbs * 1e9;
      in.cost.rank.prompt_flops = o.speeds.prompt_gflops * 1e9;
    } else {
      std::fprintf(stderr, "doctor: measuring this machine with the model's kernels...\n");
      LOOM_ASSIGN_OR_RETURN(in.cost.rank, cluster::Calibrate(file, 1));
      if (o.speeds.decode_gbs > 0) {
        in.cost.rank.decode_bytes_per_s = in.cost.rank.decode_bytes_per_s_shared =
            o.speeds.decode_gbs * 1e9;
      }
      if (o.speeds.prompt_gflops > 0) in.cost.rank.prompt_flops = o.speeds.prompt_gflops * 1e9;
    }
    in.cost.rank.memory_bytes = available;
  }
  in.cost.context = o.context;
  LOOM_ASSIGN_OR_RETURN(json section, cluster::ModelSection(file, in));
  if (!fallback.empty()) section["advice"].insert(section["advice"].begin(), fallback);
  return section;
}

int Doctor(const DoctorOptions& o) {
  // A model that cannot be read fails before anything is measured.
  std::unique_ptr<model::ModelFile> file;
  if (!o.model.empty()) {
    auto opened = model::OpenModel(o.model);
    if (!opened.ok()) return Fail("doctor", opened.status());
    file = std::move(*opened);
  }
  if (!o.json) std::fprintf(stderr, "doctor: measuring this machine...\n");
  const cluster::Facts facts = cluster::MeasureMachine();
  const double all_cores =
      base::MeasureReadBandwidth(static_cast<int>(facts.cores), int64_t{256} << 20, 3);
  json machine = cluster::MachineSection(facts, all_cores > 0 ? all_cores : 0);

  const std::string chip_name = o.chip.empty() ? cluster::ThisChipName(facts.cpu) : o.chip;
  json chip;
  if (!o.chip.empty() || cluster::IsAppleName(chip_name)) {
    chip = cluster::ChipSection(cluster::LookupAppleChip(chip_name), !o.chip.empty(),
                                cluster::MacOsFromUname(facts.os));
  }

  const std::string control = o.control.empty() ? cluster::DefaultControlPath() : o.control;
  const StatusOr<json> view = cluster::QueryDaemon(control, 2);
  json links = cluster::ClusterSection(view, control);

  json model;
  if (file != nullptr) {
    auto section = ModelAdvice(o, *file, facts, view);
    if (!section.ok()) return Fail("doctor", section.status());
    model = std::move(*section);
  }
  const json report = cluster::DoctorReport(std::move(machine), std::move(chip), std::move(links),
                                            std::move(model));
  if (o.json) {
    std::printf("%s\n", report.dump().c_str());
  } else {
    std::printf("%s", cluster::DoctorText(report).c_str());
  }
  return 0;
}

}  // namespace

void AddDoctorCommand(CLI::App& app, Action* action) {
  auto o = std::make_shared<DoctorOptions>();
  CLI::App* sub = app.add_subcommand(
      "doctor",
      "This machine's facts, its measured links to cluster members, and advice for a model: "
      "does it fit, which split is fastest here and why, what a faster link would change");
  sub->add_flag("--json", o->json, "Print one JSON object (version 1)");
  sub->add_option("--chip", o->chip,
                  "Look up this Apple chip, e.g. \"Apple M4 Max\" (default: this machine's)");
  sub->add_option("--control", o->control,
                  "The cluster daemon's Unix socket (default as for `loom cluster join`)");
  sub->add_option("-m,--model", o->model, "Advise on this model file");
  sub->add_option("--ctx", o->context,
                  "KV-cache positions for the memory check (default: the "
                  "model's context)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  sub->add_option("--memory", o->memory,
                  "Memory this machine has for the model, e.g. 16G (default: what is available)");
  sub->add_option("--ranks", o->ranks,
                  "Without a cluster: predict for up to this many machines like this one")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  sub->add_option("--link-latency-us", o->link_latency_us,
                  "Without a cluster: their links' one-way latency, microseconds")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  sub->add_option("--link-gbps", o->link_gbps, "Without a cluster: their links' Gbit/s")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e5));
  sub->add_option("--fast-latency-us", o->fast_latency_us,
                  "The faster link to compare with: one-way latency (assumed RDMA over "
                  "Thunderbolt 5)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  sub->add_option("--fast-gbps", o->fast_gbps, "The faster link's Gbit/s (Thunderbolt 5's rate)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e5));
  sub->add_option("--decode-gbs", o->speeds.decode_gbs,
                  "With -m: weight GB/s of one rank's decode (default: measured here)")
      ->check(CLI::Range(0.0, 1e6));
  sub->add_option("--prompt-gflops", o->speeds.prompt_gflops,
                  "With -m: GFLOP/s of one rank's batched products (default: measured here)")
      ->check(CLI::Range(0.0, 1e9));
  sub->callback([o, action] { *action = [o] { return Doctor(*o); }; });
}

}  // namespace loom::cli
