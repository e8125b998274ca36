// Vector operations of the transformer block (SIMD with scalar references in reference.h).
// All pointers are dense float arrays; sizes are element counts.
#pragma once

#include <cstdint>

namespace loom::kernels {

// out(n) = x(n) / sqrt(mean(x^2) + eps) * weight(n).  out may alias x.
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out);

// How RoPE pairs the dimensions of a head.
enum class RopeStyle : uint8_t {
  kInterleaved,  // pairs (x[2i], x[2i+1]) — GGUF llama, llama2.c
  kHalves,       // pairs (x[i], x[i + head_dim/2]) — Hugging Face, GPT-NeoX
};

// Rotates each of `n_heads` heads of `head_dim` values in x(n_heads, head_dim) in place; pair i of
// every head is rotated by the angle whose cos/sin are cos_sin[2i], cos_sin[2i+1] (head_dim/2
// pairs).
void Rope(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, RopeStyle style);

// x(n) = softmax(x), numerically stable (max subtracted).
void Softmax(float* x, int64_t n);

// out(n) = silu(gate(n)) * up(n), silu(g) = g / (1 + exp(-g)).  out may alias gate.
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// y(n) += x(n)
void Add(const float* x, int64_t n, float* y);

// parts[0](n) = the sum of parts[0..num_parts)(n), added as a balanced tree: pairs (0,1), (2,3),
// ... first, then pairs of those sums, and so on.  A sum of a whole subtree computed elsewhere
// (another rank's leaves, kernels/matmul.h) therefore enters the total exactly as it would here.
void SumTree(float* const* parts, int64_t num_parts, int64_t n);

// Returns sum(a(n) * b(n)).
float Dot(const float* a, const float* b, int64_t n);

// y(n) += alpha * x(n)
void Axpy(float alpha, const float* x, int64_t n, float* y);

// x(n) *= alpha
void Scale(float alpha, int64_t n, float* x);

// One query head attending over `len` cached positions:
//   scores(len) = softmax(scale * [dot(q, key p)]),  out(head_dim) = sum_p scores[p] * value p,
// where q(head_dim), and key p / value p are head_dim floats at keys + p * stride and
// values + p * stride (the KV cache interleaves heads).  scores is caller scratch; out must not
// alias the inputs.  One dispatch for the whole head: per-position Dot/Axpy calls cost more than
// their arithmetic at decode sizes.
void Attend(const float* q, const float* keys, const float* values, int64_t len, int64_t stride,
            int64_t head_dim, float scale, float* scores, float* out);

}  // namespace loom::kernels
