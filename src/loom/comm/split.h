// The backend-independent half of Group::Split: every rank contributes (color, key) through an
// all-gather of the parent group, and each derives the members and its new rank from the table.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/comm/group.h"

namespace loom::comm {

// One rank's contribution to a split, exchanged as fixed-width little-endian bytes.
struct SplitEntry {
  int32_t color = kNoColor;
  int32_t key = 0;
  int32_t port = 0;  // tcp: the port of the listener this rank opened for the new group
  int32_t reserved = 0;
};
static_assert(sizeof(SplitEntry) == 16);

struct SplitResult {
  std::vector<int> members;  // parent ranks in the new group, in new-rank order
  int new_rank = -1;         // -1 when `my_rank` passed kNoColor
};

// entries: (parent size) as gathered.  Validates colors (>= 0 or kNoColor).
StatusOr<SplitResult> ComputeSplit(std::span<const SplitEntry> entries, int my_rank);

// Gathers `mine` from every rank of `parent` and computes the split (checks color/key ranges).
StatusOr<SplitResult> ExchangeSplit(Group& parent, const SplitEntry& mine,
                                    std::vector<SplitEntry>* all);

// The id of a sub-group: unique per parent, split call and color.
std::string SubGroupId(std::string_view parent_id, uint64_t split_index, int color);

}  // namespace loom::comm
