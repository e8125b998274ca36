// Machine and link profiles for the planner: what a machine or a link can do, from published
// specifications instead of measurements (`loom plan --machine m3-ultra-512g --link tb5-rdma`).
// A profile is a JSON object (share/profiles/*.json are the built-in ones, compiled into the
// binary); every number is an object {"value": ..., "source": "..."} that says where it comes from
// ("assumed: ..." where nothing is published):
//   machine: kind "machine", name, memory_bytes, memory_gb_per_s, decode_efficiency (0, 1],
//            prompt_tflops
//   link:    kind "link", name, latency_us, gbit_per_s
// A machine's decode speed is memory bandwidth x decode_efficiency: weights stream from memory
// once per token, and the efficiency is the share of that roofline the kernels reach.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/cluster/cost_model.h"

namespace loom::cluster {

struct MachineProfile {
  std::string name;
  std::string description;
  int64_t memory_bytes = 0;
  double memory_bytes_per_s = 0;  // published bandwidth
  double decode_efficiency = 0;   // share of memory_bytes_per_s a decode step reaches
  double prompt_flops = 0;
  std::vector<std::string> sources;  // "field: source", one per number

  // The facts the cost model takes (one rank per machine).
  RankFacts Facts() const;
};

struct LinkProfile {
  std::string name;
  std::string description;
  double latency_s = 0;    // one-way
  double bytes_per_s = 0;  // per direction
  std::vector<std::string> sources;

  LinkFacts Facts() const { return {latency_s, bytes_per_s}; }
};

// Parses and validates a profile's JSON text; `origin` (a name or a path) starts every error.
StatusOr<MachineProfile> ParseMachineProfile(std::string_view json, const std::string& origin);
StatusOr<LinkProfile> ParseLinkProfile(std::string_view json, const std::string& origin);

// A built-in profile by name, or else a file by path.  Unknown names list the built-in ones.
StatusOr<MachineProfile> LoadMachineProfile(const std::string& name_or_file);
StatusOr<LinkProfile> LoadLinkProfile(const std::string& name_or_file);

// Names of the built-in profiles of a kind ("machine" or "link"), sorted.
std::vector<std::string> BuiltinProfileNames(std::string_view kind);

}  // namespace loom::cluster
