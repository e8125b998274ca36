// Internal to hub_sim's --phase economy (hub_sim_economy.cc runs it, hub_sim_economy_report.cc
// reads the outcome back from the store and prints it): the machine classes, the models and the
// statistics both use.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hub_sim::economy {

inline constexpr double kGb = 1e9;
// --established: the streak of passed checks every node starts with (the rate's floor is reached
// after ~14), as in a network that has run for a while.
inline constexpr int64_t kEstablishedPasses = 20;

struct MachineClass {
  const char* name;
  const char* chip;
  double memory_gb, bandwidth_gbps, share;
};
inline constexpr MachineClass kClasses[] = {
    {"64 GB M4 Pro", "Apple M4 Pro", 64, 273, 0.5},
    {"128 GB M4 Max", "Apple M4 Max", 128, 546, 0.35},
    {"512 GB M3 Ultra", "Apple M3 Ultra", 512, 819, 0.15}};

struct EconomyModel {
  const char* name;
  double weight_gb;
  double prompt_price, completion_price;  // credits per million tokens
  double demand;                          // share of the requests
};
inline constexpr EconomyModel kModels[] = {{"sim/llama-8b", 5, 0.5, 1, 0.4},
                                           {"sim/qwen-32b", 20, 1.5, 3, 0.3},
                                           {"sim/llama-70b", 70, 4, 8, 0.2},
                                           {"sim/llama-405b", 240, 12, 25, 0.1}};

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

inline double Quantile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Runs a command, its stdout and stderr into *out; its exit status.
int RunCommand(const std::vector<std::string>& argv, std::string* out);

}  // namespace hub_sim::economy
