// Test-only helpers for the safetensors / Hugging Face / MLX tests: temporary directories, raw
// safetensors files, and small random Hugging Face model directories with their float weights kept
// for scalar reference computations.  Included by *_test.cc files only.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "loom/base/half.h"
#include "loom/base/mapped_file.h"
#include "loom/base/thread_pool.h"
#include "loom/model/hf_model.h"
#include "loom/model/safetensors_writer.h"
#include "loom/model/transformer.h"

namespace loom::model::testing {

// A fresh directory under the system temp directory, removed (with its contents) on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("loom_hf_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void WriteText(const std::string& path, const std::string& text) {
  const Status s = base::WriteFileAtomically(
      path, {reinterpret_cast<const std::byte*>(text.data()), text.size()});
  if (!s.ok()) std::abort();
}

// A tensor to write: float values stored as `dtype` (F32/F16/BF16), or raw u32 words (U32).
struct TestTensor {
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<uint32_t> words;
};

inline std::vector<std::byte> Encode(const TestTensor& t) {
  std::vector<std::byte> out;
  auto put = [&out](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  if (t.dtype == StDType::kU32) {
    put(t.words.data(), t.words.size() * 4);
    return out;
  }
  for (float v : t.values) {
    if (t.dtype == StDType::kF32) {
      put(&v, 4);
    } else {
      const uint16_t h = t.dtype == StDType::kF16 ? base::F32ToF16(v) : base::F32ToBf16(v);
      put(&h, 2);
    }
  }
  return out;
}

inline std::vector<std::byte> SafetensorsBytes(const std::map<std::string, TestTensor>& tensors) {
  SafetensorsWriter w;
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (!w.AddTensor(name, t.dtype, t.shape).ok()) std::abort();
    names.push_back(name);
  }
  std::vector<std::byte> out;
  if (!w.BeginMemory(&out).ok()) std::abort();
  for (size_t i : w.WriteOrder()) {
    if (!w.WriteTensorData(Encode(tensors.at(names[i]))).ok()) std::abort();
  }
  if (!w.Finish().ok()) std::abort();
  return out;
}

inline void WriteSafetensors(const std::string& path,
                             const std::map<std::string, TestTensor>& tensors) {
  if (!base::WriteFileAtomically(path, SafetensorsBytes(tensors)).ok()) std::abort();
}

// A small random model of one of the supported families, in Hugging Face form.
struct TinyHfSpec {
  std::string model_type = "llama";
  int64_t dim = 32;
  int64_t ffn = 48;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 8;
  int64_t vocab = 40;
  int64_t context = 64;
  bool tied = false;
  bool biases = false;   // q/k/v biases (Qwen2)
  bool qk_norm = false;  // per-head q/k RMSNorm (Qwen3)
  float rms_eps = 1e-6f;
  float rope_theta = 10000.0f;
  StDType dtype = StDType::kF32;
  uint32_t seed = 7;
};

// Float weights by Hugging Face name, as stored (rounded to spec.dtype).
using HfWeights = std::map<std::string, std::vector<float>>;

inline std::string TinyConfigJson(const TinyHfSpec& s) {
  const HfArchName* arch = FindHfArch(s.model_type);
  return StrCat(R"({"architectures": [")", arch ? arch->class_name : "X", R"("], "model_type": ")",
                s.model_type, R"(", "hidden_size": )", s.dim, R"(, "intermediate_size": )", s.ffn,
                R"(, "num_hidden_layers": )", s.layers, R"(, "num_attention_heads": )", s.heads,
                R"(, "num_key_value_heads": )", s.kv_heads, R"(, "head_dim": )", s.head_dim,
                R"(, "vocab_size": )", s.vocab, R"(, "max_position_embeddings": )", s.context,
                R"(, "rms_norm_eps": )", s.rms_eps, R"(, "rope_theta": )", s.rope_theta,
                R"(, "tie_word_embeddings": )", s.tied ? "true" : "false",
                R"(, "bos_token_id": 1, "eos_token_id": [2, 3], "hidden_act": "silu"})");
}

// Writes config.json + model.safetensors into `dir`; returns the weights.
inline HfWeights WriteTinyHfModel(const std::string& dir, const TinyHfSpec& s) {
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::map<std::string, TestTensor> tensors;
  HfWeights weights;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float offset) {
    TestTensor t;
    t.dtype = s.dtype;
    t.shape = shape;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    for (int64_t i = 0; i < n; ++i) {
      float v = offset + scale * normal(rng);
      if (s.dtype == StDType::kF16) v = base::F16ToF32(base::F32ToF16(v));
      if (s.dtype == StDType::kBF16) v = base::Bf16ToF32(base::F32ToBf16(v));
      t.values.push_back(v);
    }
    weights[name] = t.values;
    tensors[name] = std::move(t);
  };
  const int64_t q_dim = s.heads * s.head_dim, kv_dim = s.kv_heads * s.head_dim;
  const float wscale = 1.0f / std::sqrt(static_cast<float>(s.dim));
  add("model.embed_tokens.weight", {s.vocab, s.dim}, 1.0f, 0.0f);
  add("model.norm.weight", {s.dim}, 0.1f, 1.0f);
  if (!s.tied) add("lm_head.weight", {s.vocab, s.dim}, wscale, 0.0f);
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {s.dim}, 0.1f, 1.0f);
    add(p + "post_attention_layernorm.weight", {s.dim}, 0.1f, 1.0f);
    add(p + "self_attn.q_proj.weight", {q_dim, s.dim}, wscale, 0.0f);
    add(p + "self_attn.k_proj.weight", {kv_dim, s.dim}, wscale, 0.0f);
    add(p + "self_attn.v_proj.weight", {kv_dim, s.dim}, wscale, 0.0f);
    add(p + "self_attn.o_proj.weight", {s.dim, q_dim}, wscale, 0.0f);
    if (s.biases) {
      add(p + "self_attn.q_proj.bias", {q_dim}, 0.5f, 0.0f);
      add(p + "self_attn.k_proj.bias", {kv_dim}, 0.5f, 0.0f);
      add(p + "self_attn.v_proj.bias", {kv_dim}, 0.5f, 0.0f);
    }
    if (s.qk_norm) {
      add(p + "self_attn.q_norm.weight", {s.head_dim}, 0.3f, 1.0f);
      add(p + "self_attn.k_norm.weight", {s.head_dim}, 0.3f, 1.0f);
    }
    add(p + "mlp.gate_proj.weight", {s.ffn, s.dim}, wscale, 0.0f);
    add(p + "mlp.up_proj.weight", {s.ffn, s.dim}, wscale, 0.0f);
    add(p + "mlp.down_proj.weight", {s.dim, s.ffn}, 1.0f / std::sqrt(static_cast<float>(s.ffn)),
        0.0f);
  }
  WriteText(dir + "/config.json", TinyConfigJson(s));
  WriteSafetensors(dir + "/model.safetensors", tensors);
  return weights;
}

// A model opened and bound whole, with a two-thread forward pass of `context` positions; t is
// null on failure, with `error` set.
struct Engine {
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<TransformerWeights> weights;
  std::unique_ptr<base::ThreadPool> pool;
  std::unique_ptr<Transformer> t;
  std::string error;
};
inline Engine LoadEngine(const std::string& path, int64_t context) {
  Engine e;
  auto file = OpenModel(path);
  if (!file.ok()) {
    e.error = file.status().ToString();
    return e;
  }
  e.file = std::move(*file);
  auto w = BindWeights(*e.file);
  if (!w.ok()) {
    e.error = w.status().ToString();
    return e;
  }
  e.weights = std::make_unique<TransformerWeights>(std::move(*w));
  e.pool = std::make_unique<base::ThreadPool>(2);
  TransformerOptions o;
  o.context = context;
  auto t = Transformer::Create(*e.weights, o, *e.pool);
  if (t.ok()) {
    e.t = std::move(*t);
  } else {
    e.error = t.status().ToString();
  }
  return e;
}

}  // namespace loom::model::testing
