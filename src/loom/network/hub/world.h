// The hub's public world page (GET /world, /world.json, /world/events; docs/network.md, "World
// page"): what a row shows about a machine, and the rules that keep it anonymous.  A row never
// carries the node's id, key, name, address or account: a machine is known by a pseudonym derived
// from its id, its memory is shown as a rounded tier and its declared location rounded to whole
// degrees.  Pure functions over plain structs; hub_world.cc fills them from the hub's state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/network/protocol/frames.h"

namespace loom::network::hub::world {

inline constexpr int64_t kJsonVersion = 1;  // "version" of /world.json and of the event stream
inline constexpr double kLocationStepDegrees = 1.0;
inline constexpr int64_t kReliabilityWindowMs = int64_t{30} * 86400 * 1000;

// "adjective-animal-NNNN" from a keyed hash of the node id: the same machine keeps its name across
// hub restarts, and the name (about 25 bits of a 256-bit hash) does not give back the id.
std::string Pseudonym(std::string_view node_id);

// The memory tier shown for `bytes`, in GB (GiB): the nearest (in ratio) of 1, 2, 4, 8, 12, 16,
// 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, then multiples of 1024;
// 0 below 0.5 GiB.
int64_t MemoryTierGb(int64_t bytes);

// Latitude and longitude rounded to whole multiples of kLocationStepDegrees (a cell ~111 km
// high): the hub keeps only this.  Latitude stays in [-90, 90], longitude in [-180, 180).
protocol::Location RoundLocation(const protocol::Location& exact);

enum class State { kOnline, kServing, kSuspect, kOffline };
std::string_view StateName(State s);

// One machine as the page shows it.
struct Machine {
  std::string name;                 // Pseudonym()
  State state = State::kOffline;
  std::string chip;                 // "" unknown
  int64_t memory_gb = -1;           // MemoryTierGb(); -1 unknown (offline, not seen this run)
  std::string slot = "spare";       // "spare", or "reserved" (an active reserved slot)
  std::vector<std::string> models;  // loaded now
  double tokens_per_s = 0;          // the hub's measured decode speed, its best model; 0 unmeasured
  std::optional<double> reliability;  // fraction of the window connected; nullopt unknown
  std::optional<double> verification_pass_rate;  // checks passed / checked; nullopt: none yet
  int64_t tokens_served = 0;        // last 30 days
  std::optional<protocol::Location> location;  // rounded
  std::optional<protocol::PodInfo> pod;         // a pod leader: its ranks
};
// The machine's JSON object, appended to `out` (written directly: the hub writes 10,000 of them
// per snapshot).  Fields: name, state, chip, memory_gb, slot, models, tokens_per_s (1 decimal),
// reliability_30d (3 decimals), verification_pass_rate, tokens_served_30d, location [lat, lon],
// pod {tp, pp, ranks}; unknowns are null.
void AppendMachineJson(const Machine& m, std::string* out);
std::string MachineJson(const Machine& m);

// Capacity against demand of one model.
struct ModelLine {
  std::string name;
  int64_t holders = 0;           // connected machines that offer it
  int64_t loaded = 0;            // ...that have it loaded
  double tokens_per_s = 0;       // sum of the hub-measured decode speeds of the loaded copies
  int64_t requests_last_hour = 0;
  int64_t queued = 0;
};

struct Totals {
  int64_t machines_online = 0;   // connected: online, serving or suspect
  int64_t machines_serving = 0;
  int64_t machines_offline = 0;  // enrolled, not connected
  int64_t memory_bytes = 0;      // lent by the connected machines
  int64_t tokens_per_day = 0;    // tokens served in the last 24 hours
};
nlohmann::json TotalsJson(const Totals& t, const std::vector<ModelLine>& models);

// Fraction of [now - window, now] connected, the window shortened to the node's enrolment; nullopt
// when the node was enrolled at or after now.
std::optional<double> Reliability(int64_t connected_ms, int64_t enrolled_ms, int64_t now_ms);

}  // namespace loom::network::hub::world
