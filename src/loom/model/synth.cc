#include "loom/model/synth.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>

#include "loom/base/aligned_buffer.h"
#include "loom/base/thread_pool.h"
#include "loom/kernels/quantize.h"
#include "loom/model/gguf_writer.h"

namespace loom::model {

namespace {

using kernels::DType;

constexpr SynthShape kShapes[] = {
    // stories260K-like, with an FFN width that is a whole number of 32-value blocks.
    {"tiny", 64, 192, 5, 8, 4, 512, 512, 1e-5f, 10000.0f},
    // ~30M parameters: long enough runs for multi-process and serving tests, still quick to write.
    {"small", 512, 1536, 8, 8, 4, 4096, 4096, 1e-5f, 10000.0f},
    {"tinyllama-1.1b", 2048, 5632, 22, 32, 4, 32000, 2048, 1e-5f, 10000.0f},
    {"llama2-7b", 4096, 11008, 32, 32, 32, 32000, 4096, 1e-5f, 10000.0f},
    // Qwen3-30B-A3B (its config.json): head_dim 128 (query width 4096 of dim 2048), 128 experts
    // of 768 columns, 8 used; ffn is the config's dense intermediate_size.  For --arch qwen3moe.
    {"qwen3-30b-a3b", 2048, 6144, 48, 32, 4, 151936, 40960, 1e-6f, 1000000.0f, 128, 128, 8, 768},
};

// llama.cpp's llama_ftype of the file: its mix's, or that of matrices all of one type.
uint32_t FileType(const SynthOptions& o) {
  if (o.mix) return QuantMixFileType(*o.mix);
  switch (o.type) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ8_0:
      return 7;
    case DType::kBF16:
      return 32;
    case DType::kQ4_K:
      return 14;  // Q4_K_S: every matrix Q4_K
    case DType::kQ5_K:
      return 16;  // Q5_K_S
    case DType::kQ6_K:
      return 18;
    default:
      return 0;
  }
}

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Fills x(n) with values of mean `mean` and standard deviation about `stddev`, seeded by `seed`
// alone: each value is a sum of two 16-bit uniform variables (triangular: bounded and cheap, and
// near enough to a normal distribution for activations to stay well scaled).
void FillRow(uint64_t seed, float mean, float stddev, float* x, int64_t n) {
  // (a + b) / 65536 - 1 lies in (-1, 1) with standard deviation sqrt(1/6).
  const float scale = stddev * 2.4494897f / 65536.0f;
  uint64_t state = seed;
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t r = SplitMix64(state);
    const float a = static_cast<float>((r & 0xFFFF) + ((r >> 16) & 0xFFFF)) - 65535.0f;
    x[i] = mean + a * scale;
    if (i + 1 < n) {
      const float b = static_cast<float>(((r >> 32) & 0xFFFF) + (r >> 48)) - 65535.0f;
      x[i + 1] = mean + b * scale;
    }
  }
}

struct PlannedTensor {
  std::string name;
  DType type;
  std::vector<int64_t> shape;  // (rows, cols), (n) or, for experts, (n_experts, rows, cols)
  bool norm;                   // a norm vector: values around 1
  float gain = 0.0f;           // peaked models: standard deviation gain / sqrt(cols); 0: 0.02
};

bool IsMoe(const SynthOptions& o) { return o.arch != SynthArch::kLlama; }

// DeepSeek-V3's shape in miniature (synth.h): h = dim / n_heads.
struct DeepseekDims {
  int64_t q_lora, kv_lora, nope, rope, v;
};
DeepseekDims DeepseekOf(const SynthShape& s) {
  const int64_t h = s.dim / s.n_heads;
  return {s.dim / 2, s.dim / 2, 2 * h, h, 2 * h};
}
constexpr int64_t kDeepseekDenseLayers = 1;
constexpr int64_t kDeepseekGroups = 2;
constexpr int64_t kDeepseekGroupsUsed = 1;
constexpr float kDeepseekScale = 2.5f;
constexpr float kDeepseekYarnFactor = 4.0f;

int64_t ExpertFfn(const SynthOptions& o) {
  if (o.arch == SynthArch::kMixtral) return o.shape.ffn_dim;
  return o.expert_ffn_dim > 0 ? o.expert_ffn_dim : o.shape.ffn_dim / o.n_experts_used;
}

// Qwen2-MoE's shared expert: twice an expert's width (a width of its own, as the real models have).
int64_t SharedFfn(const SynthOptions& o) { return 2 * ExpertFfn(o); }

std::vector<PlannedTensor> PlanTensors(const SynthOptions& o) {
  const SynthShape& s = o.shape;
  const DType type = o.type;
  const int64_t head_dim = HeadDim(s);
  const int64_t q_dim = s.n_heads * head_dim;
  const int64_t kv_dim = s.n_kv_heads * head_dim;
  // Gains of a peaked model (0 keeps the dense synth's 0.02 everywhere, so its files are
  // unchanged).
  const float unit = o.peaked ? kPeakedGain : 0.0f;
  const float head = o.peaked ? kPeakedHeadGain : 0.0f;
  const float router = o.peaked ? kPeakedRouterGain : 0.0f;
  std::vector<PlannedTensor> t;
  // The embedding's rows are not normalized before use: values of about kPeakedGain.
  t.push_back({"token_embd.weight",
               type,
               {s.vocab_size, s.dim},
               false,
               unit * std::sqrt(static_cast<float>(s.dim))});
  t.push_back({"output_norm.weight", DType::kF32, {s.dim}, true});
  t.push_back({"output.weight", type, {s.vocab_size, s.dim}, false, head});
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    t.push_back({p + "attn_norm.weight", DType::kF32, {s.dim}, true});
    if (o.arch == SynthArch::kDeepseek2) {
      const DeepseekDims m = DeepseekOf(s);
      const int64_t h = s.n_heads;
      t.push_back({p + "attn_q_a.weight", type, {m.q_lora, s.dim}, false, unit});
      t.push_back({p + "attn_q_a_norm.weight", DType::kF32, {m.q_lora}, true});
      t.push_back({p + "attn_q_b.weight", type, {h * (m.nope + m.rope), m.q_lora}, false, unit});
      t.push_back({p + "attn_kv_a_mqa.weight", type, {m.kv_lora + m.rope, s.dim}, false, unit});
      t.push_back({p + "attn_kv_a_norm.weight", DType::kF32, {m.kv_lora}, true});
      if (o.mla_split) {
        t.push_back({p + "attn_k_b.weight", type, {h, m.kv_lora, m.nope}, false, unit});
        t.push_back({p + "attn_v_b.weight", type, {h, m.v, m.kv_lora}, false, unit});
      } else {
        t.push_back({p + "attn_kv_b.weight", type, {h * (m.nope + m.v), m.kv_lora}, false, unit});
      }
      t.push_back({p + "attn_output.weight", type, {s.dim, h * m.v}, false, unit});
      t.push_back({p + "ffn_norm.weight", DType::kF32, {s.dim}, true});
      if (l < kDeepseekDenseLayers) {
        t.push_back({p + "ffn_gate.weight", type, {s.ffn_dim, s.dim}, false, unit});
        t.push_back({p + "ffn_up.weight", type, {s.ffn_dim, s.dim}, false, unit});
        t.push_back({p + "ffn_down.weight", type, {s.dim, s.ffn_dim}, false, unit});
        continue;
      }
      const int64_t e = o.n_experts, f = ExpertFfn(o);
      t.push_back({p + "ffn_gate_inp.weight", DType::kF32, {e, s.dim}, false, router});
      // The choice bias: standard deviation about 0.1 when peaked (sigmoid scores differ by
      // about that much), so it changes some choices.
      t.push_back({p + "exp_probs_b.bias",
                   DType::kF32,
                   {e},
                   false,
                   o.peaked ? 0.1f * std::sqrt(static_cast<float>(e)) : 0.0f});
      t.push_back({p + "ffn_gate_exps.weight", type, {e, f, s.dim}, false, unit});
      t.push_back({p + "ffn_up_exps.weight", type, {e, f, s.dim}, false, unit});
      t.push_back({p + "ffn_down_exps.weight", type, {e, s.dim, f}, false, unit});
      t.push_back({p + "ffn_gate_shexp.weight", type, {f, s.dim}, false, unit});
      t.push_back({p + "ffn_up_shexp.weight", type, {f, s.dim}, false, unit});
      t.push_back({p + "ffn_down_shexp.weight", type, {s.dim, f}, false, unit});
      continue;
    }
    t.push_back({p + "attn_q.weight", type, {q_dim, s.dim}, false, unit});
    t.push_back({p + "attn_k.weight", type, {kv_dim, s.dim}, false, unit});
    t.push_back({p + "attn_v.weight", type, {kv_dim, s.dim}, false, unit});
    t.push_back({p + "attn_output.weight", type, {s.dim, q_dim}, false, unit});
    if (o.arch == SynthArch::kQwen2Moe) {
      // Biases of about the projections' own size when peaked.
      for (const auto& [name, n] :
           {std::pair{"attn_q.bias", q_dim}, std::pair{"attn_k.bias", kv_dim},
            std::pair{"attn_v.bias", kv_dim}}) {
        t.push_back({p + name, DType::kF32, {n}, false, unit * std::sqrt(static_cast<float>(n))});
      }
    }
    if (o.arch == SynthArch::kQwen3Moe) {
      t.push_back({p + "attn_q_norm.weight", DType::kF32, {head_dim}, true});
      t.push_back({p + "attn_k_norm.weight", DType::kF32, {head_dim}, true});
    }
    t.push_back({p + "ffn_norm.weight", DType::kF32, {s.dim}, true});
    if (IsMoe(o)) {
      const int64_t e = o.n_experts, f = ExpertFfn(o);
      t.push_back({p + "ffn_gate_inp.weight", DType::kF32, {e, s.dim}, false, router});
      t.push_back({p + "ffn_gate_exps.weight", type, {e, f, s.dim}, false, unit});
      t.push_back({p + "ffn_up_exps.weight", type, {e, f, s.dim}, false, unit});
      t.push_back({p + "ffn_down_exps.weight", type, {e, s.dim, f}, false, unit});
      if (o.arch == SynthArch::kQwen2Moe) {
        // The gate's logit has a standard deviation of about the router's gain when peaked.
        const int64_t sf = SharedFfn(o);
        t.push_back({p + "ffn_gate_inp_shexp.weight", DType::kF32, {s.dim}, false, router});
        t.push_back({p + "ffn_gate_shexp.weight", type, {sf, s.dim}, false, unit});
        t.push_back({p + "ffn_up_shexp.weight", type, {sf, s.dim}, false, unit});
        t.push_back({p + "ffn_down_shexp.weight", type, {s.dim, sf}, false, unit});
      }
      continue;
    }
    t.push_back({p + "ffn_gate.weight", type, {s.ffn_dim, s.dim}, false, unit});
    t.push_back({p + "ffn_up.weight", type, {s.ffn_dim, s.dim}, false, unit});
    t.push_back({p + "ffn_down.weight", type, {s.dim, s.ffn_dim}, false, unit});
  }
  if (o.mix) {
    // The matrices (every tensor of the base type; norms, biases and routers are f32) get the
    // mix's types, in file order as llama.cpp's quantizer counts them.
    std::vector<std::string> names;
    std::vector<int64_t> cols;
    std::vector<size_t> index;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i].type != type) continue;
      names.push_back(t[i].name);
      cols.push_back(t[i].shape.back());
      index.push_back(i);
    }
    const std::vector<DType> types =
        QuantMixTypes(*o.mix, names, cols, s.n_layers, IsMoe(o) ? o.n_experts : 0);
    for (size_t k = 0; k < index.size(); ++k) t[index[k]].type = types[k];
  }
  return t;
}

Status AddMetadata(const SynthOptions& o, GgufWriter& w) {
  const SynthShape& s = o.shape;
  LOOM_ASSIGN_OR_RETURN(TokenizerSpec vocab, SynthVocab(s.vocab_size));
  const std::string arch = o.arch == SynthArch::kQwen2Moe    ? "qwen2moe"
                           : o.arch == SynthArch::kQwen3Moe  ? "qwen3moe"
                           : o.arch == SynthArch::kDeepseek2 ? "deepseek2"
                                                             : "llama";
  const std::string a = arch + ".";
  w.AddString("general.architecture", arch);
  w.AddString("general.name", "loom-synth-" + std::string(s.name));
  w.AddU32("general.file_type", FileType(o));
  w.AddU32("general.alignment", static_cast<uint32_t>(kGgufDefaultAlignment));
  w.AddU64("loom.synth.seed", o.seed);
  w.AddU32(a + "context_length", static_cast<uint32_t>(s.context_length));
  w.AddU32(a + "embedding_length", static_cast<uint32_t>(s.dim));
  w.AddU32(a + "block_count", static_cast<uint32_t>(s.n_layers));
  w.AddU32(a + "feed_forward_length", static_cast<uint32_t>(s.ffn_dim));
  const DeepseekDims m = DeepseekOf(s);
  const bool deepseek = o.arch == SynthArch::kDeepseek2;
  w.AddU32(a + "rope.dimension_count",
           static_cast<uint32_t>(deepseek ? m.rope : HeadDim(s)));
  w.AddU32(a + "attention.head_count", static_cast<uint32_t>(s.n_heads));
  // DeepSeek, older layout: every head has its own decompressed key and value; the split layout
  // is one latent "head" (multi-query attention over the latents).
  w.AddU32(a + "attention.head_count_kv",
           static_cast<uint32_t>(deepseek ? (o.mla_split ? 1 : s.n_heads) : s.n_kv_heads));
  w.AddF32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  w.AddF32(a + "rope.freq_base", s.rope_theta);
  if (o.yarn_factor > 0.0f && !deepseek) {
    w.AddString(a + "rope.scaling.type", "yarn");
    w.AddF32(a + "rope.scaling.factor", o.yarn_factor);
    w.AddU32(a + "rope.scaling.original_context_length",
             static_cast<uint32_t>(s.context_length / 4));
  }
  w.AddU32(a + "vocab_size", static_cast<uint32_t>(s.vocab_size));
  if (IsMoe(o)) {
    w.AddU32(a + "expert_count", static_cast<uint32_t>(o.n_experts));
    w.AddU32(a + "expert_used_count", static_cast<uint32_t>(o.n_experts_used));
    if (deepseek) {
      // The older layout llama.cpp still reads: key_length / value_length are the decompressed
      // head sizes (no key_length_mla), attn_kv_b unsplit.
      if (o.mla_split) {
        w.AddU32(a + "attention.key_length", static_cast<uint32_t>(m.kv_lora + m.rope));
        w.AddU32(a + "attention.value_length", static_cast<uint32_t>(m.kv_lora));
        w.AddU32(a + "attention.key_length_mla", static_cast<uint32_t>(m.nope + m.rope));
        w.AddU32(a + "attention.value_length_mla", static_cast<uint32_t>(m.v));
      } else {
        w.AddU32(a + "attention.key_length", static_cast<uint32_t>(m.nope + m.rope));
        w.AddU32(a + "attention.value_length", static_cast<uint32_t>(m.v));
      }
      w.AddU32(a + "attention.q_lora_rank", static_cast<uint32_t>(m.q_lora));
      w.AddU32(a + "attention.kv_lora_rank", static_cast<uint32_t>(m.kv_lora));
      w.AddU32(a + "expert_feed_forward_length", static_cast<uint32_t>(ExpertFfn(o)));
      w.AddU32(a + "expert_shared_count", 1);
      w.AddU32(a + "leading_dense_block_count", static_cast<uint32_t>(kDeepseekDenseLayers));
      w.AddF32(a + "expert_weights_scale", kDeepseekScale);
      w.AddBool(a + "expert_weights_norm", true);
      w.AddU32(a + "expert_gating_func", 2);  // sigmoid
      w.AddU32(a + "expert_group_count", static_cast<uint32_t>(kDeepseekGroups));
      w.AddU32(a + "expert_group_used_count", static_cast<uint32_t>(kDeepseekGroupsUsed));
      w.AddString(a + "rope.scaling.type", "yarn");
      w.AddF32(a + "rope.scaling.factor", kDeepseekYarnFactor);
      w.AddU32(a + "rope.scaling.original_context_length",
               static_cast<uint32_t>(s.context_length / 4));
      w.AddF32(a + "rope.scaling.yarn_log_multiplier", 0.1f);  // DeepSeek-V3's 0.1 * mscale_all_dim
    }
    if (o.arch == SynthArch::kQwen2Moe) {
      w.AddU32(a + "expert_feed_forward_length", static_cast<uint32_t>(ExpertFfn(o)));
      w.AddU32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(SharedFfn(o)));
    }
    if (o.arch == SynthArch::kQwen3Moe) {
      w.AddU32(a + "attention.key_length", static_cast<uint32_t>(HeadDim(s)));
      w.AddU32(a + "attention.value_length", static_cast<uint32_t>(HeadDim(s)));
      w.AddU32(a + "expert_feed_forward_length", static_cast<uint32_t>(ExpertFfn(o)));
    }
  }
  if (o.peaked) w.AddBool("loom.synth.peaked", true);
  w.AddString("tokenizer.ggml.model", vocab.model);
  w.AddStringArray("tokenizer.ggml.tokens", vocab.tokens);
  w.AddArray("tokenizer.ggml.scores", std::span<const float>(vocab.scores));
  w.AddArray("tokenizer.ggml.token_type", std::span<const int32_t>(vocab.token_types));
  w.AddU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab.bos_id));
  w.AddU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab.eos_id));
  w.AddU32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(vocab.unk_id));
  w.AddBool("tokenizer.ggml.add_bos_token", vocab.add_bos);
  w.AddBool("tokenizer.ggml.add_eos_token", vocab.add_eos);
  return OkStatus();
}

Status CheckShape(const SynthOptions& o) {
  const SynthShape& s = o.shape;
  if (o.mix && o.type != QuantMixBaseType(*o.mix)) {
    return InvalidArgumentError("synth: the ", QuantMixName(*o.mix), " mix is built on ",
                                kernels::Traits(QuantMixBaseType(*o.mix)).name, ", not ",
                                kernels::Traits(o.type).name);
  }
  const int64_t block = kernels::Traits(o.type).block_elems;
  if (s.dim <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.dim % s.n_heads != 0 ||
      s.n_heads % s.n_kv_heads != 0 || (s.dim / s.n_heads) % 2 != 0 || s.ffn_dim <= 0 ||
      s.n_layers <= 0 || s.context_length <= 0) {
    return InvalidArgumentError("synth: inconsistent shape '", s.name, "'");
  }
  if (HeadDim(s) != s.dim / s.n_heads && (o.arch != SynthArch::kQwen3Moe || HeadDim(s) % 2 != 0 ||
                                          (s.n_heads * HeadDim(s)) % block != 0)) {
    return InvalidArgumentError("synth: shape '", s.name, "' has heads of ", HeadDim(s),
                                " values (not dim / heads); only --arch qwen3moe writes it");
  }
  if (s.dim % block != 0 || s.ffn_dim % block != 0) {
    return InvalidArgumentError("synth: shape '", s.name, "' (dim ", s.dim, ", ffn ", s.ffn_dim,
                                ") is not a whole number of ", Traits(o.type).name, " blocks");
  }
  if (IsMoe(o)) {
    if (o.n_experts < 1 || o.n_experts > 4096 || o.n_experts_used < 1 ||
        o.n_experts_used > o.n_experts) {
      return InvalidArgumentError("synth: ", o.n_experts_used, " experts used of ", o.n_experts,
                                  " (expected 1 <= used <= experts <= 4096)");
    }
    if (o.arch == SynthArch::kDeepseek2) {
      const DeepseekDims m = DeepseekOf(s);
      if (o.n_experts % kDeepseekGroups != 0 ||
          o.n_experts_used > o.n_experts / kDeepseekGroups * kDeepseekGroupsUsed ||
          m.q_lora % block != 0 || (s.n_heads * m.v) % block != 0 || s.n_layers < 2 ||
          (o.mla_split && m.nope % block != 0)) {
        return InvalidArgumentError("synth: deepseek2 needs an even expert count, at most half of ",
                                    "the experts used, at least 2 layers and latent ranks (",
                                    m.q_lora, ") and, split, no-rope key parts (", m.nope,
                                    ") of whole ", Traits(o.type).name, " blocks");
      }
    }
    const int64_t f = ExpertFfn(o);
    if (f <= 0 || f % block != 0) {
      return InvalidArgumentError("synth: expert feed-forward width ", f,
                                  " is not a positive whole number of ", Traits(o.type).name,
                                  " blocks");
    }
  }
  return OkStatus();
}

// Rows of a tensor as a matrix: 1 for a vector, experts * rows for stacked experts.
int64_t RowCount(const PlannedTensor& t) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < t.shape.size(); ++i) rows *= t.shape[i];
  return rows;
}

// Declares the model to `w`; after Begin*(), writes all tensor data.
Status Plan(const SynthOptions& o, GgufWriter& w, std::vector<PlannedTensor>* plan) {
  LOOM_RETURN_IF_ERROR(CheckShape(o));
  LOOM_RETURN_IF_ERROR(AddMetadata(o, w));
  *plan = PlanTensors(o);
  for (const PlannedTensor& t : *plan) LOOM_RETURN_IF_ERROR(w.AddTensor(t.name, t.type, t.shape));
  return OkStatus();
}

Status WriteData(const SynthOptions& o, const std::vector<PlannedTensor>& plan, GgufWriter& w) {
  base::ThreadPool pool(o.threads);
  int64_t total = 0;
  for (size_t i = 0; i < plan.size(); ++i) total += w.tensor_size(i);
  int64_t done = 0;
  constexpr int64_t kChunkBytes = int64_t{8} << 20;
  // Scratch allocated once: a float row per thread and one output chunk of whole rows.
  int64_t max_cols = 0;
  int64_t max_chunk = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const int64_t cols = plan[i].shape.back();
    const int64_t row_bytes = w.tensor_size(i) / RowCount(plan[i]);
    max_cols = std::max(max_cols, cols);
    max_chunk = std::max(
        max_chunk,
        std::min(w.tensor_size(i), std::max<int64_t>(1, kChunkBytes / row_bytes) * row_bytes));
  }
  std::vector<base::AlignedBuffer<float>> rows;
  for (int i = 0; i < pool.size(); ++i) rows.emplace_back(max_cols);
  base::AlignedBuffer<std::byte> chunk(max_chunk);
  for (size_t ti = 0; ti < plan.size(); ++ti) {
    const PlannedTensor& t = plan[ti];
    const int64_t cols = t.shape.back();
    const int64_t n_rows = RowCount(t);
    const float stddev = t.gain > 0.0f ? t.gain / std::sqrt(static_cast<float>(cols)) : 0.02f;
    const int64_t row_bytes = w.tensor_size(ti) / n_rows;
    const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkBytes / row_bytes);
    uint64_t tensor_state = o.seed * 0x2545F4914F6CDD1Dull + ti;
    const uint64_t tensor_seed = SplitMix64(tensor_state);
    for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_chunk) {
      const int64_t n = std::min(rows_per_chunk, n_rows - r0);
      const int64_t per_thread = (n + pool.size() - 1) / pool.size();
      pool.Run([&](int thread) {
        float* x = rows[static_cast<size_t>(thread)].data();
        const int64_t end = std::min(n, (thread + 1) * per_thread);
        for (int64_t r = thread * per_thread; r < end; ++r) {
          // Each row depends only on (seed, tensor, row): the output is the same for any thread
          // count.
          uint64_t row_state = tensor_seed ^ static_cast<uint64_t>(r0 + r) * 0x9E3779B97F4A7C15ull;
          FillRow(SplitMix64(row_state), t.norm ? 1.0f : 0.0f, stddev, x, cols);
          kernels::QuantizeRow(t.type, x, cols, chunk.data() + r * row_bytes);
        }
      });
      LOOM_RETURN_IF_ERROR(w.WriteTensorData({chunk.data(), static_cast<size_t>(n * row_bytes)}));
      done += n * row_bytes;
      if (o.progress) o.progress(done, total);
    }
  }
  return OkStatus();
}

}  // namespace

std::span<const SynthShape> SynthShapes() { return kShapes; }

const SynthShape* FindSynthShape(std::string_view name) {
  for (const SynthShape& s : kShapes) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

StatusOr<SynthArch> ParseSynthArch(std::string_view text) {
  if (text == "llama") return SynthArch::kLlama;
  if (text == "mixtral") return SynthArch::kMixtral;
  if (text == "qwen2moe") return SynthArch::kQwen2Moe;
  if (text == "qwen3moe") return SynthArch::kQwen3Moe;
  if (text == "deepseek2") return SynthArch::kDeepseek2;
  return InvalidArgumentError("unknown synthetic architecture '", text,
                              "' (expected llama, mixtral, qwen2moe, qwen3moe or deepseek2)");
}

StatusOr<DType> ParseDType(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K}) {
    if (kernels::Traits(t).name == lower) return t;
  }
  return InvalidArgumentError("unknown weight type '", text,
                              "' (expected f32, f16, bf16, q8_0, q4_0, q4_k, q5_k or q6_k)");
}

Status WriteSynthModel(const std::string& path, const SynthOptions& options) {
  GgufWriter w;
  std::vector<PlannedTensor> plan;
  LOOM_RETURN_IF_ERROR(Plan(options, w, &plan));
  LOOM_RETURN_IF_ERROR(w.BeginFile(path));
  LOOM_RETURN_IF_ERROR(WriteData(options, plan, w));
  return w.Finish();
}

Status WriteSynthModelToMemory(const SynthOptions& options, std::vector<std::byte>* out) {
  GgufWriter w;
  std::vector<PlannedTensor> plan;
  LOOM_RETURN_IF_ERROR(Plan(options, w, &plan));
  LOOM_RETURN_IF_ERROR(w.BeginMemory(out));
  LOOM_RETURN_IF_ERROR(WriteData(options, plan, w));
  return w.Finish();
}

}  // namespace loom::model
