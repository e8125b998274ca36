#include "loom/comm/split.h"

#include <algorithm>

namespace loom::comm {

StatusOr<SplitResult> ComputeSplit(std::span<const SplitEntry> entries, int my_rank) {
  const int n = static_cast<int>(entries.size());
  if (my_rank < 0 || my_rank >= n) {
    return InvalidArgumentError("split: rank ", my_rank, " outside a group of ", n);
  }
  for (int r = 0; r < n; ++r) {
    if (entries[r].color < 0 && entries[r].color != kNoColor) {
      return InvalidArgumentError("split: rank ", r, " passed color ", entries[r].color,
                                  " (colors are >= 0, or kNoColor)");
    }
  }
  SplitResult result;
  const int32_t color = entries[my_rank].color;
  if (color == kNoColor) return result;
  for (int r = 0; r < n; ++r) {
    if (entries[r].color == color) result.members.push_back(r);
  }
  std::stable_sort(result.members.begin(), result.members.end(), [&](int a, int b) {
    if (entries[a].key != entries[b].key) return entries[a].key < entries[b].key;
    return a < b;
  });
  for (size_t i = 0; i < result.members.size(); ++i) {
    if (result.members[i] == my_rank) result.new_rank = static_cast<int>(i);
  }
  return result;
}

StatusOr<SplitResult> ExchangeSplit(Group& parent, const SplitEntry& mine,
                                    std::vector<SplitEntry>* all) {
  if (mine.color < 0 && mine.color != kNoColor) {
    return InvalidArgumentError("split: color ", mine.color, " is negative (use kNoColor)");
  }
  all->assign(static_cast<size_t>(parent.size()), SplitEntry{});
  LOOM_RETURN_IF_ERROR(parent.AllGather(&mine, all->data(), sizeof(SplitEntry)));
  return ComputeSplit(*all, parent.rank());
}

std::string SubGroupId(std::string_view parent_id, uint64_t split_index, int color) {
  return StrCat(parent_id, "/split", split_index, ".", color);
}

}  // namespace loom::comm
