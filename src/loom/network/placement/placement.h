// Placement: which one target (a node, or a pod that serves as one target) runs a request, as a
// pure function of the hub's in-memory registry.  Every request goes WHOLE to one target.
//
// Place() looks at every target that holds the model and applies hard filters in this order,
// recording the first one that fails:
//   1. not excluded (it has not already failed this job);
//   2. online (a suspect or offline target gets no new work);
//   3. not draining, not paused;
//   4. running < max_concurrency;
//   5. memory: KV cache for prompt_tokens + max_tokens positions, plus the weights when not
//      loaded, fits mem_free_bytes x (1 - reserve).  A pod of R ranks splits both over its ranks,
//      so each rank needs ceil(weights / R) + ceil(kv / R) within (mem_free / R) x (1 - reserve);
//      a model too big for any one node but not for a pod's summed memory lands on the pod;
//   6. prompt_tokens + max_tokens <= the model's context.
// Each target that passes gets an estimated completion time and the lowest one wins:
//   cold_load_s = loaded ? 0 : cold_load_fixed_s + cold_load_s_per_gb x weight GB (whole weights)
//   effective   = decode_tps / (1 + running_slowdown x running)
//   queue_s     = (running + waiting) / max_concurrency x max_tokens / effective
//                 (the work ahead of us, spread over the target's slots: a simple estimate)
//   prefill_s   = prompt_tokens / prefill_tps
//   decode_s    = max_tokens / effective
// Speeds: the hub's own measurements when present.  Unmeasured, decode is estimated as
// unmeasured_efficiency x bandwidth / bytes read per token and prefill as 10x that.  Any decode
// speed is clamped to the sanity bound bandwidth / bytes read per token, where the bytes read per
// token are one rank's share of the weights (weight_bytes / ranks: every rank reads its share at
// once).  The bound ignores KV reads, so it is an upper bound; it would be too tight for a mixture-
// of-experts model, which reads only its active experts (ModelOffer does not say which are).
// Reserved slots go first: when any eligible target offers the model as a reserved slot, only
// reserved ones compete.  Totals within near_tie_fraction of the best are ties: the lower queue (running + waiting) wins,
// and among equal queues one is drawn at random.
//
// When nothing passes, the reason is "no_node_for_model" if no non-excluded target holds the
// model or none of them could ever run it (its context is too small, or it fails the memory rule
// while running nothing: with only mem_free known, a target that is running requests may free
// memory later), and "over_capacity" otherwise (some could, but all are busy, suspect, offline,
// draining, paused or full right now).
//
// Cost: one pass over the targets (a linear scan of each one's model list, with the next targets'
// lists prefetched), then work on at most kMaxCandidates kept candidates; the only allocations
// are two scratch vectors and the kept candidates' strings.  The pass is bound by memory latency
// (every model list and name is its own heap block), so a hub with a model -> targets index
// should call the overload that takes the holders' indices.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::network::placement {

// Suspect: heartbeat later than 15 s (no new work, streams continue); offline: later than 30 s.
enum class TargetState { kOnline, kSuspect, kOffline };

// One model on one target's disk (verified by hash).
struct ModelOffer {
  std::string name;
  int64_t weight_bytes = 0;        // bytes of the weights file(s)
  int64_t kv_bytes_per_token = 0;  // KV cache bytes per position, whole model (a pod splits it)
  int64_t context = 0;             // max positions
  bool loaded = false;             // warm in memory now
  double prefill_tps = 0;          // tokens/s measured BY THE HUB on this target; 0 = not yet
  double decode_tps = 0;           // tokens/s, single stream, measured by the hub; 0 = not yet
  bool reserved = false;           // a reserved slot of this target (it goes first)
};

// A node, or a pod (one node agent lending `ranks` local ranks as one target).
struct Target {
  std::string id;     // node id (a pod's leader is one node agent, so one id)
  int32_t ranks = 1;  // > 1: a pod of this many ranks
  TargetState state = TargetState::kOnline;
  bool draining = false, paused = false;
  int64_t mem_free_bytes = 0;  // free for lending, whole target (a pod: the sum over its ranks),
                               // NOT counting the models already loaded
  int32_t running = 0, waiting = 0, max_concurrency = 1;
  double mem_bandwidth_gbps = 0;   // GB/s (1e9 bytes/s) of ONE rank (a pod: its slowest rank),
                                   // measured by the node; 0 = unknown.  Used only for the sanity
                                   // bound and for unmeasured estimates.
  std::vector<ModelOffer> models;  // what it has on disk and whether loaded
};

struct Request {
  std::string model;
  int64_t prompt_tokens = 0;
  int64_t max_tokens = 0;
  std::vector<std::string> exclude;  // target ids that already failed this job
};

// Seconds; all zero for a rejected candidate (costs are estimated only for eligible ones).
struct Costs {
  double cold_load_s = 0, queue_s = 0, prefill_s = 0, decode_s = 0, total_s = 0;
};

struct Candidate {
  std::string target_id;
  bool eligible = false;
  std::string rejected;  // why not, e.g. "offline", "draining", "needs 5.2 GB, 3.1 GB free
                         // (after the 5% reserve)", "at concurrency 4/4",
                         // "excluded (failed this job)"; empty when eligible
  Costs costs;
  // The speeds the costs used (eligible candidates only), and where the decode speed came from:
  // "measured", "estimated" (from bandwidth), "clamped" (a measured speed above the bandwidth
  // bound) or "default" (nothing measured and no bandwidth known: Tuning::fallback_decode_tps).
  double prefill_tps = 0;
  double decode_tps = 0;  // effective: after the clamp and the running slowdown
  std::string speed_source;
};

inline constexpr int kMaxCandidates = 64;  // kept in a Decision

struct Decision {
  bool placed = false;
  std::string target_id;  // when placed
  std::string reason;     // when not placed: "no_node_for_model" or "over_capacity"
  std::string detail;     // one human sentence
  // Every target that holds the model, eligible or not, up to kMaxCandidates: the chosen one
  // first, then the other eligible ones by total, then rejects in registry order.
  std::vector<Candidate> candidates;
  int32_t holders = 0;   // targets holding the model (excluded ones too), kept or not
  int32_t eligible = 0;  // of those, how many passed every filter
};

// Defaults from NETWORK.md and Darkbloom's measurements.
struct Tuning {
  double cold_load_s_per_gb = 1.0;  // cold-load penalty per GB (1e9 bytes) of weights, plus
  double cold_load_fixed_s = 2.0;
  double running_slowdown = 0.27;         // effective decode = decode_tps / (1 + 0.27 x running)
  double memory_reserve_fraction = 0.05;  // keep 5% of a target's memory free
  double unmeasured_efficiency = 0.5;     // unmeasured decode: 0.5 x bandwidth / bytes per token;
                                          // unmeasured prefill: 10x that
  double near_tie_fraction = 0.02;   // totals within 2% are ties: lower queue wins, then random
  double fallback_decode_tps = 1.0;  // unmeasured and no bandwidth known (prefill: 10x)
};

// O(targets).  `random` draws among the near-tied targets with the lowest queue (pass a seeded
// std::mt19937_64 in tests); it is not touched when there is a single winner.
Decision Place(const Request& request, const std::vector<Target>& targets, const Tuning& tuning,
               std::mt19937_64& random);

// The same decision from a hub that keeps a model -> targets index: `holders` are the indices
// into `targets` of the targets that list request.model, each once, in registry order.  Only those
// targets are read, which is what makes a large fleet fast (the full scan above reads every
// target's model list).  Stale entries (out of range, or a target that no longer lists the model)
// are skipped, so a lagging index can only miss a target, never place on a wrong one.
Decision Place(const Request& request, const std::vector<Target>& targets,
               std::span<const int32_t> holders, const Tuning& tuning, std::mt19937_64& random);

// {"placed", "target_id", "reason", "detail", "holders", "eligible", "candidates": [{"target_id",
// "eligible", "rejected", "costs": {"cold_load_s", "queue_s", "prefill_s", "decode_s",
// "total_s"}, "prefill_tps", "decode_tps", "speed_source"}]}: every key always present.  For the
// admin endpoint (GET /v1/admin/decisions) and logs.
nlohmann::json DecisionToJson(const Decision& d);

}  // namespace loom::network::placement
