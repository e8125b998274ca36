#include "loom/model/model_file.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "loom/model/gguf_reader.h"
#include "loom/model/hf_model.h"
#include "loom/model/llama2c.h"

namespace loom::model {

namespace {

// Limits on hyperparameters: far above any real model, low enough that products of a few of them
// cannot overflow 64 bits and that nobody allocates a KV cache or RoPE table from a corrupt value.
constexpr int64_t kMaxDim = int64_t{1} << 18;
constexpr int64_t kMaxFfnDim = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxContext = int64_t{1} << 24;
constexpr int64_t kMaxExperts = int64_t{1} << 12;

// Architectures whose tensors follow the Llama layout listed in model_file.h.
bool HasLlamaLayout(const ModelFile& m) {
  const std::string& a = m.hparams.arch;
  return m.format == "llama2c" || a == "llama" || a == "mistral" || a == "qwen2" || a == "qwen3" ||
         a == "qwen2moe" || a == "qwen3moe";
}

// How the file spells a hyperparameter, for error messages.
std::string KeyName(const ModelFile& m, std::string_view field) {
  struct Name {
    std::string_view field, gguf, llama2c, hf;
  };
  static constexpr Name kNames[] = {
      {"dim", "embedding_length", "dim", "hidden_size"},
      {"n_layers", "block_count", "n_layers", "num_hidden_layers"},
      {"n_heads", "attention.head_count", "n_heads", "num_attention_heads"},
      {"n_kv_heads", "attention.head_count_kv", "n_kv_heads", "num_key_value_heads"},
      {"head_dim", "attention.key_length", "dim / n_heads", "head_dim"},
      {"ffn_dim", "feed_forward_length", "hidden_dim", "intermediate_size"},
      {"vocab_size", "vocab_size", "vocab_size", "vocab_size"},
      {"context_length", "context_length", "seq_len", "max_position_embeddings"},
      {"rms_eps", "attention.layer_norm_rms_epsilon", "rms_eps", "rms_norm_eps"},
      {"rope_theta", "rope.freq_base", "rope_theta", "rope_theta"},
      {"rope_scaling", "rope.scaling.factor", "rope_scaling", "rope_scaling"},
      {"n_experts", "expert_count", "-", "num_local_experts"},
      {"n_experts_used", "expert_used_count", "-", "num_experts_per_tok"},
      {"expert_ffn_dim", "expert_feed_forward_length", "-", "moe_intermediate_size"},
  };
  for (const Name& n : kNames) {
    if (n.field != field) continue;
    if (m.format == "gguf") return StrCat(m.hparams.arch, ".", n.gguf);
    if (m.format == "llama2c") return StrCat("llama2.c header ", n.llama2c);
    if (m.format == "hf" || m.format == "mlx") return StrCat("config.json ", n.hf);
  }
  return std::string(field);
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Status CheckRange(const ModelFile& m, std::string_view field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return InvalidArgumentError(m.path, ": ", KeyName(m, field), " is ", v, " (expected ", lo,
                                " to ", hi, ")");
  }
  return OkStatus();
}

Status CheckHParams(const ModelFile& m) {
  const HParams& hp = m.hparams;
  LOOM_RETURN_IF_ERROR(CheckRange(m, "dim", hp.dim, 1, kMaxDim));
  LOOM_RETURN_IF_ERROR(CheckRange(m, "n_layers", hp.n_layers, 1, kMaxLayers));
  LOOM_RETURN_IF_ERROR(CheckRange(m, "n_heads", hp.n_heads, 1, kMaxHeads));
  LOOM_RETURN_IF_ERROR(CheckRange(m, "n_kv_heads", hp.n_kv_heads, 1, hp.n_heads));
  LOOM_RETURN_IF_ERROR(CheckRange(m, "head_dim", hp.head_dim, 2, kMaxHeadDim));
  LOOM_RETURN_IF_ERROR(CheckRange(m, "ffn_dim", hp.ffn_dim, 1, kMaxFfnDim));
  LOOM_RETURN_IF_ERROR(CheckRange(m, "vocab_size", hp.vocab_size, 1, kMaxVocab));
  LOOM_RETURN_IF_ERROR(CheckRange(m, "context_length", hp.context_length, 1, kMaxContext));
  if (hp.n_heads % hp.n_kv_heads != 0) {
    return InvalidArgumentError(m.path, ": ", KeyName(m, "n_heads"), " ", hp.n_heads,
                                " is not a multiple of ", KeyName(m, "n_kv_heads"), " ",
                                hp.n_kv_heads);
  }
  if (hp.head_dim % 2 != 0) {
    return InvalidArgumentError(m.path, ": ", KeyName(m, "head_dim"), " is ", hp.head_dim,
                                "; rotary embeddings need an even head size");
  }
  if (!(hp.rms_eps > 0.0f && hp.rms_eps < 1.0f)) {
    return InvalidArgumentError(m.path, ": ", KeyName(m, "rms_eps"), " is ", hp.rms_eps,
                                " (expected a value in (0, 1))");
  }
  if (!(std::isfinite(hp.rope_theta) && hp.rope_theta > 0.0f)) {
    return InvalidArgumentError(m.path, ": ", KeyName(m, "rope_theta"), " is ", hp.rope_theta,
                                " (expected a positive number)");
  }
  if (!(std::isfinite(hp.rope_scaling.factor) && hp.rope_scaling.factor > 0.0f) ||
      hp.rope_scaling.original_context < 0 || hp.rope_scaling.original_context > kMaxContext) {
    return InvalidArgumentError(m.path, ": ", KeyName(m, "rope_scaling"), " is ",
                                hp.rope_scaling.factor, " (original context ",
                                hp.rope_scaling.original_context, ")");
  }
  if (hp.n_experts != 0) {
    LOOM_RETURN_IF_ERROR(CheckRange(m, "n_experts", hp.n_experts, 1, kMaxExperts));
    LOOM_RETURN_IF_ERROR(CheckRange(m, "n_experts_used", hp.n_experts_used, 1, hp.n_experts));
    LOOM_RETURN_IF_ERROR(CheckRange(m, "expert_ffn_dim", hp.expert_ffn_dim, 1, kMaxFfnDim));
  } else if (hp.n_experts_used != 0) {
    return InvalidArgumentError(m.path, ": ", KeyName(m, "n_experts_used"), " is ",
                                hp.n_experts_used, " but the model has no experts (",
                                KeyName(m, "n_experts"), " missing or 0)");
  } else if (hp.arch == "qwen3moe" || hp.arch == "qwen2moe") {
    return InvalidArgumentError(m.path, ": a ", hp.arch, " model needs ", KeyName(m, "n_experts"),
                                " and ", KeyName(m, "n_experts_used"));
  }
  return OkStatus();
}

Status CheckTensor(const ModelFile& m, const std::string& name, std::vector<int64_t> shape) {
  auto it = m.tensors.find(name);
  if (it == m.tensors.end()) {
    return DataLossError(m.path, ": missing tensor '", name, "' (", m.hparams.arch,
                         " models need it with shape ", ShapeText(shape), ")");
  }
  if (it->second.shape != shape) {
    return DataLossError(m.path, ": tensor '", name, "' has shape ", ShapeText(it->second.shape),
                         " but the hyperparameters imply ", ShapeText(shape));
  }
  return OkStatus();
}

Status CheckLlamaTensors(const ModelFile& m) {
  const HParams& hp = m.hparams;
  const int64_t q_dim = hp.n_heads * hp.head_dim;
  const int64_t kv_dim = hp.n_kv_heads * hp.head_dim;
  LOOM_RETURN_IF_ERROR(CheckTensor(m, "token_embd.weight", {hp.vocab_size, hp.dim}));
  LOOM_RETURN_IF_ERROR(CheckTensor(m, "output_norm.weight", {hp.dim}));
  const bool has_output = m.tensors.count("output.weight") != 0;
  if (hp.tied_embeddings && has_output) {
    return DataLossError(m.path, ": tied embeddings but an output.weight tensor is present");
  }
  if (!hp.tied_embeddings) {
    LOOM_RETURN_IF_ERROR(CheckTensor(m, "output.weight", {hp.vocab_size, hp.dim}));
  }
  for (int64_t l = 0; l < hp.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "attn_norm.weight", {hp.dim}));
    LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "attn_q.weight", {q_dim, hp.dim}));
    LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "attn_k.weight", {kv_dim, hp.dim}));
    LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "attn_v.weight", {kv_dim, hp.dim}));
    LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "attn_output.weight", {hp.dim, q_dim}));
    LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "ffn_norm.weight", {hp.dim}));
    if (hp.is_moe()) {
      const int64_t e = hp.n_experts, f = hp.expert_ffn_dim;
      LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "ffn_gate_inp.weight", {e, hp.dim}));
      if (m.tensors.count(p + "ffn_gate_exps.weight") == 0 &&
          m.tensors.count(p + "ffn_gate.0.weight") != 0) {
        // One tensor per expert (Hugging Face files, early llama.cpp Mixtral files).
        for (int64_t x = 0; x < e; ++x) {
          const std::string i = "." + std::to_string(x) + ".weight";
          LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "ffn_gate" + i, {f, hp.dim}));
          LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "ffn_up" + i, {f, hp.dim}));
          LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "ffn_down" + i, {hp.dim, f}));
        }
        continue;
      }
      LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "ffn_gate_exps.weight", {e, f, hp.dim}));
      LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "ffn_up_exps.weight", {e, f, hp.dim}));
      LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "ffn_down_exps.weight", {e, hp.dim, f}));
      continue;
    }
    LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "ffn_gate.weight", {hp.ffn_dim, hp.dim}));
    LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "ffn_up.weight", {hp.ffn_dim, hp.dim}));
    LOOM_RETURN_IF_ERROR(CheckTensor(m, p + "ffn_down.weight", {hp.dim, hp.ffn_dim}));
  }
  return OkStatus();
}

Status CheckTokenizer(const ModelFile& m) {
  const TokenizerSpec& t = m.tokenizer;
  const int64_t n = static_cast<int64_t>(t.tokens.size());
  if (n != 0 && n != m.hparams.vocab_size) {
    return DataLossError(m.path, ": the tokenizer has ", n, " tokens but the model's vocabulary (",
                         KeyName(m, "vocab_size"), ") is ", m.hparams.vocab_size);
  }
  const int64_t limit = m.hparams.vocab_size;
  for (auto [key, id] : {std::pair<const char*, int32_t>{"bos", t.bos_id},
                         {"eos", t.eos_id},
                         {"unknown", t.unk_id},
                         {"padding", t.pad_id}}) {
    if (id < -1 || id >= limit) {
      return DataLossError(m.path, ": the ", key, " token id is ", id, " but the vocabulary has ",
                           limit, " tokens");
    }
  }
  return OkStatus();
}

std::string HexPrefix(std::span<const std::byte> bytes) {
  std::string s;
  for (size_t i = 0; i < bytes.size() && i < 8; ++i) {
    char buf[4];
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned>(bytes[i]));
    s += buf;
  }
  return s;
}

}  // namespace

bool IsExpertTensor(const std::string& name) {
  if (name.find("_exps.") != std::string::npos) return true;
  for (const char* kind : {".ffn_gate.", ".ffn_up.", ".ffn_down."}) {
    const size_t at = name.find(kind);
    if (at == std::string::npos) continue;
    const size_t digits = at + std::strlen(kind);
    return digits < name.size() && name[digits] >= '0' && name[digits] <= '9';
  }
  return false;
}

kernels::MatrixView TensorInfo::matrix() const {
  kernels::MatrixView v;
  v.type = type;
  v.cols = shape.empty() ? 0 : shape.back();
  v.rows = v.cols == 0 ? 0 : elements() / v.cols;
  v.data = data;
  const kernels::DTypeTraits& t = kernels::Traits(type);
  v.row_stride = v.cols / t.block_elems * t.block_bytes;
  if (scales != nullptr && group_size > 0) {  // MLX: the per-group scales and biases
    v.scales = scales;
    v.biases = biases;
    v.scale_type = scale_type;
    v.group_size = group_size;
    v.scale_row_stride = v.cols / group_size * kernels::Traits(scale_type).block_bytes;
  }
  return v;
}

StatusOr<const TensorInfo*> ModelFile::Find(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) return NotFoundError(path, ": tensor '", name, "' not found");
  return &it->second;
}

StatusOr<const TensorInfo*> ModelFile::Find(const std::string& name,
                                            const std::vector<int64_t>& expected_shape) const {
  LOOM_ASSIGN_OR_RETURN(const TensorInfo* t, Find(name));
  if (t->shape != expected_shape) {
    return DataLossError(path, ": tensor '", name, "' has shape ", ShapeText(t->shape),
                         ", expected ", ShapeText(expected_shape));
  }
  return t;
}

int64_t ModelFile::total_tensor_bytes() const {
  int64_t total = 0;
  for (const auto& [name, t] : tensors) total += t.size_bytes + 2 * t.scales_bytes;
  return total;
}

ParameterCounts CountParameters(const ModelFile& model) {
  const HParams& hp = model.hparams;
  ParameterCounts c;
  double active = 0, bytes = 0;
  for (const auto& [name, t] : model.tensors) {
    const int64_t n = t.elements();
    const int64_t size = t.size_bytes + 2 * t.scales_bytes;
    c.total += n;
    double share = 1.0;  // of the tensor a token uses
    if (hp.is_moe() && IsExpertTensor(name)) {
      share = static_cast<double>(hp.n_experts_used) / static_cast<double>(hp.n_experts);
    }
    active += share * static_cast<double>(n);
    if (name == "token_embd.weight" && !hp.tied_embeddings && !t.shape.empty()) {
      bytes += static_cast<double>(size) / static_cast<double>(t.shape[0]);
    } else {
      bytes += share * static_cast<double>(size);
    }
  }
  c.active = static_cast<int64_t>(std::llround(active));
  c.active_bytes_per_token = static_cast<int64_t>(std::llround(bytes));
  return c;
}

Status ValidateModel(const ModelFile& model) {
  LOOM_RETURN_IF_ERROR(CheckHParams(model));
  for (const auto& [name, t] : model.tensors) {
    if (t.shape.empty() || t.data == nullptr || t.size_bytes <= 0) {
      return InternalError(model.path, ": tensor '", name, "' was not set up");
    }
  }
  if (HasLlamaLayout(model)) LOOM_RETURN_IF_ERROR(CheckLlamaTensors(model));
  return CheckTokenizer(model);
}

StatusOr<std::unique_ptr<ModelFile>> OpenModelFromBytes(std::span<const std::byte> bytes,
                                                        const std::string& name) {
  auto model = std::make_unique<ModelFile>();
  model->path = name;
  uint32_t magic = 0;
  if (bytes.size() >= 4) std::memcpy(&magic, bytes.data(), 4);
  if (bytes.empty()) {
    return InvalidArgumentError(name, ": empty file, not a model");
  } else if (bytes.size() >= 4 && magic == kGgufMagic) {
    LOOM_ASSIGN_OR_RETURN(GgufFile gguf, ParseGguf(bytes, name));
    LOOM_RETURN_IF_ERROR(GgufToModel(gguf, bytes, model.get()));
  } else if (HasLlama2cMagic(bytes) || LooksLikeLlama2cLegacy(bytes)) {
    LOOM_RETURN_IF_ERROR(Llama2cToModel(bytes, model.get()));
  } else {
    return InvalidArgumentError(name, ": not a model file I know (no GGUF or llama2.c header; ",
                                "first bytes ", HexPrefix(bytes), ", size ", bytes.size(), ")");
  }
  LOOM_RETURN_IF_ERROR(ValidateModel(*model));
  return model;
}

StatusOr<std::unique_ptr<ModelFile>> OpenModel(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return OpenModelDirectory(path);
  const std::filesystem::path p = path;
  if (p.extension() == ".safetensors" || p.filename() == "config.json") {
    return InvalidArgumentError(path, ": give the model directory (", p.parent_path().string(),
                                "), which holds config.json and the safetensors files");
  }
  LOOM_ASSIGN_OR_RETURN(base::MappedFile file, base::MappedFile::Open(path));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ModelFile> model, OpenModelFromBytes(file.bytes(), path));
  // The tensors point into the mapping, whose address does not change when it is moved.
  model->mappings.push_back(std::move(file));
  return model;
}

}  // namespace loom::model
