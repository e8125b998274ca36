// Attention over a KV cache that stays fast as the context grows: one pass over the cached keys and
// values in blocks of positions with an online softmax, every row read once for all the query
// heads that share it (a grouped-query group, the rows of a prompt tile).  Float and 8-bit (Q8_0)
// cache rows; the scalar reference is reference::AttendMany.
#pragma once

#include <cstdint>
#include <string_view>

namespace loom::kernels {

// How the KV cache stores its rows.
enum class KvType : uint8_t {
  kF32,   // 4 bytes a value
  kQ8_0,  // int8 values with one f32 scale per block (KvBlock): 1.125 bytes a value at head_dim 32+
};
std::string_view KvTypeName(KvType type);  // "f32", "q8_0"

// Values per scale in a Q8_0 row: blocks of 32 within each head, or the whole head when it is
// narrower, so that no block spans two heads (tensor-parallel ranks hold whole heads).
inline int64_t KvBlock(int64_t head_dim) { return head_dim < 32 ? head_dim : 32; }
// Q8_0 rows need head_dim a multiple of 32 or under 32.
inline bool KvQ8Supports(int64_t head_dim) {
  return head_dim > 0 && (head_dim < 32 || head_dim % 32 == 0);
}

// Quantizes x(n) (n a multiple of block) to q(n) and d(n / block): per block d = absmax / 127 and
// q = round-to-nearest(x / d); a block of zeros has d = 0.
void QuantizeKvRow(const float* x, int64_t n, int64_t block, int8_t* q, float* d);

// Positions per online-softmax step and per key tile.  Fixed: it decides the order of the sums, so
// every query's result is the same whichever queries share a call.
inline constexpr int64_t kAttendKeyBlock = 64;

// One kv head's cached rows of one sequence.  Row-major: value i of position p is
// f32[p * stride + i] (kF32) or q[p * stride + i] * d[p * d_stride + i / block] (kQ8_0).
// Tiled (keys only, `tiled`): positions in tiles of kAttendKeyBlock stored transposed, so that
// scores are vectors over positions; with t = p / kAttendKeyBlock and j = p % kAttendKeyBlock,
// value i is f32[t * stride + i * kAttendKeyBlock + j] or q[same] * d[t * d_stride +
// (i / block) * kAttendKeyBlock + j].
struct KvHeadRows {
  KvType type = KvType::kF32;
  const float* f32 = nullptr;
  const int8_t* q = nullptr;
  const float* d = nullptr;
  int64_t stride = 0;    // values between positions (tiled: between tiles)
  int64_t d_stride = 0;  // scales between positions (tiled: between tiles)
  int64_t block = 32;    // values per scale: 32, or the whole head when it is narrower
  bool tiled = false;
};

// One query head of one position: it sees positions [0, len) (len >= 1) and writes out(head_dim).
struct AttendQuery {
  const float* q = nullptr;  // (head_dim)
  int64_t len = 0;
  float* out = nullptr;  // (head_dim); must not alias q or the rows
};

// Queries AttendMany takes together as one tile when they see the same positions of a block: each
// load of a key or value row serves them all.  A query's bits do not depend on it.
inline constexpr int64_t kAttendTileQueries = 4;

// Floats of scratch AttendMany needs for n_queries queries.
inline int64_t AttendScratchFloats(int64_t n_queries, int64_t head_dim) {
  return kAttendKeyBlock * (kAttendTileQueries + 2 * head_dim) + n_queries * (head_dim + 2);
}

// For each query: out = sum_p softmax_p(scale * q . key p) * value p over p in [0, len).  All
// queries read the same rows (keys and values may be the same rows, as latent attention's are);
// each block of rows is read from memory once for all of them.  A query's output depends only on
// its q, len and the rows, never on the other queries of the call: batched prompts, token-by-token
// decoding and any split over threads give the same bits.  scratch: AttendScratchFloats floats.
void AttendMany(const AttendQuery* queries, int64_t n_queries, const KvHeadRows& keys,
                const KvHeadRows& values, int64_t head_dim, float scale, float* scratch);

}  // namespace loom::kernels
