// Test-only helpers for the model tests: small GGUF and llama2.c files built in memory, byte
// patching for the bad-input tests, and a model file bound into a forward pass.  Included by
// *_test.cc files only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "loom/base/thread_pool.h"
#include "loom/kernels/dtype.h"
#include "loom/kernels/quantize.h"
#include "loom/model/gguf_writer.h"
#include "loom/model/model_file.h"
#include "loom/model/synth.h"
#include "loom/model/transformer.h"

namespace loom::model::testing {

// The value of element i of the tensor with declaration index t in TestGguf files.
inline float TestValue(int64_t t, int64_t i) {
  return static_cast<float>(((t * 131 + i * 7) % 97) - 48) / 64.0f;
}

struct TestModelSpec {
  int64_t dim = 32;
  int64_t ffn = 64;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t vocab = 300;  // >= 259 (the synthetic vocabulary has 259 fixed tokens)
  int64_t context = 128;
  kernels::DType type = kernels::DType::kF32;
  bool tied = false;
  bool tokenizer = true;
  uint32_t version = 3;
  int64_t alignment = 32;
  std::set<std::string> skip_keys;     // metadata keys to leave out
  std::set<std::string> skip_tensors;  // tensors to leave out
  std::function<void(GgufWriter&)> extra_metadata;
  std::function<void(GgufWriter&)> extra_tensors;  // declared after the model's; data is zeros
};

// Writes a small llama model as GGUF into memory.
inline std::vector<std::byte> TestGguf(const TestModelSpec& s) {
  GgufWriter w(s.version);
  if (s.alignment != 32) (void)w.SetAlignment(s.alignment);
  auto keep = [&](const char* key) { return s.skip_keys.count(key) == 0; };
  if (keep("general.architecture")) w.AddString("general.architecture", "llama");
  if (keep("general.name")) w.AddString("general.name", "test");
  if (keep("llama.context_length")) w.AddU32("llama.context_length", s.context);
  if (keep("llama.embedding_length")) w.AddU32("llama.embedding_length", s.dim);
  if (keep("llama.block_count")) w.AddU32("llama.block_count", s.layers);
  if (keep("llama.feed_forward_length")) w.AddU32("llama.feed_forward_length", s.ffn);
  if (keep("llama.attention.head_count")) w.AddU32("llama.attention.head_count", s.heads);
  if (keep("llama.attention.head_count_kv")) w.AddU32("llama.attention.head_count_kv", s.kv_heads);
  if (keep("llama.attention.layer_norm_rms_epsilon")) {
    w.AddF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  }
  if (keep("llama.rope.freq_base")) w.AddF32("llama.rope.freq_base", 10000.0f);
  if (s.tokenizer) {
    TokenizerSpec v = SynthVocab(s.vocab).value();
    w.AddString("tokenizer.ggml.model", "llama");
    w.AddStringArray("tokenizer.ggml.tokens", v.tokens);
    w.AddArray("tokenizer.ggml.scores", std::span<const float>(v.scores));
    w.AddArray("tokenizer.ggml.token_type", std::span<const int32_t>(v.token_types));
    if (keep("tokenizer.ggml.bos_token_id")) w.AddU32("tokenizer.ggml.bos_token_id", 1);
    if (keep("tokenizer.ggml.eos_token_id")) w.AddU32("tokenizer.ggml.eos_token_id", 2);
  }
  if (s.extra_metadata) s.extra_metadata(w);

  struct T {
    std::string name;
    kernels::DType type;
    std::vector<int64_t> shape;
  };
  const int64_t hd = s.dim / s.heads;
  std::vector<T> ts = {{"token_embd.weight", s.type, {s.vocab, s.dim}},
                       {"output_norm.weight", kernels::DType::kF32, {s.dim}}};
  if (!s.tied) ts.push_back({"output.weight", s.type, {s.vocab, s.dim}});
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    ts.push_back({p + "attn_norm.weight", kernels::DType::kF32, {s.dim}});
    ts.push_back({p + "attn_q.weight", s.type, {s.heads * hd, s.dim}});
    ts.push_back({p + "attn_k.weight", s.type, {s.kv_heads * hd, s.dim}});
    ts.push_back({p + "attn_v.weight", s.type, {s.kv_heads * hd, s.dim}});
    ts.push_back({p + "attn_output.weight", s.type, {s.dim, s.heads * hd}});
    ts.push_back({p + "ffn_norm.weight", kernels::DType::kF32, {s.dim}});
    ts.push_back({p + "ffn_gate.weight", s.type, {s.ffn, s.dim}});
    ts.push_back({p + "ffn_up.weight", s.type, {s.ffn, s.dim}});
    ts.push_back({p + "ffn_down.weight", s.type, {s.dim, s.ffn}});
  }
  std::erase_if(ts, [&](const T& t) { return s.skip_tensors.count(t.name) != 0; });
  for (const T& t : ts) (void)w.AddTensor(t.name, t.type, t.shape);
  if (s.extra_tensors) s.extra_tensors(w);

  std::vector<std::byte> out;
  (void)w.BeginMemory(&out);
  for (size_t i = 0; i < ts.size(); ++i) {
    const T& t = ts[i];
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j)
      x[static_cast<size_t>(j)] = TestValue(static_cast<int64_t>(i), j);
    std::vector<std::byte> q(static_cast<size_t>(w.tensor_size(i)));
    const int64_t cols = t.shape.back();
    const int64_t row_bytes = w.tensor_size(i) / (n / cols);
    for (int64_t r = 0; r < n / cols; ++r) {
      kernels::QuantizeRow(t.type, x.data() + r * cols, cols, q.data() + r * row_bytes);
    }
    (void)w.WriteTensorData(q);
  }
  for (size_t i = ts.size(); i < w.tensor_count(); ++i) {
    std::vector<std::byte> zeros(static_cast<size_t>(w.tensor_size(i)));
    (void)w.WriteTensorData(zeros);
  }
  (void)w.Finish();
  return out;
}

// Offset of the first occurrence of `needle` in `bytes` at or after `from`, or -1.
inline int64_t FindBytes(const std::vector<std::byte>& bytes, std::string_view needle,
                         int64_t from = 0) {
  const auto* p = reinterpret_cast<const char*>(bytes.data());
  const std::string_view hay(p, bytes.size());
  const size_t at = hay.find(needle, static_cast<size_t>(from));
  return at == std::string_view::npos ? -1 : static_cast<int64_t>(at);
}

template <class T>
void Poke(std::vector<std::byte>& bytes, int64_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}
template <class T>
T Peek(const std::vector<std::byte>& bytes, int64_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

// Offset of the tensor info fields of tensor `name` (just after its name): u32 n_dims, then ne[],
// u32 type, u64 offset.  The name is searched with its length prefix so that "output.weight" does
// not match inside "attn_output.weight".
inline int64_t TensorInfoFields(const std::vector<std::byte>& bytes, const std::string& name) {
  std::string needle(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(needle.data(), &len, 8);
  needle += name;
  const int64_t at = FindBytes(bytes, needle);
  return at < 0 ? -1 : at + static_cast<int64_t>(needle.size());
}

// Offset of the value of metadata key `key` (just after its u32 type).
inline int64_t MetadataValue(const std::vector<std::byte>& bytes, const std::string& key) {
  std::string needle(8, '\0');
  const uint64_t len = key.size();
  std::memcpy(needle.data(), &len, 8);
  needle += key;
  const int64_t at = FindBytes(bytes, needle);
  return at < 0 ? -1 : at + static_cast<int64_t>(needle.size()) + 4;
}

// A legacy (or, with v1 = true, "ak42" version 1) llama2.c checkpoint whose float at position i of
// the weights is i * 0.001 (so tests can tell where each tensor starts).
struct Llama2cSpec {
  int32_t dim = 16, hidden = 32, layers = 2, heads = 4, kv_heads = 2, vocab = 40, seq_len = 8;
  bool shared = true;
  bool v1 = false;
};

inline int64_t Llama2cFloats(const Llama2cSpec& s) {
  const int64_t hs = s.dim / s.heads;
  const int64_t kv = hs * s.kv_heads;
  int64_t n = int64_t{s.vocab} * s.dim + 2 * int64_t{s.layers} * s.dim +
              int64_t{s.layers} * (2 * s.dim * s.dim + 2 * kv * s.dim + 3 * s.dim * s.hidden) +
              s.dim;
  if (!s.v1) n += 2 * int64_t{s.seq_len} * (hs / 2);
  if (!s.shared) n += int64_t{s.vocab} * s.dim;
  return n;
}

inline std::vector<std::byte> TestLlama2c(const Llama2cSpec& s) {
  std::vector<std::byte> out;
  auto put = [&out](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  const int32_t vocab = s.v1 || s.shared ? s.vocab : -s.vocab;
  const int32_t header[7] = {s.dim, s.hidden, s.layers, s.heads, s.kv_heads, vocab, s.seq_len};
  if (s.v1) {
    const uint32_t magic = 0x616b3432;
    const int32_t version = 1;
    const uint8_t shared = s.shared ? 1 : 0;
    put(&magic, 4);
    put(&version, 4);
    put(header, sizeof(header));
    put(&shared, 1);
    out.resize(256, std::byte{0});
  } else {
    put(header, sizeof(header));
  }
  const int64_t n = Llama2cFloats(s);
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(i) * 0.001f;
    put(&v, 4);
  }
  return out;
}

// A peaked synthetic mixture of experts of the tiny shape, written into memory and opened.
struct SynthMoe {
  std::vector<std::byte> bytes;
  std::unique_ptr<ModelFile> file;  // null on failure, with `error` set
  std::string error;
};
inline SynthMoe MakeSynthMoe(SynthArch arch, kernels::DType type, int64_t experts, int64_t used,
                             bool mla_split = false) {
  SynthOptions o;
  o.shape = *FindSynthShape("tiny");
  o.type = type;
  o.arch = arch;
  o.n_experts = experts;
  o.n_experts_used = used;
  o.peaked = true;
  o.mla_split = mla_split;
  o.threads = 1;
  SynthMoe m;
  const Status s = WriteSynthModelToMemory(o, &m.bytes);
  if (!s.ok()) {
    m.error = s.ToString();
    return m;
  }
  auto f = OpenModelFromBytes(m.bytes, "synth.gguf");
  if (f.ok()) {
    m.file = std::move(*f);
  } else {
    m.error = f.status().ToString();
  }
  return m;
}

// A model file with its weights bound and a forward pass over them.  After a failure (reported as
// a test failure) the members from the failed step on are null.
struct Loaded {
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<TransformerWeights> weights;
  std::unique_ptr<Transformer> model;
};

inline Loaded Load(std::unique_ptr<ModelFile> file, base::ThreadPool& pool,
                   TransformerOptions options = {}) {
  Loaded l;
  l.file = std::move(file);
  auto w = BindWeights(*l.file);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return l;
  l.weights = std::make_unique<TransformerWeights>(std::move(*w));
  auto t = Transformer::Create(*l.weights, options, pool);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (t.ok()) l.model = std::move(*t);
  return l;
}

}  // namespace loom::model::testing
