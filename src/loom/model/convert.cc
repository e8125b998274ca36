#include "loom/model/convert.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <numbers>
#include <vector>

#include "loom/base/mapped_file.h"
#include "loom/kernels/matmul.h"
#include "loom/kernels/quantize.h"
#include "loom/model/arch.h"
#include "loom/model/gguf.h"
#include "loom/model/gguf_writer.h"
#include "loom/model/hf_model.h"
#include "loom/model/safetensors_writer.h"

namespace loom::model {

namespace {

namespace fs = std::filesystem;
using kernels::DType;

// One output tensor (or, for MLX, one of the three parts of a quantized matrix).
struct Job {
  std::string name;  // in the output's convention
  const TensorInfo* src = nullptr;
  std::vector<float> values;   // literal contents instead of src (rope_freqs.weight)
  int64_t rows = 1, cols = 0;  // as read: a vector is one row
  std::vector<int64_t> shape;  // as written (outermost first)
  DType type = DType::kF32;    // encoding of plain tensors
  int mlx_part = -1;           // 0 packed weight, 1 scales, 2 biases; -1 plain
  MlxQuantParams mlx;
  DType scale_type = DType::kBF16;
  int64_t permute_head = 0;       // q/k reordering: head size, or 0 for none
  bool permute_elements = false;  // reorder within rows (vectors) rather than whole rows
  int64_t bytes = 0;
  // Experts: output row r is source row row_begin + r (one expert of a stacked tensor), or, with
  // several parts, row r % part_rows of parts[r / part_rows] (experts stacked from one tensor each).
  int64_t row_begin = 0;
  std::vector<const TensorInfo*> parts;
  int64_t part_rows = 0;
};

// One layer's routed experts of one kind (gate, up or down): a stacked tensor (GGUF, MLX) or one
// tensor per expert (Hugging Face).
struct ExpertStack {
  std::string stacked;                   // GGUF name: "blk.3.ffn_gate_exps"
  std::string per_expert;                // GGUF name without the index: "blk.3.ffn_gate"
  std::vector<const TensorInfo*> parts;  // the stacked tensor, or n_experts tensors
  int64_t n = 0, rows = 0, cols = 0;     // experts, and each one's shape
};

StatusOr<std::vector<ExpertStack>> FindExperts(const ModelFile& in) {
  const HParams& hp = in.hparams;
  std::vector<ExpertStack> out;
  for (int64_t l = 0; l < hp.n_layers; ++l) {
    if (!hp.is_moe_layer(l)) continue;
    for (const char* kind : {"gate", "up", "down"}) {
      ExpertStack st;
      const std::string p = "blk." + std::to_string(l) + ".ffn_" + kind;
      st.stacked = p + "_exps";
      st.per_expert = p;
      st.n = hp.n_experts;
      const auto it = in.tensors.find(st.stacked + ".weight");
      if (it != in.tensors.end()) {
        if (it->second.shape.size() != 3 || it->second.shape[0] != st.n) {
          return DataLossError("convert: ", in.path, ": ", it->first, " is not a stack of ",
                               st.n, " experts");
        }
        st.parts = {&it->second};
        st.rows = it->second.shape[1];
        st.cols = it->second.shape[2];
      } else {
        for (int64_t e = 0; e < st.n; ++e) {
          const std::string name = p + "." + std::to_string(e) + ".weight";
          const auto t = in.tensors.find(name);
          if (t == in.tensors.end() || t->second.shape.size() != 2 ||
              (e > 0 && t->second.shape != st.parts[0]->shape)) {
            return DataLossError("convert: ", in.path, ": missing or misshapen expert tensor '",
                                 name, "'");
          }
          st.parts.push_back(&t->second);
        }
        st.rows = st.parts[0]->shape[0];
        st.cols = st.parts[0]->shape[1];
      }
      out.push_back(std::move(st));
    }
  }
  return out;
}

// All experts of `st` as one (n, rows, cols) tensor.
Job StackedJob(const ExpertStack& st, std::string name) {
  Job j;
  j.name = std::move(name);
  j.src = st.parts[0];
  j.parts = st.parts;
  j.part_rows = st.parts.size() == 1 ? st.n * st.rows : st.rows;
  j.rows = st.n * st.rows;
  j.cols = st.cols;
  j.shape = {st.n, st.rows, st.cols};
  return j;
}

// Expert e of `st` as a (rows, cols) matrix.
Job ExpertJob(const ExpertStack& st, int64_t e, std::string name) {
  Job j;
  j.name = std::move(name);
  const bool stacked = st.parts.size() == 1;
  j.src = st.parts[stacked ? 0 : static_cast<size_t>(e)];
  j.row_begin = stacked ? e * st.rows : 0;
  j.rows = st.rows;
  j.cols = st.cols;
  j.shape = {st.rows, st.cols};
  return j;
}

using Sink = std::function<Status(std::span<const std::byte>)>;

// What --type accepts: the float and block types and the K-quants.
std::vector<DType> WeightTypes() {
  return {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
          DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
}

bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// GGUF files of these architectures keep Hugging Face's rotate-halves layout (as llama.cpp writes
// them); Llama-family GGUFs rotate adjacent pairs.
kernels::RopeStyle GgufRopeStyle(const std::string& arch) {
  return arch == "qwen2" || arch == "qwen3" || arch == "qwen2moe" || arch == "qwen3moe"
             ? kernels::RopeStyle::kHalves
             : kernels::RopeStyle::kInterleaved;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Whether a tensor belongs to a q/k projection whose per-head order depends on the rotary layout.
bool IsRotaryTensor(const std::string& name) {
  for (const char* s : {".attn_q.weight", ".attn_k.weight", ".attn_q.bias", ".attn_k.bias",
                        ".attn_q_norm.weight", ".attn_k_norm.weight"}) {
    if (EndsWith(name, s)) return true;
  }
  return false;
}

StatusOr<int64_t> EncodedRowBytes(DType type, int64_t cols) {
  return kernels::RowBytes(type, cols);
}

Status EmitJob(const Job& j, kernels::RopeStyle from, kernels::RopeStyle to, const Sink& sink,
               const std::function<void(int64_t)>& done) {
  std::vector<float> row(static_cast<size_t>(j.cols)), permuted(static_cast<size_t>(j.cols));
  std::vector<std::byte> encoded;
  const int64_t groups = j.mlx_part >= 0 ? j.cols / j.mlx.group_size : 0;
  const int64_t scale_bytes = kernels::Traits(j.scale_type).block_bytes;
  std::vector<std::byte> packed, scales, biases;
  if (j.mlx_part >= 0) {
    packed.resize(static_cast<size_t>(MlxPackedRowBytes(j.mlx.bits, j.cols)));
    scales.resize(static_cast<size_t>(groups * scale_bytes));
    biases.resize(scales.size());
  } else {
    LOOM_ASSIGN_OR_RETURN(const int64_t n, EncodedRowBytes(j.type, j.cols));
    encoded.resize(static_cast<size_t>(n));
  }
  std::vector<std::byte> chunk;
  constexpr size_t kChunk = size_t{1} << 20;
  chunk.reserve(kChunk + encoded.size() + packed.size());
  const int64_t hd = j.permute_head;
  for (int64_t r = 0; r < j.rows; ++r) {
    int64_t src_row = r;
    if (hd > 0 && !j.permute_elements) {
      src_row = r / hd * hd + RopePermuteIndex(from, to, hd, r % hd);
    }
    if (j.src == nullptr) {
      std::copy_n(j.values.data() + src_row * j.cols, j.cols, row.data());
    } else if (j.parts.size() > 1) {
      ReadRowF32(*j.parts[static_cast<size_t>(src_row / j.part_rows)], src_row % j.part_rows,
                 row.data());
    } else {
      ReadRowF32(*j.src, j.row_begin + src_row, row.data());
    }
    if (hd > 0 && j.permute_elements) {
      for (int64_t i = 0; i < j.cols; ++i) {
        permuted[i] = row[i / hd * hd + RopePermuteIndex(from, to, hd, i % hd)];
      }
      row.swap(permuted);
    }
    std::span<const std::byte> out;
    if (j.mlx_part < 0) {
      kernels::QuantizeRow(j.type, row.data(), j.cols, encoded.data());
      out = encoded;
    } else {
      MlxQuantizeRow(row.data(), j.cols, j.mlx, j.scale_type, packed.data(), scales.data(),
                     biases.data());
      out = j.mlx_part == 0   ? std::span<const std::byte>(packed)
            : j.mlx_part == 1 ? std::span<const std::byte>(scales)
                              : std::span<const std::byte>(biases);
    }
    chunk.insert(chunk.end(), out.begin(), out.end());
    if (chunk.size() >= kChunk || r + 1 == j.rows) {
      LOOM_RETURN_IF_ERROR(sink(chunk));
      done(static_cast<int64_t>(chunk.size()));
      chunk.clear();
    }
  }
  return OkStatus();
}

// llama.cpp's rope_freqs.weight for llama3 scaling: per pair, the divisor of its frequency.
std::vector<float> Llama3FreqFactors(const HParams& hp) {
  const RopeScaling& s = hp.rope_scaling;
  std::vector<float> out;
  const double old_ctx = static_cast<double>(s.original_context);
  const double low_wavelen = old_ctx / s.low_freq_factor;
  const double high_wavelen = old_ctx / s.high_freq_factor;
  for (int64_t i = 0; i < hp.head_dim / 2; ++i) {
    const double freq =
        1.0 / std::pow(static_cast<double>(hp.rope_theta),
                       static_cast<double>(2 * i) / static_cast<double>(hp.head_dim));
    const double wavelen = 2 * std::numbers::pi / freq;
    double factor = 1.0;
    if (wavelen > low_wavelen) {
      factor = s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth =
          (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      factor = 1.0 / ((1 - smooth) / s.factor + smooth);
    }
    out.push_back(static_cast<float>(factor));
  }
  return out;
}

// GGUF llama3 models carry only rope_freqs.weight.  Meta's published Llama 3.1 / 3.2 settings are
// low_freq_factor 1, high_freq_factor 4, original context 8192 (or what the file says), with the
// factor the largest divisor: recover them when they reproduce the divisors exactly.
bool RecoverLlama3(HParams* hp) {
  const std::vector<float>& f = hp->rope_scaling.freq_factors;
  HParams trial = *hp;
  RopeScaling& s = trial.rope_scaling;
  s.type = RopeScalingType::kLlama3;
  s.factor = *std::max_element(f.begin(), f.end());
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = 4.0f;
  if (s.original_context <= 0) s.original_context = 8192;
  const std::vector<float> want = Llama3FreqFactors(trial);
  for (size_t i = 0; i < f.size(); ++i) {
    if (std::abs(want[i] - f[i]) > 1e-5f * std::abs(f[i])) return false;
  }
  s.freq_factors.clear();
  *hp = trial;
  return true;
}

// Types a GGUF file can hold: the kernels type and the ggml id must map to each other.
bool GgufCanStore(DType type) {
  const GgmlTypeInfo* info = FindGgmlType(GgmlTypeId(type));
  return info != nullptr && info->dtype && *info->dtype == type;
}

DType GgufMatrixType(DType wanted, int64_t cols) {
  const kernels::DTypeTraits& t = kernels::Traits(wanted);
  if (cols % t.block_elems == 0) return wanted;
  // As llama.cpp's quantizer does, rows that do not divide into blocks get a compatible type.
  if (t.block_elems > 32 && cols % 32 == 0) return DType::kQ8_0;
  return DType::kF16;
}

void AddTokenizer(const TokenizerSpec& t, GgufWriter& w) {
  w.AddString("tokenizer.ggml.model", t.model);
  if (!t.pre.empty()) w.AddString("tokenizer.ggml.pre", t.pre);
  w.AddStringArray("tokenizer.ggml.tokens", t.tokens);
  if (!t.scores.empty()) w.AddArray("tokenizer.ggml.scores", std::span<const float>(t.scores));
  if (!t.token_types.empty()) {
    w.AddArray("tokenizer.ggml.token_type", std::span<const int32_t>(t.token_types));
  }
  // SentencePiece vocabularies merge by score (a tokenizer.json's merge list is not GGUF's).
  if (!t.merges.empty() && t.model != "llama") {
    w.AddStringArray("tokenizer.ggml.merges", t.merges);
  }
  if (t.bos_id >= 0) w.AddU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(t.bos_id));
  if (t.eos_id >= 0) w.AddU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(t.eos_id));
  if (t.unk_id >= 0) w.AddU32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(t.unk_id));
  if (t.pad_id >= 0) w.AddU32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(t.pad_id));
  w.AddBool("tokenizer.ggml.add_bos_token", t.add_bos);
  w.AddBool("tokenizer.ggml.add_eos_token", t.add_eos);
  if (t.model == "llama") w.AddBool("tokenizer.ggml.add_space_prefix", t.add_space_prefix);
  if (!t.chat_template.empty()) w.AddString("tokenizer.chat_template", t.chat_template);
}

struct Progress {
  int64_t total = 0;
  int64_t done = 0;
  const std::function<void(int64_t, int64_t)>* callback = nullptr;
  void Add(int64_t n) {
    done += n;
    if (callback != nullptr && *callback) (*callback)(done, total);
  }
};

// Latent attention: the older layout (attn_kv_b, decompressed head sizes as key_length /
// value_length) or the split one (attn_k_b / attn_v_b, key_length_mla / value_length_mla), as
// the source holds it.
void AddMlaKeys(const ModelFile& in, const std::string& p, GgufWriter& w) {
  const HParams& hp = in.hparams;
  const bool split = in.tensors.count("blk.0.attn_k_b.weight") != 0;
  if (hp.q_lora_rank > 0) {
    w.AddU64(p + "attention.q_lora_rank", static_cast<uint64_t>(hp.q_lora_rank));
  }
  w.AddU64(p + "attention.kv_lora_rank", static_cast<uint64_t>(hp.kv_lora_rank));
  w.AddU64(p + "rope.dimension_count", static_cast<uint64_t>(hp.rope_dim));
  if (split) {
    w.AddU64(p + "attention.head_count_kv", 1);
    w.AddU64(p + "attention.key_length", static_cast<uint64_t>(hp.kv_lora_rank + hp.rope_dim));
    w.AddU64(p + "attention.value_length", static_cast<uint64_t>(hp.kv_lora_rank));
    w.AddU64(p + "attention.key_length_mla", static_cast<uint64_t>(hp.head_dim));
    w.AddU64(p + "attention.value_length_mla", static_cast<uint64_t>(hp.v_head_dim));
  } else {
    w.AddU64(p + "attention.head_count_kv", static_cast<uint64_t>(hp.n_heads));
    w.AddU64(p + "attention.key_length", static_cast<uint64_t>(hp.head_dim));
    w.AddU64(p + "attention.value_length", static_cast<uint64_t>(hp.v_head_dim));
  }
}

// llama.cpp's expert keys.  Its llama (Mixtral) and qwen3moe graphs always renormalise the top-k
// weights and its qwen2moe graph never does, and only deepseek2 reads a gating function: routings
// that GGUF cannot say are refused.
Status AddMoeKeys(const HParams& hp, const std::string& arch, GgufWriter& w) {
  const std::string p = arch + ".";
  w.AddU64(p + "expert_count", static_cast<uint64_t>(hp.n_experts));
  w.AddU64(p + "expert_used_count", static_cast<uint64_t>(hp.n_experts_used));
  if (arch != "llama" || hp.expert_ffn_dim != hp.ffn_dim) {
    w.AddU64(p + "expert_feed_forward_length", static_cast<uint64_t>(hp.expert_ffn_dim));
  }
  if (hp.n_expert_groups > 1) {
    w.AddU64(p + "expert_group_count", static_cast<uint64_t>(hp.n_expert_groups));
    w.AddU64(p + "expert_group_used_count", static_cast<uint64_t>(hp.n_expert_groups_used));
  }
  if (arch == "deepseek2") {
    w.AddU64(p + "leading_dense_block_count", static_cast<uint64_t>(hp.n_dense_layers));
    w.AddU64(p + "expert_shared_count", static_cast<uint64_t>(hp.n_shared_experts));
    w.AddF32(p + "expert_weights_scale", hp.expert_weights_scale);
    w.AddBool(p + "expert_weights_norm", hp.expert_weights_norm);
    w.AddU32(p + "expert_gating_func", hp.gating == HParams::Gating::kSigmoid ? 2 : 1);
    return OkStatus();
  }
  const bool norm = arch != "qwen2moe";
  if (hp.expert_weights_norm != norm || hp.gating != HParams::Gating::kSoftmax ||
      (arch != "qwen2moe" && hp.expert_weights_scale != 1.0f)) {
    return UnimplementedError("convert: a ", arch, " GGUF file cannot say this routing (",
                              hp.expert_weights_norm ? "" : "not ",
                              "renormalised top-k weights; llama.cpp's ", arch, " graph ",
                              norm ? "always renormalises" : "never renormalises", ")");
  }
  if (arch == "qwen2moe") {
    w.AddU64(p + "expert_shared_feed_forward_length", static_cast<uint64_t>(hp.shared_ffn()));
    if (hp.expert_weights_scale != 1.0f) {
      w.AddF32(p + "expert_weights_scale", hp.expert_weights_scale);
    }
  }
  return OkStatus();
}

Status WriteGguf(const ModelFile& in, const std::string& out, const ConvertOptions& o) {
  const HParams& hp = in.hparams;
  const DType wanted = o.type.value_or(DType::kF32);
  if (MlxBits(wanted) != 0 || !GgufCanStore(wanted)) {
    return UnimplementedError("convert: GGUF files cannot hold ", kernels::Traits(wanted).name,
                              " tensors");
  }
  const std::string arch = hp.arch == "mistral" ? "llama" : hp.arch;  // as llama.cpp writes it
  GgufWriter w;
  w.AddString("general.architecture", arch);
  w.AddString("general.name", fs::path(in.path).filename().string());
  const std::string p = arch + ".";
  w.AddU64(p + "context_length", static_cast<uint64_t>(hp.context_length));
  w.AddU64(p + "embedding_length", static_cast<uint64_t>(hp.dim));
  w.AddU64(p + "block_count", static_cast<uint64_t>(hp.n_layers));
  w.AddU64(p + "feed_forward_length", static_cast<uint64_t>(hp.ffn_dim));
  w.AddU64(p + "attention.head_count", static_cast<uint64_t>(hp.n_heads));
  if (hp.is_mla()) {
    AddMlaKeys(in, p, w);
  } else {
    w.AddU64(p + "attention.head_count_kv", static_cast<uint64_t>(hp.n_kv_heads));
    w.AddU64(p + "attention.key_length", static_cast<uint64_t>(hp.head_dim));
    w.AddU64(p + "attention.value_length", static_cast<uint64_t>(hp.head_dim));
    w.AddU64(p + "rope.dimension_count", static_cast<uint64_t>(hp.head_dim));
  }
  if (hp.is_moe()) LOOM_RETURN_IF_ERROR(AddMoeKeys(hp, arch, w));
  w.AddU64(p + "vocab_size", static_cast<uint64_t>(hp.vocab_size));
  w.AddF32(p + "attention.layer_norm_rms_epsilon", hp.rms_eps);
  w.AddF32(p + "rope.freq_base", hp.rope_theta);
  const RopeScaling& rs = hp.rope_scaling;
  if (rs.type == RopeScalingType::kLinear) {
    w.AddString(p + "rope.scaling.type", "linear");
    w.AddF32(p + "rope.scaling.factor", rs.factor);
  } else if (rs.type == RopeScalingType::kYarn) {
    w.AddString(p + "rope.scaling.type", "yarn");
    w.AddF32(p + "rope.scaling.factor", rs.factor);
    // llama.cpp's converter writes 0.1 * mscale_all_dim and divides it back when reading.
    if (rs.yarn_log_mul != 0.0f) {
      w.AddF32(p + "rope.scaling.yarn_log_multiplier", 0.1f * rs.yarn_log_mul);
    }
    if (rs.attn_factor != 1.0f) w.AddF32(p + "rope.scaling.attn_factor", rs.attn_factor);
    if (rs.beta_fast != 32.0f) w.AddF32(p + "rope.scaling.yarn_beta_fast", rs.beta_fast);
    if (rs.beta_slow != 1.0f) w.AddF32(p + "rope.scaling.yarn_beta_slow", rs.beta_slow);
  }
  if (hp.rope_scaling.original_context > 0) {
    w.AddU64(p + "rope.scaling.original_context_length",
             static_cast<uint64_t>(hp.rope_scaling.original_context));
  }
  const TokenizerSpec& tok = o.tokenizer != nullptr ? *o.tokenizer : in.tokenizer;
  if (!tok.model.empty()) AddTokenizer(tok, w);

  std::vector<Job> jobs;
  LOOM_ASSIGN_OR_RETURN(const std::vector<ExpertStack> experts, FindExperts(in));
  for (const ExpertStack& st : experts) {
    Job j = StackedJob(st, st.stacked + ".weight");
    j.type = GgufMatrixType(wanted, j.cols);
    jobs.push_back(std::move(j));
  }
  for (const auto& [name, t] : in.tensors) {
    if (name == "rope_freqs.weight") continue;  // rewritten below
    if (hp.is_moe() && IsExpertTensor(name)) continue;  // stacked above
    Job j;
    j.name = name;
    j.src = &t;
    j.cols = t.shape.back();
    j.rows = t.elements() / std::max<int64_t>(1, j.cols);
    j.shape = t.shape;
    j.type = t.shape.size() == 1 ? DType::kF32 : GgufMatrixType(wanted, j.cols);
    jobs.push_back(std::move(j));
  }
  std::vector<float> factors = hp.rope_scaling.freq_factors;
  if (factors.empty() && hp.rope_scaling.type == RopeScalingType::kLlama3) {
    factors = Llama3FreqFactors(hp);
  }
  if (!factors.empty()) {
    Job j;
    j.name = "rope_freqs.weight";
    j.values = factors;
    j.cols = static_cast<int64_t>(factors.size());
    j.shape = {j.cols};
    jobs.push_back(std::move(j));
  }
  const kernels::RopeStyle to = GgufRopeStyle(arch);
  for (Job& j : jobs) {
    if (hp.rope_style != to && IsRotaryTensor(j.name)) {
      j.permute_head = hp.head_dim;
      j.permute_elements = j.shape.size() == 1;
    }
    LOOM_RETURN_IF_ERROR(w.AddTensor(j.name, j.type, j.shape));
  }
  Progress progress{0, 0, &o.progress};
  for (size_t i = 0; i < jobs.size(); ++i) progress.total += w.tensor_size(i);
  LOOM_RETURN_IF_ERROR(w.BeginFile(out));
  const Sink sink = [&w](std::span<const std::byte> b) { return w.WriteTensorData(b); };
  for (const Job& j : jobs) {
    LOOM_RETURN_IF_ERROR(EmitJob(j, hp.rope_style, to, sink, [&](int64_t n) { progress.Add(n); }));
  }
  return w.Finish();
}

StDType SafetensorsFloat(DType t) {
  return t == DType::kF16 ? StDType::kF16 : t == DType::kBF16 ? StDType::kBF16 : StDType::kF32;
}

std::string_view TorchDtype(DType t) {
  return t == DType::kF16 ? "float16" : t == DType::kBF16 ? "bfloat16" : "float32";
}

// Files of a model directory that describe the tokenizer and generation, copied along.
Status CopyTokenizerFiles(const ModelFile& in, const fs::path& out_dir) {
  std::error_code ec;
  if (!fs::is_directory(in.path, ec)) return OkStatus();
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                        "generation_config.json", "tokenizer.model", "chat_template.jinja"}) {
    const fs::path src = fs::path(in.path) / f;
    if (!fs::is_regular_file(src, ec)) continue;
    LOOM_ASSIGN_OR_RETURN(const std::string bytes, base::ReadFileToString(src.string()));
    LOOM_RETURN_IF_ERROR(base::WriteFileAtomically(
        (out_dir / f).string(), {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}));
  }
  return OkStatus();
}

Status WriteDirectory(const ModelFile& in, const std::string& out, const ConvertOptions& o) {
  const HParams& hp = in.hparams;
  const bool mlx = o.format == ConvertFormat::kMlx;
  const DType ftype = o.type.value_or(mlx ? DType::kBF16 : DType::kF32);
  if (!IsFloat(ftype)) {
    return InvalidArgumentError("convert: --type ", kernels::Traits(ftype).name, " is not a ",
                                mlx ? "MLX" : "Hugging Face",
                                " tensor type (f32, f16 or bf16; MLX quantizes with --bits)");
  }
  if (mlx && (!MlxBitsSupported(o.mlx.bits) || !MlxGroupSizeSupported(o.mlx.group_size))) {
    return InvalidArgumentError("convert: MLX --bits ", o.mlx.bits, " --group-size ",
                                o.mlx.group_size,
                                " (bits 2, 3, 4, 5, 6 or 8; group size 32, 64 or 128)");
  }
  const HfArchName* hf_arch = HfArchFor(hp);
  if (hf_arch == nullptr) {
    return UnimplementedError("convert: architecture '", hp.arch,
                              "' has no Hugging Face config.json form");
  }
  if (hp.rope_scaling.type == RopeScalingType::kYarn && hp.arch != "deepseek2") {
    return UnimplementedError("convert: YaRN RoPE scaling of ", hp.arch,
                              " models has no config.json form here yet");
  }
  if (hp.rope_scaling.type == RopeScalingType::kYarn && hp.rope_scaling.attn_factor != 1.0f) {
    return UnimplementedError("convert: rope.scaling.attn_factor ", hp.rope_scaling.attn_factor,
                              " has no DeepSeek config.json form");
  }
  if (!mlx && in.tensors.count("blk.0.attn_k_b.weight") != 0) {
    return UnimplementedError("convert: ", in.path,
                              " holds DeepSeek's split attn_k_b / attn_v_b, which Hugging Face "
                              "files store joined as kv_b_proj (not written yet); convert to MLX "
                              "(embed_q / unembed_out) or GGUF instead");
  }
  HParams hp_out = hp;
  if (!hp.rope_scaling.freq_factors.empty() && hp.rope_scaling.type != RopeScalingType::kLlama3) {
    if (!RecoverLlama3(&hp_out)) {
      return UnimplementedError("convert: ", in.path,
                                " has per-pair RoPE frequency factors (rope_freqs.weight) that "
                                "are not llama3 scaling, which config.json cannot express");
    }
  }
  const fs::path dir = out;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return UnavailableError(out, ": cannot create the directory: ", ec.message());
  if (fs::exists(dir / "model.safetensors.index.json", ec)) {
    // Loaders would follow the old index instead of the model.safetensors written here.
    return FailedPreconditionError("convert: ", out,
                                   " holds a sharded model (model.safetensors.index.json); write "
                                   "to an empty directory");
  }

  const kernels::RopeStyle to = HfRopeStyle(hp.arch);
  MlxQuantConfig quant;
  quant.defaults = o.mlx;
  std::vector<Job> jobs;
  // MLX: quantizes a matrix (or stack) whose rows divide into groups, as mlx-lm's default
  // predicate does, with its per-model exceptions: Qwen3-MoE's router at 8 bits in groups of 64,
  // DeepSeek's router (a plain parameter, not a linear layer) left as it is.
  auto add = [&](Job j, const std::string& module, const std::string& suffix) {
    std::optional<MlxQuantParams> q;
    const bool router = EndsWith(j.name, ".ffn_gate_inp.weight");
    if (mlx && j.shape.size() >= 2 && suffix == ".weight" && !(router && hp.arch == "deepseek2")) {
      q = o.mlx;
      if (router && hp.arch == "qwen3moe") q = MlxQuantParams{8, 64};
      if (j.cols % q->group_size != 0) q.reset();
    }
    j.type = ftype;
    if (!q) {
      j.name = module + suffix;
      jobs.push_back(std::move(j));
      return;
    }
    if (q->bits != o.mlx.bits || q->group_size != o.mlx.group_size) quant.overrides[module] = q;
    j.mlx = *q;
    j.scale_type = ftype;
    for (int part = 0; part < 3; ++part) {
      Job p = j;
      p.mlx_part = part;
      p.name = module + (part == 0 ? ".weight" : part == 1 ? ".scales" : ".biases");
      p.shape.back() = part == 0 ? j.cols * q->bits / 32 : j.cols / q->group_size;
      jobs.push_back(std::move(p));
    }
  };
  LOOM_ASSIGN_OR_RETURN(const std::vector<ExpertStack> experts, FindExperts(in));
  for (const ExpertStack& st : experts) {
    if (mlx) {  // mlx-lm's switch_mlp stacks
      const std::optional<std::string> module = GgufModuleToHf(st.stacked, hp.arch);
      if (!module) return InternalError("convert: no MLX name for ", st.stacked);
      add(StackedJob(st, ""), *module, ".weight");
      continue;
    }
    for (int64_t e = 0; e < st.n; ++e) {  // transformers' one module per expert
      const std::string gguf = st.per_expert + "." + std::to_string(e);
      const std::optional<std::string> module = GgufModuleToHf(gguf, hp.arch);
      if (!module) return InternalError("convert: no Hugging Face name for ", gguf);
      add(ExpertJob(st, e, ""), *module, ".weight");
    }
  }
  for (const auto& [name, t] : in.tensors) {
    if (hp.is_moe() && IsExpertTensor(name)) continue;  // above
    const std::optional<std::string> hf = GgufTensorToHf(name, hp.arch);
    if (!hf) continue;  // nothing to map it to (rope_freqs.weight: config.json says it)
    const size_t dot = hf->rfind('.');
    Job j;
    j.name = name;  // the GGUF name until `add` names it
    j.src = &t;
    j.cols = t.shape.back();
    j.rows = t.elements() / std::max<int64_t>(1, j.cols);
    j.shape = t.shape;
    if (hp.rope_style != to && IsRotaryTensor(name)) {
      j.permute_head = hp.head_dim;
      j.permute_elements = t.shape.size() == 1;
    }
    if (EndsWith(name, ".ffn_gate_inp_shexp.weight")) j.shape = {1, j.cols};  // a (1, dim) linear
    const std::string module = hf->substr(0, dot), suffix = hf->substr(dot);
    if (mlx && EndsWith(name, ".exp_probs_b.bias")) {
      // mlx-lm keeps DeepSeek's choice bias in f32 (its cast_predicate).
      j.type = DType::kF32;
      j.name = *hf;
      jobs.push_back(std::move(j));
      continue;
    }
    add(std::move(j), module, suffix);
  }
  SafetensorsWriter w;
  w.AddMetadata("format", mlx ? "mlx" : "pt");
  for (Job& j : jobs) {
    const StDType st = j.mlx_part == 0  ? StDType::kU32
                       : j.mlx_part > 0 ? SafetensorsFloat(j.scale_type)
                                        : SafetensorsFloat(j.type);
    LOOM_RETURN_IF_ERROR(w.AddTensor(j.name, st, j.shape));
  }
  Progress progress{0, 0, &o.progress};
  for (size_t i = 0; i < jobs.size(); ++i) progress.total += w.tensor_size(i);

  const TokenizerSpec& tok = o.tokenizer != nullptr ? *o.tokenizer : in.tokenizer;
  const std::string config = HfConfigJson(hp_out, tok, mlx ? &quant : nullptr, TorchDtype(ftype));
  LOOM_RETURN_IF_ERROR(base::WriteFileAtomically(
      (dir / "config.json").string(),
      {reinterpret_cast<const std::byte*>(config.data()), config.size()}));
  LOOM_RETURN_IF_ERROR(w.BeginFile((dir / "model.safetensors").string()));
  const Sink sink = [&w](std::span<const std::byte> b) { return w.WriteTensorData(b); };
  for (size_t i : w.WriteOrder()) {
    LOOM_RETURN_IF_ERROR(
        EmitJob(jobs[i], hp.rope_style, to, sink, [&](int64_t n) { progress.Add(n); }));
  }
  LOOM_RETURN_IF_ERROR(w.Finish());
  return CopyTokenizerFiles(in, dir);
}

}  // namespace

StatusOr<ConvertFormat> ParseConvertFormat(std::string_view text) {
  if (text == "gguf") return ConvertFormat::kGguf;
  if (text == "hf") return ConvertFormat::kHf;
  if (text == "mlx") return ConvertFormat::kMlx;
  return InvalidArgumentError("unknown output format '", text, "' (gguf, hf or mlx)");
}

StatusOr<DType> ParseWeightType(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string known;
  for (DType t : WeightTypes()) {
    if (kernels::Traits(t).name == lower) return t;
    known += (known.empty() ? "" : ", ") + std::string(kernels::Traits(t).name);
  }
  return InvalidArgumentError("unknown weight type '", text, "' (", known, ")");
}

int64_t RopePermuteIndex(kernels::RopeStyle from, kernels::RopeStyle to, int64_t head_dim,
                         int64_t i) {
  if (from == to) return i;
  const int64_t half = head_dim / 2;
  if (to == kernels::RopeStyle::kInterleaved) return (i % 2) * half + i / 2;  // halves -> pairs
  return 2 * (i % half) + i / half;                                           // pairs -> halves
}

void ReadRowF32(const TensorInfo& t, int64_t row, float* out) {
  if (MlxBits(t.type) != 0) {
    MlxDequantizeTensorRow(t, row, out);
    return;
  }
  kernels::DequantizeRow(t.matrix(), row, out);
}

Status ConvertModel(const ModelFile& in, const std::string& out, const ConvertOptions& options) {
  if (FindArch(in.hparams.arch) == nullptr) {
    return UnimplementedError("convert: ", in.path, ": architecture '", in.hparams.arch,
                              "' is not supported");
  }
  std::error_code ec;
  if (fs::exists(out, ec) && fs::equivalent(out, in.path, ec)) {
    return InvalidArgumentError("convert: the output ", out, " is the input");
  }
  if (options.format == ConvertFormat::kGguf) return WriteGguf(in, out, options);
  return WriteDirectory(in, out, options);
}

}  // namespace loom::model
