// What `loom bench` reports about the weight pages a decode step streams, round by round: how fast
// the model's own weight memory reads (wherever the OS placed it) and how much of it huge pages
// back.  Beside the probe of a fresh buffer they tell a slow round that is the machine's
// (everything reads slower) from one that is Loom's (the weights' pages read slower than fresh ones).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "loom/engine/loaded_model.h"

namespace loom::cli {

struct WeightPages {
  double bytes_per_s = 0;        // reading the region, best of two passes
  int64_t bytes = 0;             // size of the region
  int64_t huge_page_bytes = -1;  // of it backed by huge pages; -1: the OS does not say
};

// The memory the decode loop reads its matrices from: the weight copy when there is one, else the
// model file's largest mapping.
std::span<const std::byte> WeightRegion(const engine::LoadedModel& m);

// Two passes over the weight region (~20 ms for 0.6 GB) and the huge-page count.
WeightPages MeasureWeightPages(const engine::LoadedModel& m, int threads);

}  // namespace loom::cli
