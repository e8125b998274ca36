// What `loom bench` reports about the memory a decode step streams, round by round: the machine's
// read bandwidth right then (a fresh huge-page buffer), how fast the model's own weight pages read
// (wherever the OS placed them), and how much of the weight copy huge pages back.  Together they
// tell a slow round that is the machine's (everything reads slower) from one that is Loom's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "loom/engine/loaded_model.h"

namespace loom::cli {

struct MemoryState {
  double probe_bytes_per_s = 0;    // a fresh buffer, MeasureReadBandwidth
  double weights_bytes_per_s = 0;  // the weight copy (or the file's mapping) itself
  int64_t weight_bytes = 0;        // size of that region
  int64_t huge_page_bytes = -1;    // of it backed by huge pages; -1: the OS does not say
};

// The memory the decode loop reads its matrices from: the weight copy when there is one, else the
// model file's mappings (the largest).
std::span<const std::byte> WeightRegion(const engine::LoadedModel& m);

// ~0.2-0.5 s: a 512 MiB probe and two passes over the weight region.
MemoryState MeasureMemoryState(const engine::LoadedModel& m, int threads);

}  // namespace loom::cli
