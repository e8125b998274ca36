// Placement over a warm fleet: 10,000 registered targets (5% pods of 2-8 ranks, 8-512 GB free,
// 1-20 models each out of a catalogue of 50, random load and state), Place() for a random model,
// timed one decision at a time.  Prints p50/p99/max decision time in microseconds (the goal in
// NETWORK.md: p99 under 1 ms), the same for DecisionToJson, and the registry's memory per target
// (sizeof + the heap its vectors and strings hold, estimated from their capacities).  Both
// overloads are timed: the full scan, and the one given the hub's model -> holders index.
// Usage: placement_bench [--targets N] [--decisions N] [--seed S]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "loom/network/placement/placement.h"

namespace {

using loom::network::placement::Decision;
using loom::network::placement::DecisionToJson;
using loom::network::placement::ModelOffer;
using loom::network::placement::Place;
using loom::network::placement::Request;
using loom::network::placement::Target;
using loom::network::placement::TargetState;
using loom::network::placement::Tuning;

constexpr double kGb = 1e9;
constexpr int kCatalogue = 50;

// Heap bytes a string holds beyond its own object (none while it fits the small-string buffer).
size_t StringHeap(const std::string& s) {
  return s.capacity() > std::string().capacity() ? s.capacity() + 1 : 0;
}

size_t TargetBytes(const Target& t) {
  size_t bytes = sizeof(Target) + StringHeap(t.id) + t.models.capacity() * sizeof(ModelOffer);
  for (const ModelOffer& m : t.models) bytes += StringHeap(m.name);
  return bytes;
}

// This thread's CPU time (the wall clock also counts time other processes held the core).
double ThreadCpuUs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// Wall and CPU time of each call, in microseconds.
struct Timings {
  std::vector<double> wall_us, cpu_us;

  template <class F>
  auto Time(bool keep, F&& f) {
    const double c0 = ThreadCpuUs();
    const auto t0 = std::chrono::steady_clock::now();
    auto result = f();
    const auto t1 = std::chrono::steady_clock::now();
    const double c1 = ThreadCpuUs();
    if (keep) {
      wall_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      cpu_us.push_back(c1 - c0);
    }
    return result;
  }

  void Print(const char* what) const {
    std::printf("  %s wall p50 %7.1f us  p99 %7.1f us  |  cpu p50 %7.1f us  p99 %7.1f us\n", what,
                Percentile(wall_us, 0.50), Percentile(wall_us, 0.99), Percentile(cpu_us, 0.50),
                Percentile(cpu_us, 0.99));
  }
};

std::vector<ModelOffer> Catalogue(std::mt19937_64& rng) {
  std::vector<ModelOffer> models;
  std::uniform_real_distribution<double> log_weights(std::log(0.4), std::log(140.0));  // GB
  for (int i = 0; i < kCatalogue; ++i) {
    ModelOffer m;
    // Names shaped like a real catalogue's: organisation/family-size-variant:quantisation.
    static const char* const kFamilies[] = {"Qwen/Qwen2.5",      "meta-llama/Llama-3.1",
                                            "mistralai/Mistral", "google/gemma-2",
                                            "microsoft/Phi-3.5", "deepseek-ai/DeepSeek-R1-Distill"};
    static const char* const kSizes[] = {"0.5B", "1.5B", "3B", "7B", "8B", "14B", "32B", "70B"};
    static const char* const kVariants[] = {"Instruct", "Chat", "Coder-Instruct"};
    static const char* const kQuants[] = {"Q4_K_M", "Q8_0", "F16"};
    m.name = std::string(kFamilies[i % 6]) + "-" + kSizes[(i / 6) % 8] + "-" +
             kVariants[(i / 48 + i / 2) % 3] + "-GGUF:" + kQuants[i % 3];
    const double weights_gb = std::exp(log_weights(rng));
    m.weight_bytes = static_cast<int64_t>(weights_gb * kGb);
    m.kv_bytes_per_token = int64_t{16384} * (1 + static_cast<int64_t>(weights_gb));
    m.context = int64_t{4096} << (rng() % 6);  // 4k-128k
    models.push_back(m);
  }
  return models;
}

std::vector<Target> Fleet(int n, const std::vector<ModelOffer>& catalogue, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0, 1);
  std::uniform_real_distribution<double> log_mem(std::log(8.0), std::log(512.0));
  std::vector<Target> targets;
  targets.reserve(static_cast<size_t>(n));
  std::vector<int> order(kCatalogue);
  for (int i = 0; i < kCatalogue; ++i) order[static_cast<size_t>(i)] = i;
  for (int i = 0; i < n; ++i) {
    Target t;
    char id[40];
    std::snprintf(id, sizeof(id), "node-%016llx", static_cast<unsigned long long>(rng()));
    t.id = id;
    t.ranks = unit(rng) < 0.05 ? 2 + static_cast<int32_t>(rng() % 7) : 1;
    const double r = unit(rng);
    t.state = r < 0.95   ? TargetState::kOnline
              : r < 0.98 ? TargetState::kSuspect
                         : TargetState::kOffline;
    t.draining = unit(rng) < 0.02;
    t.paused = unit(rng) < 0.01;
    t.mem_free_bytes = static_cast<int64_t>(std::exp(log_mem(rng)) * kGb) * t.ranks;
    t.max_concurrency = 1 + static_cast<int32_t>(rng() % 8);
    t.running = static_cast<int32_t>(rng() % static_cast<uint64_t>(t.max_concurrency + 1));
    t.waiting = static_cast<int32_t>(rng() % 4);
    t.mem_bandwidth_gbps = 50 + unit(rng) * 3000;
    const int held = 1 + static_cast<int>(rng() % 20);
    std::shuffle(order.begin(), order.end(), rng);
    t.models.reserve(static_cast<size_t>(held));
    for (int k = 0; k < held; ++k) {
      ModelOffer m = catalogue[static_cast<size_t>(order[static_cast<size_t>(k)])];
      m.loaded = unit(rng) < 0.3;
      const double bound =
          t.mem_bandwidth_gbps * kGb * t.ranks / static_cast<double>(m.weight_bytes);
      if (unit(rng) < 0.7) {
        m.decode_tps = bound * (0.2 + 0.6 * unit(rng));
        m.prefill_tps = m.decode_tps * (5 + 20 * unit(rng));
      }
      t.models.push_back(std::move(m));
    }
    targets.push_back(std::move(t));
  }
  return targets;
}

}  // namespace

int main(int argc, char** argv) {
  int n_targets = 10000;
  int n_decisions = 20000;
  uint64_t seed = 42;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--targets") == 0)
      n_targets = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--decisions") == 0)
      n_decisions = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--seed") == 0)
      seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  if (n_targets < 1 || n_decisions < 1) {
    std::fprintf(stderr, "usage: placement_bench [--targets N>0] [--decisions N>0] [--seed S]\n");
    return 2;
  }

  std::mt19937_64 rng(seed);
  const std::vector<ModelOffer> catalogue = Catalogue(rng);
  const std::vector<Target> targets = Fleet(n_targets, catalogue, rng);
  size_t registry_bytes = 0;
  for (const Target& t : targets) registry_bytes += TargetBytes(t);

  // The hub's model -> holders index (registry order), for the second Place() overload.
  std::vector<std::vector<int32_t>> index(kCatalogue);
  for (size_t i = 0; i < targets.size(); ++i) {
    for (const ModelOffer& m : targets[i].models) {
      for (int k = 0; k < kCatalogue; ++k) {
        if (catalogue[static_cast<size_t>(k)].name == m.name)
          index[static_cast<size_t>(k)].push_back(static_cast<int32_t>(i));
      }
    }
  }

  const Tuning tuning;
  std::mt19937_64 tie_random(seed + 1);
  Timings scan, indexed, json;
  int64_t placed = 0, holders = 0, candidates = 0, same = 0;
  size_t json_keys = 0;
  const int warmup = std::min(n_decisions, 200);
  for (int i = -warmup; i < n_decisions; ++i) {
    Request request;
    const size_t model = rng() % kCatalogue;
    request.model = catalogue[model].name;
    request.prompt_tokens = 100 + static_cast<int64_t>(rng() % 4000);
    request.max_tokens = 100 + static_cast<int64_t>(rng() % 2000);
    if (rng() % 10 == 0) request.exclude.push_back(targets[rng() % targets.size()].id);
    const uint64_t tie_seed = tie_random();
    const bool keep = i >= 0;

    std::mt19937_64 r1(tie_seed);
    const Decision d = scan.Time(keep, [&] { return Place(request, targets, tuning, r1); });
    std::mt19937_64 r2(tie_seed);
    const Decision e =
        indexed.Time(keep, [&] { return Place(request, targets, index[model], tuning, r2); });
    const nlohmann::json j = json.Time(keep, [&] { return DecisionToJson(d); });
    if (!keep) continue;
    placed += d.placed;
    holders += d.holders;
    candidates += static_cast<int64_t>(d.candidates.size());
    same += d.target_id == e.target_id && d.candidates.size() == e.candidates.size();
    json_keys += j.size();
  }

  std::printf(
      "placement_bench: %d targets (%.1f MB registry, %.0f bytes per target), %d decisions\n",
      n_targets, static_cast<double>(registry_bytes) / 1e6,
      static_cast<double>(registry_bytes) / n_targets, n_decisions);
  std::printf(
      "  holders per model %.0f, candidates kept %.1f, placed %.1f%%, "
      "indexed == scan in %.1f%%\n",
      static_cast<double>(holders) / n_decisions, static_cast<double>(candidates) / n_decisions,
      100.0 * placed / n_decisions, 100.0 * same / n_decisions);
  scan.Print("Place(), full scan      ");
  indexed.Print("Place(), holder index   ");
  json.Print("DecisionToJson()        ");
  std::printf(
      "  (cpu: this thread's CPU time, which leaves out time the core spent on other "
      "processes)\n");
  return json_keys == 0 ? 1 : 0;  // keeps the JSON from being optimized away
}
