// A parsed GGUF file -> ModelFile: hyperparameters from the `<arch>.` keys, the tokenizer from the
// `tokenizer.` keys, and the tensor table.
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "loom/model/gguf_reader.h"

namespace loom::model {

namespace {

// Typed access to metadata values with errors that name the file and the key.
class Keys {
 public:
  Keys(const GgufFile& f, const std::string& name) : f_(f), name_(name) {}

  bool Has(const std::string& key) const { return f_.Find(key) != nullptr; }

  // An integer scalar; `fallback` when missing (an error when there is no fallback).
  StatusOr<int64_t> Int(const std::string& key, std::optional<int64_t> fallback) const {
    const GgufValue* v = f_.Find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return DataLossError(name_, ": missing metadata key '", key, "'");
    }
    if (v->is_array()) {
      return UnimplementedError(name_, ": metadata key '", key, "' is an array (", v->Summary(),
                                "); per-layer values are not supported");
    }
    const std::optional<int64_t> i = v->IntAt(0);
    if (!i) {
      return DataLossError(name_, ": metadata key '", key, "' is ", GgufTypeName(v->type), " ",
                           v->Summary(), "; expected an integer in int64 range");
    }
    return *i;
  }

  // A number (integer or float) scalar.
  StatusOr<double> Float(const std::string& key, double fallback) const {
    const GgufValue* v = f_.Find(key);
    if (v == nullptr) return fallback;
    const std::optional<double> d = v->is_array() ? std::nullopt : v->FloatAt(0);
    if (!d || v->elem_type == GgufType::kBool) {
      return DataLossError(name_, ": metadata key '", key, "' is ", GgufTypeName(v->type), " ",
                           v->Summary(), "; expected a number");
    }
    return *d;
  }

  StatusOr<bool> Bool(const std::string& key, bool fallback) const {
    const GgufValue* v = f_.Find(key);
    if (v == nullptr) return fallback;
    const std::optional<int64_t> i = v->is_array() ? std::nullopt : v->IntAt(0);
    if (!i) {
      return DataLossError(name_, ": metadata key '", key, "' is ", GgufTypeName(v->type),
                           "; expected a bool");
    }
    return *i != 0;
  }

  StatusOr<std::string> String(const std::string& key, std::optional<std::string> fallback) const {
    const GgufValue* v = f_.Find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return DataLossError(name_, ": missing metadata key '", key, "'");
    }
    if (v->is_array() || !v->is_string()) {
      return DataLossError(name_, ": metadata key '", key, "' is ", GgufTypeName(v->type),
                           "; expected a string");
    }
    return v->strings[0];
  }

  // An array of `elem` kind ("string", "number", "integer"), or null when missing.
  StatusOr<const GgufValue*> Array(const std::string& key, std::string_view elem) const {
    const GgufValue* v = f_.Find(key);
    if (v == nullptr) return static_cast<const GgufValue*>(nullptr);
    const bool ok = v->is_array() && ((elem == "string" && v->is_string()) ||
                                      (elem == "number" && (v->is_float() || v->is_integer())) ||
                                      (elem == "integer" && v->is_integer()));
    if (!ok) {
      return DataLossError(name_, ": metadata key '", key, "' is ", GgufTypeName(v->type), " ",
                           v->Summary(), "; expected an array of ", elem, "s");
    }
    return v;
  }

 private:
  const GgufFile& f_;
  const std::string& name_;
};

kernels::RopeStyle RopeStyleFor(const std::string& arch) {
  // llama.cpp's converters permute Llama-family q/k weights so that RoPE rotates adjacent pairs;
  // Qwen-family GGUFs keep Hugging Face's layout and rotate (x[i], x[i + d/2]) ("neox" in ggml).
  for (const char* halves : {"qwen2", "qwen3", "qwen2moe", "qwen3moe", "phi3", "gemma", "gemma2",
                             "gemma3", "stablelm", "gptneox", "falcon", "starcoder2"}) {
    if (arch == halves) return kernels::RopeStyle::kHalves;
  }
  return kernels::RopeStyle::kInterleaved;
}

// Multi-head latent attention (deepseek2).  llama.cpp's older files carry attn_kv_b and give the
// decompressed head sizes as key_length / value_length; newer ones split it into attn_k_b /
// attn_v_b and say key_length_mla / value_length_mla (key_length is then the latent's).
Status ReadMla(const Keys& k, const std::string& name, int64_t value_length, int64_t rope_dims,
               HParams* hp) {
  const std::string p = hp->arch + ".";
  LOOM_ASSIGN_OR_RETURN(hp->q_lora_rank, k.Int(p + "attention.q_lora_rank", int64_t{0}));
  hp->v_head_dim = value_length;
  if (k.Has(p + "attention.key_length_mla") || k.Has(p + "attention.value_length_mla")) {
    LOOM_ASSIGN_OR_RETURN(hp->head_dim, k.Int(p + "attention.key_length_mla", std::nullopt));
    LOOM_ASSIGN_OR_RETURN(hp->v_head_dim, k.Int(p + "attention.value_length_mla", std::nullopt));
  }
  hp->rope_dim = rope_dims;
  if (hp->rope_dim <= 0 || hp->rope_dim % 2 != 0 || hp->rope_dim >= hp->head_dim ||
      hp->v_head_dim <= 0 || hp->q_lora_rank < 0 || hp->kv_lora_rank > (int64_t{1} << 16) ||
      hp->q_lora_rank > (int64_t{1} << 16)) {
    return InvalidArgumentError(name, ": latent attention sizes do not fit: key head ",
                                hp->head_dim, ", value head ", hp->v_head_dim, ", rope part ",
                                hp->rope_dim, ", q_lora_rank ", hp->q_lora_rank, ", kv_lora_rank ",
                                hp->kv_lora_rank,
                                " (expected 0 < rope part < key head, rope part even)");
  }
  return OkStatus();
}

// Qwen2-MoE as llama.cpp reads it: experts of expert_feed_forward_length (else feed_forward_length
// / expert_used_count), one shared expert of expert_shared_feed_forward_length (else
// feed_forward_length), softmax weights of the top k as they are (not renormalised), times
// expert_weights_scale when given.
Status ReadQwen2MoeExperts(const Keys& k, const std::string& name, HParams* hp) {
  const std::string p = hp->arch + ".";
  if (!k.Has(p + "expert_feed_forward_length") && hp->n_experts_used > 0) {
    hp->expert_ffn_dim = hp->ffn_dim / hp->n_experts_used;
  }
  hp->n_shared_experts = 1;
  LOOM_ASSIGN_OR_RETURN(hp->shared_ffn_dim,
                        k.Int(p + "expert_shared_feed_forward_length", hp->ffn_dim));
  hp->expert_weights_norm = false;
  LOOM_ASSIGN_OR_RETURN(const double scale, k.Float(p + "expert_weights_scale", 0.0));
  hp->expert_weights_scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);
  if (hp->shared_ffn_dim <= 0 || hp->shared_ffn_dim > (int64_t{1} << 20) ||
      !(std::isfinite(hp->expert_weights_scale) && hp->expert_weights_scale > 0.0f)) {
    return InvalidArgumentError(name, ": ", p, "expert_shared_feed_forward_length ",
                                hp->shared_ffn_dim, " or expert_weights_scale ",
                                hp->expert_weights_scale, " is out of range");
  }
  return OkStatus();
}

// Routing keys of the mixtures of experts llama.cpp reads for deepseek2 (and the group keys for
// any architecture).
Status ReadRouting(const Keys& k, const std::string& name, HParams* hp) {
  const std::string p = hp->arch + ".";
  LOOM_ASSIGN_OR_RETURN(hp->n_expert_groups, k.Int(p + "expert_group_count", int64_t{1}));
  LOOM_ASSIGN_OR_RETURN(hp->n_expert_groups_used, k.Int(p + "expert_group_used_count", int64_t{1}));
  if (hp->n_expert_groups <= 0) hp->n_expert_groups = 1;
  if (hp->n_expert_groups > 1 &&
      (hp->n_expert_groups > kMaxExpertGroups || hp->n_experts % hp->n_expert_groups != 0 ||
       hp->n_expert_groups_used < 1 || hp->n_expert_groups_used > hp->n_expert_groups ||
       hp->n_experts_used > hp->n_expert_groups_used * (hp->n_experts / hp->n_expert_groups) ||
       hp->n_experts / hp->n_expert_groups < 2)) {
    return InvalidArgumentError(name, ": ", p, "expert_group_count ", hp->n_expert_groups,
                                " and expert_group_used_count ", hp->n_expert_groups_used,
                                " do not fit ", hp->n_experts, " experts of which ",
                                hp->n_experts_used, " are used");
  }
  if (hp->arch == "qwen2moe") return ReadQwen2MoeExperts(k, name, hp);
  if (hp->arch != "deepseek2") return OkStatus();
  LOOM_ASSIGN_OR_RETURN(hp->n_dense_layers, k.Int(p + "leading_dense_block_count", int64_t{0}));
  LOOM_ASSIGN_OR_RETURN(hp->n_shared_experts, k.Int(p + "expert_shared_count", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(const double scale, k.Float(p + "expert_weights_scale", 0.0));
  hp->expert_weights_scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);
  LOOM_ASSIGN_OR_RETURN(hp->expert_weights_norm, k.Bool(p + "expert_weights_norm", false));
  LOOM_ASSIGN_OR_RETURN(const int64_t gating, k.Int(p + "expert_gating_func", int64_t{0}));
  // llama.cpp's values: 0 unset (DeepSeek-V2: softmax), 1 softmax, 2 sigmoid.
  if (gating == 2) {
    hp->gating = HParams::Gating::kSigmoid;
  } else if (gating != 0 && gating != 1) {
    return UnimplementedError(name, ": ", p, "expert_gating_func ", gating,
                              " is not supported (1 softmax, 2 sigmoid)");
  }
  if (hp->n_dense_layers < 0 || hp->n_dense_layers > hp->n_layers || hp->n_shared_experts < 0 ||
      hp->n_shared_experts > 64 ||
      !(std::isfinite(hp->expert_weights_scale) && hp->expert_weights_scale > 0.0f)) {
    return InvalidArgumentError(name, ": ", p, "leading_dense_block_count ", hp->n_dense_layers,
                                ", expert_shared_count ", hp->n_shared_experts,
                                ", expert_weights_scale ", hp->expert_weights_scale,
                                " are out of range");
  }
  return OkStatus();
}

// YaRN (rope.scaling.type "yarn"): llama.cpp's keys.  The converter writes yarn_log_multiplier
// as 0.1 * mscale_all_dim; llama.cpp divides it back (and so does Loom).
Status ReadYarn(const Keys& k, const std::string& name, double factor, HParams* hp) {
  const std::string p = hp->arch + ".";
  RopeScaling& r = hp->rope_scaling;
  r.type = RopeScalingType::kYarn;
  r.factor = static_cast<float>(factor);
  if (r.original_context <= 0) r.original_context = hp->context_length;
  LOOM_ASSIGN_OR_RETURN(const double log_mul, k.Float(p + "rope.scaling.yarn_log_multiplier", 0.0));
  LOOM_ASSIGN_OR_RETURN(const double attn, k.Float(p + "rope.scaling.attn_factor", 1.0));
  LOOM_ASSIGN_OR_RETURN(const double fast, k.Float(p + "rope.scaling.yarn_beta_fast", 32.0));
  LOOM_ASSIGN_OR_RETURN(const double slow, k.Float(p + "rope.scaling.yarn_beta_slow", 1.0));
  for (const char* unsupported :
       {"rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor"}) {
    if (k.Has(p + unsupported)) {
      return UnimplementedError(name, ": ", p, unsupported, " is not supported");
    }
  }
  r.yarn_log_mul = static_cast<float>(log_mul / 0.1);
  r.attn_factor = static_cast<float>(attn);
  r.beta_fast = static_cast<float>(fast);
  r.beta_slow = static_cast<float>(slow);
  if (!(std::isfinite(r.yarn_log_mul) && std::isfinite(r.attn_factor) && r.attn_factor > 0.0f &&
        std::isfinite(r.beta_fast) && std::isfinite(r.beta_slow) && r.beta_fast > r.beta_slow &&
        r.beta_slow > 0.0f && factor < 1e6)) {
    return InvalidArgumentError(name, ": ", p, "rope.scaling yarn parameters out of range (factor ",
                                factor, ", log multiplier ", log_mul, ", attn_factor ", attn,
                                ", beta ", fast, "/", slow, ")");
  }
  return OkStatus();
}

Status ReadHParams(const Keys& k, const GgufFile& f, const std::string& name, HParams* hp) {
  LOOM_ASSIGN_OR_RETURN(hp->arch, k.String("general.architecture", std::nullopt));
  if (hp->arch.empty() || hp->arch.size() > 64) {
    return DataLossError(name, ": general.architecture '", hp->arch, "' is not a valid name");
  }
  const std::string p = hp->arch + ".";
  LOOM_ASSIGN_OR_RETURN(hp->dim, k.Int(p + "embedding_length", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp->n_layers, k.Int(p + "block_count", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp->n_heads, k.Int(p + "attention.head_count", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp->n_kv_heads, k.Int(p + "attention.head_count_kv", hp->n_heads));
  // Mixture of experts (llama.cpp's keys; Mixtral files say "llama" and carry them too).
  LOOM_ASSIGN_OR_RETURN(hp->n_experts, k.Int(p + "expert_count", int64_t{0}));
  LOOM_ASSIGN_OR_RETURN(hp->n_experts_used, k.Int(p + "expert_used_count", int64_t{0}));
  std::optional<int64_t> ffn_fallback;
  if (hp->n_experts > 0 && k.Has(p + "expert_feed_forward_length")) {
    LOOM_ASSIGN_OR_RETURN(ffn_fallback, k.Int(p + "expert_feed_forward_length", std::nullopt));
  }
  LOOM_ASSIGN_OR_RETURN(hp->ffn_dim, k.Int(p + "feed_forward_length", ffn_fallback));
  // Mixtral's experts are feed_forward_length wide; Qwen3-MoE says expert_feed_forward_length.
  hp->expert_ffn_dim = hp->n_experts > 0 ? ffn_fallback.value_or(hp->ffn_dim) : 0;
  LOOM_ASSIGN_OR_RETURN(hp->context_length, k.Int(p + "context_length", std::nullopt));
  if (hp->n_heads <= 0) {
    return InvalidArgumentError(name, ": ", p, "attention.head_count is ", hp->n_heads,
                                "; expected a positive count");
  }
  LOOM_ASSIGN_OR_RETURN(hp->head_dim, k.Int(p + "attention.key_length", hp->dim / hp->n_heads));
  LOOM_ASSIGN_OR_RETURN(const int64_t value_length,
                        k.Int(p + "attention.value_length", hp->head_dim));
  LOOM_ASSIGN_OR_RETURN(const int64_t rope_dims, k.Int(p + "rope.dimension_count", hp->head_dim));
  LOOM_ASSIGN_OR_RETURN(hp->kv_lora_rank, k.Int(p + "attention.kv_lora_rank", int64_t{0}));
  if (hp->kv_lora_rank > 0) {
    LOOM_RETURN_IF_ERROR(ReadMla(k, name, value_length, rope_dims, hp));
  } else if (value_length != hp->head_dim) {
    return UnimplementedError(name, ": ", p, "attention.value_length ", value_length,
                              " differs from ", p, "attention.key_length ", hp->head_dim);
  } else if (rope_dims != hp->head_dim) {
    return UnimplementedError(name, ": ", p, "rope.dimension_count ", rope_dims,
                              " differs from the head size ", hp->head_dim,
                              " (partial rotary embeddings are not supported)");
  }
  if (hp->is_moe()) LOOM_RETURN_IF_ERROR(ReadRouting(k, name, hp));
  LOOM_ASSIGN_OR_RETURN(const double eps, k.Float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  LOOM_ASSIGN_OR_RETURN(const double theta, k.Float(p + "rope.freq_base", 10000.0));
  hp->rms_eps = static_cast<float>(eps);
  hp->rope_theta = static_cast<float>(theta);
  hp->rope_style = RopeStyleFor(hp->arch);

  // RoPE scaling: rope.scaling.type (newer) or rope.scale_linear (older files).
  LOOM_ASSIGN_OR_RETURN(std::string scaling, k.String(p + "rope.scaling.type", ""));
  LOOM_ASSIGN_OR_RETURN(double factor, k.Float(p + "rope.scaling.factor", 0.0));
  if (scaling.empty() && k.Has(p + "rope.scale_linear")) {
    scaling = "linear";
    LOOM_ASSIGN_OR_RETURN(factor, k.Float(p + "rope.scale_linear", 1.0));
  }
  LOOM_ASSIGN_OR_RETURN(hp->rope_scaling.original_context,
                        k.Int(p + "rope.scaling.original_context_length", int64_t{0}));
  if (scaling == "linear" && factor != 1.0 && factor != 0.0) {
    hp->rope_scaling.type = RopeScalingType::kLinear;
    hp->rope_scaling.factor = static_cast<float>(factor);
  } else if (scaling == "yarn" && factor > 1.0) {
    LOOM_RETURN_IF_ERROR(ReadYarn(k, name, factor, hp));
  } else if (!scaling.empty() && scaling != "none" && scaling != "linear" && scaling != "yarn") {
    return UnimplementedError(name, ": ", p, "rope.scaling.type '", scaling,
                              "' is not supported (none, linear and yarn are)");
  }

  // The vocabulary is the embedding's row count; llama.cpp requires the token list to match it.
  hp->vocab_size = 0;
  for (const GgufTensor& t : f.tensors) {
    if (t.name == "token_embd.weight" && t.ne.size() == 2) hp->vocab_size = t.ne[1];
  }
  if (k.Has(p + "vocab_size")) {
    LOOM_ASSIGN_OR_RETURN(const int64_t v, k.Int(p + "vocab_size", std::nullopt));
    if (hp->vocab_size == 0) hp->vocab_size = v;
    if (v != hp->vocab_size) {
      return DataLossError(name, ": ", p, "vocab_size is ", v, " but token_embd.weight has ",
                           hp->vocab_size, " rows");
    }
  }
  bool has_output = false;
  for (const GgufTensor& t : f.tensors) has_output = has_output || t.name == "output.weight";
  hp->tied_embeddings = !has_output;
  return OkStatus();
}

// A special token id: -1 when missing or set to "none" (-1 or 0xFFFFFFFF, as converters write).
StatusOr<int32_t> TokenId(const Keys& k, const std::string& name, const std::string& key,
                          int64_t n_tokens, bool drop_if_invalid) {
  LOOM_ASSIGN_OR_RETURN(const int64_t id, k.Int(key, int64_t{-1}));
  if (id == -1 || id == 0xFFFFFFFFll) return -1;
  if (id < 0 || (n_tokens > 0 && id >= n_tokens) || id > INT32_MAX) {
    if (drop_if_invalid) return -1;
    return DataLossError(name, ": ", key, " is ", id, " but the vocabulary has ", n_tokens,
                         " tokens");
  }
  return static_cast<int32_t>(id);
}

Status ReadTokenizer(const Keys& k, const std::string& name, TokenizerSpec* t) {
  LOOM_ASSIGN_OR_RETURN(t->model, k.String("tokenizer.ggml.model", ""));
  LOOM_ASSIGN_OR_RETURN(const GgufValue* tokens, k.Array("tokenizer.ggml.tokens", "string"));
  if (tokens != nullptr) t->tokens = tokens->strings;
  const int64_t n = static_cast<int64_t>(t->tokens.size());

  LOOM_ASSIGN_OR_RETURN(const GgufValue* scores, k.Array("tokenizer.ggml.scores", "number"));
  if (scores != nullptr) {
    if (scores->count != n) {
      return DataLossError(name, ": tokenizer.ggml.scores has ", scores->count,
                           " entries but tokenizer.ggml.tokens has ", n);
    }
    t->scores.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const double s = scores->FloatAt(i).value_or(std::nan(""));
      if (std::isnan(s)) {
        return DataLossError(name, ": tokenizer.ggml.scores[", i, "] is not a number");
      }
      t->scores[static_cast<size_t>(i)] = static_cast<float>(s);
    }
  }
  LOOM_ASSIGN_OR_RETURN(const GgufValue* types, k.Array("tokenizer.ggml.token_type", "integer"));
  if (types != nullptr) {
    if (types->count != n) {
      return DataLossError(name, ": tokenizer.ggml.token_type has ", types->count,
                           " entries but tokenizer.ggml.tokens has ", n);
    }
    t->token_types.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t type = types->IntAt(i).value_or(-1);
      if (type < 0 || type > 6) {
        return DataLossError(name, ": tokenizer.ggml.token_type[", i, "] is ", type,
                             " (expected 0 to 6)");
      }
      t->token_types[static_cast<size_t>(i)] = static_cast<int32_t>(type);
    }
  }
  LOOM_ASSIGN_OR_RETURN(const GgufValue* merges, k.Array("tokenizer.ggml.merges", "string"));
  if (merges != nullptr) t->merges = merges->strings;
  LOOM_ASSIGN_OR_RETURN(t->pre, k.String("tokenizer.ggml.pre", ""));
  LOOM_ASSIGN_OR_RETURN(t->bos_id, TokenId(k, name, "tokenizer.ggml.bos_token_id", n, false));
  LOOM_ASSIGN_OR_RETURN(t->eos_id, TokenId(k, name, "tokenizer.ggml.eos_token_id", n, false));
  LOOM_ASSIGN_OR_RETURN(t->unk_id, TokenId(k, name, "tokenizer.ggml.unknown_token_id", n, false));
  LOOM_ASSIGN_OR_RETURN(t->pad_id, TokenId(k, name, "tokenizer.ggml.padding_token_id", n, true));
  // llama.cpp's defaults: SentencePiece vocabularies add BOS and a dummy-prefix space, byte-level
  // BPE ones neither, unless the file says otherwise.
  const bool spm = t->model == "llama";
  LOOM_ASSIGN_OR_RETURN(t->add_bos, k.Bool("tokenizer.ggml.add_bos_token", spm));
  LOOM_ASSIGN_OR_RETURN(t->add_eos, k.Bool("tokenizer.ggml.add_eos_token", false));
  LOOM_ASSIGN_OR_RETURN(t->add_space_prefix, k.Bool("tokenizer.ggml.add_space_prefix", spm));
  LOOM_ASSIGN_OR_RETURN(t->chat_template, k.String("tokenizer.chat_template", ""));
  t->stop_at_bos = false;
  return OkStatus();
}

// Llama 3.1+ GGUFs carry llama3 rope scaling as rope_freqs.weight: head_dim / 2 f32 divisors of
// the pairs' frequencies (llama.cpp's converter computes them from the config's rope_scaling).
Status ReadRopeFreqs(ModelFile& m) {
  const auto it = m.tensors.find("rope_freqs.weight");
  if (it == m.tensors.end()) return OkStatus();
  const TensorInfo& t = it->second;
  const int64_t n = m.hparams.head_dim / 2;
  if (t.type != kernels::DType::kF32 || t.shape != std::vector<int64_t>{n}) {
    return DataLossError(m.path, ": rope_freqs.weight is ", kernels::Traits(t.type).name, " with ",
                         t.elements(), " values; expected ", n, " f32 values (head_dim / 2)");
  }
  std::vector<float>& f = m.hparams.rope_scaling.freq_factors;
  f.resize(static_cast<size_t>(n));
  std::memcpy(f.data(), t.data, static_cast<size_t>(n) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::isfinite(f[i]) && f[i] > 0.0f)) {
      return DataLossError(m.path, ": rope_freqs.weight[", i, "] is ", f[i],
                           " (expected a positive number)");
    }
  }
  return OkStatus();
}

}  // namespace

Status GgufToModel(const GgufFile& gguf, std::span<const std::byte> bytes, ModelFile* model) {
  const std::string& name = model->path;
  if (static_cast<int64_t>(bytes.size()) != gguf.file_size) {
    return InternalError(name, ": GGUF parsed from ", gguf.file_size, " bytes but given ",
                         bytes.size());
  }
  model->format = "gguf";
  for (const auto& [key, value] : gguf.metadata) model->metadata[key] = value.Summary();
  model->metadata["gguf.version"] = std::to_string(gguf.version);

  model->tensors.clear();
  for (const GgufTensor& g : gguf.tensors) {
    if (!g.type->dtype) {
      return UnimplementedError(name, ": unsupported tensor type ", g.type->name, " in tensor '",
                                g.name, "'");
    }
    TensorInfo t;
    t.name = g.name;
    t.type = *g.type->dtype;
    t.shape.assign(g.ne.rbegin(), g.ne.rend());
    t.file_offset = gguf.data_offset + g.offset;
    t.data = bytes.data() + t.file_offset;
    t.size_bytes = g.size_bytes;
    model->tensors.emplace(g.name, std::move(t));
  }

  const Keys keys(gguf, name);
  LOOM_RETURN_IF_ERROR(ReadHParams(keys, gguf, name, &model->hparams));
  LOOM_RETURN_IF_ERROR(ReadRopeFreqs(*model));
  return ReadTokenizer(keys, name, &model->tokenizer);
}

}  // namespace loom::model
