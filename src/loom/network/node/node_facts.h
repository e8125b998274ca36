// What a node agent knows about its machine and its models: memory, cores, SIMD, measured memory
// bandwidth; each model file's size, KV bytes per token, context and SHA-256 (cached by path,
// size and modification time, so a restart does not hash gigabytes again); the owner's schedule
// and whether the machine is busy with other work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/base/status.h"
#include "loom/network/protocol/frames.h"

namespace loom::network::node {

// One model the node may serve: where it is and what the hub needs to know about it.
struct LocalModel {
  std::string name;  // the name the network knows it by (file stem or pulled repo id)
  std::string path;  // what `loom serve -m` opens
  protocol::ModelInfo info;
  int tp = 1, pp = 1;  // how its pod of local ranks splits it (AgentOptions::ranks)
};

// Opens `spec` (a path or a pulled ORG/NAME), reads its shape and hashes its files; `hash_cache`
// is a JSON file the results are kept in ("" = none).  `ctx` caps the context the node serves.
StatusOr<LocalModel> DescribeModel(const std::string& spec, int64_t ctx,
                                   const std::string& hash_cache);

// Memory (limited by `max_memory_bytes` when > 0), cores, the SIMD target Highway chose, the OS,
// and the memory read bandwidth measured now (~0.3 s).
protocol::NodeFacts MeasureFacts(int64_t max_memory_bytes, int threads);

// The processor's name: /proc/cpuinfo's "model name" (Linux), sysctl machdep.cpu.brand_string
// (macOS); "" when neither says.  Trimmed, control characters dropped, at most
// protocol::kMaxLabelBytes bytes.
std::string ChipName();
// The first "model name" of a /proc/cpuinfo text, cleaned as ChipName says.
std::string ChipFromCpuinfo(const std::string& cpuinfo);

// `loom node --location LAT,LON` in decimal degrees, e.g. "52.5,13.4" (latitude in [-90, 90],
// longitude in [-180, 180]).
StatusOr<protocol::Location> ParseLocation(const std::string& text);

// Lending hours: "HH:MM-HH:MM[,HH:MM-HH:MM...]" in local time; a range may wrap midnight.
// Empty = always.
struct Schedule {
  std::vector<std::pair<int, int>> ranges;  // minutes since midnight, [begin, end)
  bool Allows(int minute_of_day) const;
};
StatusOr<Schedule> ParseSchedule(const std::string& text);
int LocalMinuteOfDay();

// CPU time of the machine versus this process tree's, sampled between calls: the fraction of all
// cores that other programs kept busy since the last Sample().
class BusyMeter {
 public:
  double Sample(const std::vector<int>& our_pids);

 private:
  int64_t last_total_ = 0, last_busy_ = 0, last_ours_ = 0;
};

// Parses "8G", "512M", "1.5T", "1000000" into bytes.
StatusOr<int64_t> ParseBytes(const std::string& text);

}  // namespace loom::network::node
