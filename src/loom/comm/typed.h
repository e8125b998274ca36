// Typed conveniences over the byte-level Group: spans of trivially copyable values instead of
// pointers and byte counts.  f16 and bf16 values are both stored as uint16_t, so sums over them
// name the type explicitly (AllReduceSumF16 / AllReduceSumBf16).
//
//   std::vector<float> hidden(2048);
//   LOOM_RETURN_IF_ERROR(comm::AllReduceSum(group, std::span<float>(hidden)));
//   LOOM_RETURN_IF_ERROR(comm::SendValue(group, token_id, /*dst=*/0));
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>

#include "loom/base/status.h"
#include "loom/comm/group.h"

namespace loom::comm {

inline Status AllReduceSum(Group& g, std::span<float> data) {
  return g.AllReduceSum(data.data(), static_cast<int64_t>(data.size()), ElementType::kF32);
}
inline Status AllReduceSumF16(Group& g, std::span<uint16_t> data) {
  return g.AllReduceSum(data.data(), static_cast<int64_t>(data.size()), ElementType::kF16);
}
inline Status AllReduceSumBf16(Group& g, std::span<uint16_t> data) {
  return g.AllReduceSum(data.data(), static_cast<int64_t>(data.size()), ElementType::kBF16);
}

// out: (g.size() * in.size()) values, rank r's at [r * in.size(), (r + 1) * in.size()).
template <class T>
Status AllGather(Group& g, std::span<const T> in, std::span<T> out) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (out.size() != in.size() * static_cast<size_t>(g.size())) {
    return InvalidArgumentError("comm: all-gather of ", in.size(), " values per rank into ",
                                out.size(), " values (need ", in.size() * g.size(), ")");
  }
  return g.AllGather(in.data(), out.data(), static_cast<int64_t>(in.size_bytes()));
}

template <class T>
Status Broadcast(Group& g, std::span<T> data, int root) {
  static_assert(std::is_trivially_copyable_v<T>);
  return g.Broadcast(data.data(), static_cast<int64_t>(data.size_bytes()), root);
}

template <class T>
Status Send(Group& g, std::span<const T> data, int dst, int tag = 0) {
  static_assert(std::is_trivially_copyable_v<T>);
  return g.Send(data.data(), static_cast<int64_t>(data.size_bytes()), dst, tag);
}

template <class T>
Status Recv(Group& g, std::span<T> data, int src, int tag = 0) {
  static_assert(std::is_trivially_copyable_v<T>);
  return g.Recv(data.data(), static_cast<int64_t>(data.size_bytes()), src, tag);
}

// One value (a token id, a flag).
template <class T>
Status SendValue(Group& g, const T& value, int dst, int tag = 0) {
  static_assert(std::is_trivially_copyable_v<T>);
  return g.Send(&value, sizeof(T), dst, tag);
}

template <class T>
StatusOr<T> RecvValue(Group& g, int src, int tag = 0) {
  static_assert(std::is_trivially_copyable_v<T>);
  T value{};
  LOOM_RETURN_IF_ERROR(g.Recv(&value, sizeof(T), src, tag));
  return value;
}

template <class T>
StatusOr<T> BroadcastValue(Group& g, T value, int root) {
  static_assert(std::is_trivially_copyable_v<T>);
  LOOM_RETURN_IF_ERROR(g.Broadcast(&value, sizeof(T), root));
  return value;
}

}  // namespace loom::comm
