// A byte-level process group: the ranks of one distributed job and the collectives between them.
// The layer knows nothing of models or tensors; callers pass raw buffers with an element type where
// arithmetic is involved (all-reduce).  Backends (tcp/, shm/, mpi/, and later rdma/, nccl/) are
// folders that implement Group; CreateGroup() picks one by name from a registry.
//
// Contract shared by every backend:
//  - Collectives are called by every rank of the group in the same order with matching arguments
//    (same count and type for AllReduceSum, same byte count for AllGather/Broadcast, same root).
//    A mismatch that shows on the wire (op, size, type) is reported as an error, not a hang.
//  - Every wait has a deadline (GroupOptions::timeout_seconds).  When it runs out, or a peer dies,
//    or a message fails validation, the operation returns a non-OK Status, the group is "broken":
//    it releases its connections so that the other ranks notice promptly, and every later call
//    returns the same error.  A broken group cannot be repaired; create a new one.
//  - After AllReduceSum succeeds every rank holds bitwise identical values.
//  - A Group is used by one thread at a time (like a file handle); distinct groups (for example
//    the results of Split) may be used from different threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "loom/base/status.h"

namespace loom::comm {

// Element types that collectives can add.  Values are part of the wire format; do not renumber.
enum class ElementType : uint8_t {
  kF32 = 1,
  kF16 = 2,   // IEEE binary16, stored as uint16_t
  kBF16 = 3,  // bfloat16, stored as uint16_t
};

int64_t ElementSize(ElementType type);               // bytes per element
std::string_view ElementTypeName(ElementType type);  // "f32", "f16", "bf16"
bool IsValidElementType(uint8_t raw);

// Tags of point-to-point messages are in [0, kMaxTag] (the range every MPI guarantees).
inline constexpr int kMaxTag = 32767;
// Split() color that puts the calling rank in no sub-group (like MPI_UNDEFINED).
inline constexpr int kNoColor = -1;

class Group {
 public:
  virtual ~Group() = default;

  virtual int rank() const = 0;                  // 0 .. size()-1
  virtual int size() const = 0;                  // >= 1
  virtual std::string_view backend() const = 0;  // "tcp", "shm", "mpi", "self"

  // data: (count) elements of `type`, replaced in place by the element-wise sum over all ranks.
  // f16/bf16 inputs are accumulated in f32 where the algorithm allows and rounded to nearest even.
  virtual Status AllReduceSum(void* data, int64_t count, ElementType type) = 0;

  // in: (bytes) from this rank; out: (size(), bytes), rank r's bytes at offset r * bytes.
  // `in` may point into `out` at this rank's slot; otherwise the two must not overlap.
  virtual Status AllGather(const void* in, void* out, int64_t bytes) = 0;

  // data: (bytes); on return every rank holds root's bytes.
  virtual Status Broadcast(void* data, int64_t bytes, int root) = 0;

  // Point-to-point.  Messages from one sender with one tag arrive in the order they were sent;
  // Recv must name the exact byte count of the message (a different size is an error).  Send may
  // return before the receiver has called Recv (small messages are buffered), but large messages
  // need the receiver to make progress, as with MPI_Send.
  virtual Status Send(const void* data, int64_t bytes, int dst, int tag = 0) = 0;
  virtual Status Recv(void* data, int64_t bytes, int src, int tag = 0) = 0;

  // Returns once every rank has entered Barrier.
  virtual Status Barrier() = 0;

  // Collective: ranks that pass the same color >= 0 form a new group, ordered by (key, rank in
  // this group).  Ranks passing kNoColor take part in the exchange but get nullptr.  The new group
  // is independent of this one (own connections or shared-memory segment) and may outlive it.
  virtual StatusOr<std::unique_ptr<Group>> Split(int color, int key) = 0;
};

}  // namespace loom::comm
