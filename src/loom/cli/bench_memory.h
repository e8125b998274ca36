// What `loom bench` reports about the weight pages a decode step streams, round by round: how fast
// the model's own weight memory reads (wherever the OS placed it) and how much of it huge pages
// back.  Beside the probe of a fresh buffer they tell a slow round that is the machine's
// (everything reads slower) from one that is Loom's (the weights' pages read slower than fresh ones).
#pragma once

#include <cstddef>
#include <span>

#include "loom/engine/loaded_model.h"

namespace loom::cli {

// The memory the decode loop reads its matrices from: the weight copy when there is one, else the
// model file's largest mapping.
std::span<const std::byte> WeightRegion(const engine::LoadedModel& m);

// Bytes/s of two passes over the weight region (~20 ms for 0.6 GB): run beside every round.
double MeasureWeightPagesBandwidth(const engine::LoadedModel& m, int threads);

// The share of the weight region backed by huge pages (reads /proc/self/smaps: once per run), or
// -1 where the OS does not say.
double WeightHugePageFraction(const engine::LoadedModel& m);

}  // namespace loom::cli
