// config.json of Hugging Face / MLX model directories <-> HParams (declared in hf_model.h).
#include <array>
#include <charconv>
#include <cstdlib>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "loom/model/hf_model.h"

namespace loom::model {

namespace {

using Json = nlohmann::json;

constexpr std::array kHfArchs = {
    HfArchName{"llama", "LlamaForCausalLM", "llama"},
    HfArchName{"mistral", "MistralForCausalLM", "mistral"},
    HfArchName{"qwen2", "Qwen2ForCausalLM", "qwen2"},
    HfArchName{"qwen3", "Qwen3ForCausalLM", "qwen3"},
    HfArchName{"mixtral", "MixtralForCausalLM", "llama"},
    HfArchName{"qwen2_moe", "Qwen2MoeForCausalLM", "qwen2moe"},
    HfArchName{"qwen3_moe", "Qwen3MoeForCausalLM", "qwen3moe"},
    HfArchName{"deepseek_v3", "DeepseekV3ForCausalLM", "deepseek2"},
    HfArchName{"deepseek_v2", "DeepseekV2ForCausalLM", "deepseek2"},
};

bool IsDeepseek(std::string_view model_type) {
  return model_type == "deepseek_v3" || model_type == "deepseek_v2";
}

std::string Short(const Json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Typed access to config.json keys; null counts as missing (configs write "head_dim": null).
class ConfigKeys {
 public:
  ConfigKeys(const Json& j, const std::string& name) : j_(j), name_(name) {}

  const Json* Get(const char* key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  StatusOr<int64_t> Int(const char* key, std::optional<int64_t> fallback) const {
    const Json* v = Get(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return InvalidArgumentError(name_, ": missing \"", key, "\"");
    }
    return IntValue(*v, key);
  }

  StatusOr<int64_t> IntValue(const Json& v, const char* key) const {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return static_cast<int64_t>(v.get<uint64_t>());
      }
    } else if (v.is_number_integer()) {
      return v.get<int64_t>();
    } else if (v.is_number_float()) {
      // Some exporters write integers as 4096.0.
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
        return static_cast<int64_t>(d);
      }
    }
    return InvalidArgumentError(name_, ": \"", key, "\" is ", Short(v), ", expected an integer");
  }

  StatusOr<double> Float(const char* key, double fallback) const {
    const Json* v = Get(key);
    if (v == nullptr) return fallback;
    return FloatValue(*v, key);
  }

  StatusOr<double> FloatValue(const Json& v, const char* key) const {
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      return InvalidArgumentError(name_, ": \"", key, "\" is ", Short(v), ", expected a number");
    }
    return v.get<double>();
  }

  StatusOr<bool> Bool(const char* key, bool fallback) const {
    const Json* v = Get(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) {
      return InvalidArgumentError(name_, ": \"", key, "\" is ", Short(*v), ", expected true/false");
    }
    return v->get<bool>();
  }

  StatusOr<std::string> String(const char* key, const std::string& fallback) const {
    const Json* v = Get(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) {
      return InvalidArgumentError(name_, ": \"", key, "\" is ", Short(*v), ", expected a string");
    }
    return v->get<std::string>();
  }

 private:
  const Json& j_;
  const std::string& name_;
};

// DeepSeek's YaRN: the frequency ramp between beta_fast and beta_slow over the original context,
// and the attention scores scaled by mscale^2, mscale = 1 + 0.1 * mscale_all_dim * ln(factor)
// (GGUF: rope.scaling.yarn_log_multiplier = 0.1 * mscale_all_dim).  DeepSeek's modeling code also
// scales the rotation by mscale(mscale) / mscale(mscale_all_dim), which is 1 in the released
// configs (both 1.0 in V3, 0.707 in V2); other values are refused.
Status ReadDeepseekYarn(const ConfigKeys& r, const std::string& name, HParams* hp) {
  RopeScaling& s = hp->rope_scaling;
  LOOM_ASSIGN_OR_RETURN(const double factor, r.Float("factor", 0.0));
  LOOM_ASSIGN_OR_RETURN(s.original_context, r.Int("original_max_position_embeddings", int64_t{0}));
  LOOM_ASSIGN_OR_RETURN(const double fast, r.Float("beta_fast", 32.0));
  LOOM_ASSIGN_OR_RETURN(const double slow, r.Float("beta_slow", 1.0));
  LOOM_ASSIGN_OR_RETURN(const double mscale, r.Float("mscale", 1.0));
  LOOM_ASSIGN_OR_RETURN(const double all_dim, r.Float("mscale_all_dim", 0.0));
  LOOM_ASSIGN_OR_RETURN(const double attn, r.Float("attention_factor", 1.0));
  if (!(factor > 1.0 && factor < 1e6) || s.original_context <= 0 || !(fast > slow && slow > 0.0) ||
      !(std::fabs(all_dim) < 1e3) || attn != 1.0) {
    return InvalidArgumentError(name, ": rope_scaling yarn parameters out of range (factor ",
                                factor, ", original_max_position_embeddings ",
                                s.original_context, ", beta_fast ", fast, ", beta_slow ", slow,
                                ", mscale_all_dim ", all_dim, ", attention_factor ", attn,
                                "; expected factor > 1, a positive original context, beta_fast > "
                                "beta_slow > 0, attention_factor 1)");
  }
  if (mscale != all_dim) {
    return UnimplementedError(name, ": rope_scaling mscale ", mscale, " differs from mscale_all_dim ",
                              all_dim, " (the rotation would be scaled; not supported)");
  }
  s.type = RopeScalingType::kYarn;
  s.factor = static_cast<float>(factor);
  s.beta_fast = static_cast<float>(fast);
  s.beta_slow = static_cast<float>(slow);
  s.yarn_log_mul = static_cast<float>(all_dim);
  s.attn_factor = 1.0f;
  return OkStatus();
}

Status ReadRopeScaling(const ConfigKeys& k, const std::string& name, HParams* hp) {
  const Json* rs = k.Get("rope_scaling");
  if (rs == nullptr) rs = k.Get("rope_parameters");  // newer transformers
  if (rs == nullptr) return OkStatus();
  if (!rs->is_object()) {
    return InvalidArgumentError(name, ": \"rope_scaling\" is ", Short(*rs),
                                ", expected an object or null");
  }
  const ConfigKeys r(*rs, name);
  LOOM_ASSIGN_OR_RETURN(std::string type, r.String("rope_type", ""));
  if (type.empty()) {
    LOOM_ASSIGN_OR_RETURN(type, r.String("type", "default"));
  }
  if (r.Get("rope_theta") != nullptr && k.Get("rope_theta") == nullptr) {
    LOOM_ASSIGN_OR_RETURN(const double theta, r.Float("rope_theta", 10000.0));
    hp->rope_theta = static_cast<float>(theta);
  }
  RopeScaling& s = hp->rope_scaling;
  if (type == "default" || type == "none") return OkStatus();
  if (type == "yarn" && hp->arch == "deepseek2") return ReadDeepseekYarn(r, name, hp);
  if (type != "linear" && type != "llama3") {
    return UnimplementedError(name, ": rope_scaling type '", type,
                              "' is not supported (default, linear and llama3 are)");
  }
  LOOM_ASSIGN_OR_RETURN(const double factor, r.Float("factor", 0.0));
  if (!(factor > 0.0)) {
    return InvalidArgumentError(name, ": rope_scaling factor is ", factor,
                                " (expected a positive number)");
  }
  s.factor = static_cast<float>(factor);
  if (type == "linear") {
    s.type = RopeScalingType::kLinear;
    return OkStatus();
  }
  s.type = RopeScalingType::kLlama3;
  LOOM_ASSIGN_OR_RETURN(const double low, r.Float("low_freq_factor", 1.0));
  LOOM_ASSIGN_OR_RETURN(const double high, r.Float("high_freq_factor", 4.0));
  LOOM_ASSIGN_OR_RETURN(s.original_context, r.Int("original_max_position_embeddings", 8192));
  if (!(low > 0.0 && high > low)) {
    return InvalidArgumentError(name, ": rope_scaling low_freq_factor ", low,
                                " and high_freq_factor ", high,
                                " (expected 0 < low_freq_factor < high_freq_factor)");
  }
  if (s.original_context <= 0) {
    return InvalidArgumentError(name, ": rope_scaling original_max_position_embeddings is ",
                                s.original_context, " (expected a positive count)");
  }
  s.low_freq_factor = static_cast<float>(low);
  s.high_freq_factor = static_cast<float>(high);
  return OkStatus();
}

// bos_token_id / eos_token_id: an int, a list of ints, or null.
Status ReadSpecialIds(const ConfigKeys& k, const std::string& name, HfConfig* c) {
  if (const Json* bos = k.Get("bos_token_id"); bos != nullptr) {
    const Json& v = bos->is_array() && !bos->empty() ? (*bos)[0] : *bos;
    LOOM_ASSIGN_OR_RETURN(const int64_t id, k.IntValue(v, "bos_token_id"));
    if (id < 0 || id >= c->hp.vocab_size) {
      return InvalidArgumentError(name, ": bos_token_id ", id, " is outside the vocabulary of ",
                                  c->hp.vocab_size);
    }
    c->bos_id = static_cast<int32_t>(id);
  }
  if (const Json* eos = k.Get("eos_token_id"); eos != nullptr) {
    const std::vector<Json> items =
        eos->is_array() ? eos->get<std::vector<Json>>() : std::vector<Json>{*eos};
    for (const Json& v : items) {
      LOOM_ASSIGN_OR_RETURN(const int64_t id, k.IntValue(v, "eos_token_id"));
      if (id < 0 || id >= c->hp.vocab_size) {
        return InvalidArgumentError(name, ": eos_token_id ", id, " is outside the vocabulary of ",
                                    c->hp.vocab_size);
      }
      c->eos_ids.push_back(static_cast<int32_t>(id));
    }
  }
  return OkStatus();
}

// Features of the supported families that the forward pass does not implement.
Status CheckUnsupported(const ConfigKeys& k, const std::string& name, const HfConfig& c) {
  LOOM_ASSIGN_OR_RETURN(const std::string act, k.String("hidden_act", "silu"));
  if (act != "silu") {
    return UnimplementedError(name, ": hidden_act '", act, "' is not supported (silu is)");
  }
  LOOM_ASSIGN_OR_RETURN(const bool mlp_bias, k.Bool("mlp_bias", false));
  if (mlp_bias) return UnimplementedError(name, ": mlp_bias true is not supported");
  if (c.model_type != "qwen2" && c.model_type != "qwen2_moe") {
    // Qwen2 has q/k/v biases by definition; Llama/Mistral/Qwen3 with attention_bias would also
    // need an output-projection bias, which the forward pass lacks.
    LOOM_ASSIGN_OR_RETURN(const bool attention_bias, k.Bool("attention_bias", false));
    if (attention_bias) {
      return UnimplementedError(name, ": attention_bias true is not supported for ", c.model_type);
    }
  }
  LOOM_ASSIGN_OR_RETURN(const double partial, k.Float("partial_rotary_factor", 1.0));
  if (partial != 1.0) {
    return UnimplementedError(name, ": partial_rotary_factor ", partial,
                              " is not supported (rotary embeddings cover whole heads)");
  }
  LOOM_ASSIGN_OR_RETURN(const bool sliding, k.Bool("use_sliding_window", false));
  if (sliding && c.model_type != "mistral" && c.model_type != "mixtral") {
    return UnimplementedError(name, ": use_sliding_window true is not supported for ",
                              c.model_type);
  }
  return OkStatus();
}

// Qwen-MoE's sparse-layer pattern: Loom runs models whose every layer is a mixture.
Status CheckAllLayersSparse(const ConfigKeys& k, const std::string& name) {
  LOOM_ASSIGN_OR_RETURN(const int64_t step, k.Int("decoder_sparse_step", int64_t{1}));
  if (step != 1) {
    return UnimplementedError(name, ": decoder_sparse_step ", step,
                              " is not supported (every layer a mixture of experts: 1)");
  }
  if (const Json* only = k.Get("mlp_only_layers"); only != nullptr) {
    if (!only->is_array() || !only->empty()) {
      return UnimplementedError(name, ": mlp_only_layers ", Short(*only),
                                " is not supported (dense layers among the experts; expected [])");
    }
  }
  return OkStatus();
}

// DeepSeek-V2/V3 (deepseek_v2 / deepseek_v3, Kimi K2): latent attention and the routing keys.
Status ReadDeepseek(const ConfigKeys& k, const std::string& name, HParams* hp) {
  LOOM_ASSIGN_OR_RETURN(hp->q_lora_rank, k.Int("q_lora_rank", int64_t{0}));
  LOOM_ASSIGN_OR_RETURN(hp->kv_lora_rank, k.Int("kv_lora_rank", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(const int64_t nope, k.Int("qk_nope_head_dim", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp->rope_dim, k.Int("qk_rope_head_dim", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp->v_head_dim, k.Int("v_head_dim", std::nullopt));
  constexpr int64_t kMax = int64_t{1} << 16;
  if (hp->kv_lora_rank <= 0 || hp->kv_lora_rank > kMax || hp->q_lora_rank < 0 ||
      hp->q_lora_rank > kMax || nope <= 0 || nope > kMax || hp->rope_dim <= 0 ||
      hp->rope_dim > kMax || hp->rope_dim % 2 != 0 || hp->v_head_dim <= 0 ||
      hp->v_head_dim > kMax) {
    return InvalidArgumentError(name, ": latent attention sizes out of range: q_lora_rank ",
                                hp->q_lora_rank, ", kv_lora_rank ", hp->kv_lora_rank,
                                ", qk_nope_head_dim ", nope, ", qk_rope_head_dim ", hp->rope_dim,
                                ", v_head_dim ", hp->v_head_dim,
                                " (expected positive sizes, qk_rope_head_dim even)");
  }
  hp->head_dim = nope + hp->rope_dim;
  LOOM_ASSIGN_OR_RETURN(hp->n_experts, k.Int("n_routed_experts", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp->n_experts_used, k.Int("num_experts_per_tok", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp->expert_ffn_dim, k.Int("moe_intermediate_size", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp->n_shared_experts, k.Int("n_shared_experts", int64_t{0}));
  LOOM_ASSIGN_OR_RETURN(hp->n_dense_layers, k.Int("first_k_dense_replace", int64_t{0}));
  LOOM_ASSIGN_OR_RETURN(hp->n_expert_groups, k.Int("n_group", int64_t{1}));
  LOOM_ASSIGN_OR_RETURN(hp->n_expert_groups_used, k.Int("topk_group", int64_t{1}));
  LOOM_ASSIGN_OR_RETURN(const double scale, k.Float("routed_scaling_factor", 1.0));
  LOOM_ASSIGN_OR_RETURN(hp->expert_weights_norm, k.Bool("norm_topk_prob", false));
  LOOM_ASSIGN_OR_RETURN(const std::string scoring, k.String("scoring_func", "softmax"));
  LOOM_ASSIGN_OR_RETURN(const std::string method, k.String("topk_method", "greedy"));
  LOOM_ASSIGN_OR_RETURN(const int64_t freq, k.Int("moe_layer_freq", int64_t{1}));
  if (scoring == "sigmoid") {
    hp->gating = HParams::Gating::kSigmoid;
  } else if (scoring != "softmax") {
    return UnimplementedError(name, ": scoring_func '", scoring,
                              "' is not supported (softmax, sigmoid)");
  }
  if (freq != 1) {
    return UnimplementedError(name, ": moe_layer_freq ", freq, " is not supported (1)");
  }
  if (method == "greedy") {
    hp->n_expert_groups = hp->n_expert_groups_used = 1;  // groups play no part
  } else if (method != "noaux_tc") {
    // group_limited_greedy scores a group by its best expert; Loom (as llama.cpp) by the sum of
    // its best two, as noaux_tc does.
    return UnimplementedError(name, ": topk_method '", method,
                              "' is not supported (greedy, noaux_tc)");
  }
  if (hp->n_expert_groups <= 0) hp->n_expert_groups = 1;
  if (hp->n_expert_groups > 1 &&
      (hp->n_expert_groups > kMaxExpertGroups || hp->n_experts <= 0 ||
       hp->n_experts % hp->n_expert_groups != 0 || hp->n_expert_groups_used < 1 ||
       hp->n_expert_groups_used > hp->n_expert_groups ||
       hp->n_experts / hp->n_expert_groups < 2 ||
       hp->n_experts_used > hp->n_expert_groups_used * (hp->n_experts / hp->n_expert_groups))) {
    return InvalidArgumentError(name, ": n_group ", hp->n_expert_groups, " and topk_group ",
                                hp->n_expert_groups_used, " do not fit ", hp->n_experts,
                                " experts of which ", hp->n_experts_used, " are used");
  }
  if (!(scale > 0.0 && scale < 1e6) || hp->n_shared_experts < 0 || hp->n_shared_experts > 64 ||
      hp->n_dense_layers < 0 || hp->n_dense_layers > hp->n_layers) {
    return InvalidArgumentError(name, ": routed_scaling_factor ", scale, ", n_shared_experts ",
                                hp->n_shared_experts, " or first_k_dense_replace ",
                                hp->n_dense_layers, " out of range");
  }
  hp->expert_weights_scale = static_cast<float>(scale);
  return OkStatus();
}

// The mixture-of-experts keys of each family (Mixtral's experts are intermediate_size wide).
Status ReadMoe(const ConfigKeys& k, const std::string& name, const HfConfig& c, HParams* hp) {
  const std::string& t = c.model_type;
  if (IsDeepseek(t)) return ReadDeepseek(k, name, hp);
  if (t == "mixtral") {
    LOOM_ASSIGN_OR_RETURN(hp->n_experts, k.Int("num_local_experts", std::nullopt));
    LOOM_ASSIGN_OR_RETURN(hp->n_experts_used, k.Int("num_experts_per_tok", std::nullopt));
    hp->expert_ffn_dim = hp->ffn_dim;
    return OkStatus();
  }
  if (t != "qwen2_moe" && t != "qwen3_moe") return OkStatus();
  LOOM_RETURN_IF_ERROR(CheckAllLayersSparse(k, name));
  LOOM_ASSIGN_OR_RETURN(hp->n_experts, k.Int("num_experts", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp->n_experts_used, k.Int("num_experts_per_tok", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp->expert_ffn_dim, k.Int("moe_intermediate_size", std::nullopt));
  // Transformers' default is false for both; the released Qwen3-MoE models set it true.
  LOOM_ASSIGN_OR_RETURN(hp->expert_weights_norm, k.Bool("norm_topk_prob", false));
  if (t == "qwen2_moe") {
    hp->n_shared_experts = 1;
    LOOM_ASSIGN_OR_RETURN(hp->shared_ffn_dim,
                          k.Int("shared_expert_intermediate_size", std::nullopt));
    if (hp->shared_ffn_dim <= 0 || hp->shared_ffn_dim > (int64_t{1} << 20)) {
      return InvalidArgumentError(name, ": \"shared_expert_intermediate_size\" is ",
                                  hp->shared_ffn_dim, " (expected a positive count)");
    }
  }
  return OkStatus();
}

// A float as the double with the shortest decimal form that reads back as it (1e-05, not
// 9.999999747378752e-06).
double Shortest(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

}  // namespace

const HfArchName* FindHfArch(std::string_view model_type) {
  for (const HfArchName& a : kHfArchs) {
    if (a.model_type == model_type) return &a;
  }
  return nullptr;
}

const HfArchName* HfArchFor(const HParams& hp) {
  std::string_view type = hp.arch;
  if (hp.arch == "llama" && hp.is_moe()) type = "mixtral";
  if (hp.arch == "qwen2moe") type = "qwen2_moe";
  if (hp.arch == "qwen3moe") type = "qwen3_moe";
  if (hp.arch == "deepseek2") {
    type = hp.gating == HParams::Gating::kSigmoid ? "deepseek_v3" : "deepseek_v2";
  }
  const HfArchName* a = FindHfArch(type);
  return a != nullptr && a->arch == hp.arch ? a : nullptr;
}

kernels::RopeStyle HfRopeStyle(std::string_view arch) {
  return arch == "deepseek2" ? kernels::RopeStyle::kInterleaved : kernels::RopeStyle::kHalves;
}

StatusOr<HfConfig> ParseHfConfig(std::string_view json_text, const std::string& name) {
  Json j;
  try {
    j = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::exception& e) {
    return InvalidArgumentError(name, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) {
    return InvalidArgumentError(name, ": is a JSON ", j.type_name(), ", expected an object");
  }
  const ConfigKeys k(j, name);
  HfConfig c;
  LOOM_ASSIGN_OR_RETURN(c.model_type, k.String("model_type", ""));
  if (const Json* archs = k.Get("architectures"); archs != nullptr && archs->is_array()) {
    for (const Json& a : *archs) {
      if (a.is_string()) c.architectures.push_back(a.get<std::string>());
    }
  }
  const HfArchName* arch = FindHfArch(c.model_type);
  if (arch == nullptr) {
    std::string known;
    for (const HfArchName& a : kHfArchs)
      known += (known.empty() ? "" : ", ") + std::string(a.model_type);
    const std::string archs = c.architectures.empty() ? "" : " (" + c.architectures[0] + ")";
    if (c.model_type.empty()) {
      return InvalidArgumentError(name, ": missing \"model_type\"", archs, "; supported: ", known);
    }
    return UnimplementedError(name, ": model_type '", c.model_type, "'", archs,
                              " is not a supported architecture; supported: ", known);
  }
  HParams& hp = c.hp;
  hp.arch = std::string(arch->arch);
  hp.rope_style = HfRopeStyle(hp.arch);
  LOOM_ASSIGN_OR_RETURN(hp.dim, k.Int("hidden_size", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp.n_layers, k.Int("num_hidden_layers", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp.n_heads, k.Int("num_attention_heads", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp.n_kv_heads, k.Int("num_key_value_heads", hp.n_heads));
  if (hp.n_heads <= 0) {
    return InvalidArgumentError(name, ": \"num_attention_heads\" is ", hp.n_heads,
                                " (expected a positive count)");
  }
  LOOM_ASSIGN_OR_RETURN(hp.head_dim, k.Int("head_dim", hp.dim / hp.n_heads));
  LOOM_ASSIGN_OR_RETURN(hp.ffn_dim, k.Int("intermediate_size", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp.vocab_size, k.Int("vocab_size", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(hp.context_length, k.Int("max_position_embeddings", std::nullopt));
  LOOM_ASSIGN_OR_RETURN(const double eps, k.Float("rms_norm_eps", 1e-6));
  LOOM_ASSIGN_OR_RETURN(const double theta, k.Float("rope_theta", 10000.0));
  hp.rms_eps = static_cast<float>(eps);
  hp.rope_theta = static_cast<float>(theta);
  LOOM_RETURN_IF_ERROR(ReadRopeScaling(k, name, &hp));
  LOOM_RETURN_IF_ERROR(ReadMoe(k, name, c, &hp));
  c.tie_given = k.Get("tie_word_embeddings") != nullptr;
  LOOM_ASSIGN_OR_RETURN(hp.tied_embeddings, k.Bool("tie_word_embeddings", false));
  LOOM_ASSIGN_OR_RETURN(c.torch_dtype, k.String("torch_dtype", ""));
  if (c.torch_dtype.empty()) {
    LOOM_ASSIGN_OR_RETURN(c.torch_dtype, k.String("dtype", ""));
  }
  LOOM_RETURN_IF_ERROR(CheckUnsupported(k, name, c));
  if (c.model_type == "mistral" || c.model_type == "mixtral") {
    LOOM_ASSIGN_OR_RETURN(c.sliding_window, k.Int("sliding_window", int64_t{0}));
    if (c.sliding_window < 0) {
      return InvalidArgumentError(name, ": \"sliding_window\" is ", c.sliding_window);
    }
  }
  if (hp.vocab_size <= 0) {
    return InvalidArgumentError(name, ": \"vocab_size\" is ", hp.vocab_size,
                                " (expected a positive count)");
  }
  LOOM_RETURN_IF_ERROR(ReadSpecialIds(k, name, &c));

  // MLX: "quantization"; an MLX-style "quantization_config" (no quant_method) is accepted too.
  const Json* q = k.Get("quantization");
  if (q == nullptr) {
    if (const Json* qc = k.Get("quantization_config"); qc != nullptr) {
      const auto method = qc->is_object() ? qc->find("quant_method") : qc->end();
      if (qc->is_object() && method != qc->end() && !method->is_null()) {
        return UnimplementedError(name, ": quantization_config quant_method ", Short(*method),
                                  " is not supported (MLX affine quantization is)");
      }
      q = qc;
    }
  }
  if (q != nullptr) {
    LOOM_ASSIGN_OR_RETURN(MlxQuantConfig qc, ParseMlxQuantization(*q, name));
    c.quantization = std::move(qc);
  }
  return c;
}

namespace {

// The mixture-of-experts and latent-attention keys of `arch`'s family.
void AddMoeConfig(const HParams& hp, std::string_view model_type, nlohmann::ordered_json& j) {
  if (model_type == "mixtral") {
    j["num_local_experts"] = hp.n_experts;
    j["num_experts_per_tok"] = hp.n_experts_used;
    return;
  }
  if (model_type == "qwen2_moe" || model_type == "qwen3_moe") {
    j["num_experts"] = hp.n_experts;
    j["num_experts_per_tok"] = hp.n_experts_used;
    j["moe_intermediate_size"] = hp.expert_ffn_dim;
    if (model_type == "qwen2_moe") j["shared_expert_intermediate_size"] = hp.shared_ffn();
    j["norm_topk_prob"] = hp.expert_weights_norm;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::ordered_json::array();
    return;
  }
  if (!IsDeepseek(model_type)) return;
  j.erase("head_dim");
  j["q_lora_rank"] = hp.q_lora_rank > 0 ? nlohmann::ordered_json(hp.q_lora_rank) : nullptr;
  j["kv_lora_rank"] = hp.kv_lora_rank;
  j["qk_nope_head_dim"] = hp.head_dim - hp.rope_dim;
  j["qk_rope_head_dim"] = hp.rope_dim;
  j["v_head_dim"] = hp.v_head_dim;
  j["n_routed_experts"] = hp.n_experts;
  j["num_experts_per_tok"] = hp.n_experts_used;
  j["moe_intermediate_size"] = hp.expert_ffn_dim;
  j["n_shared_experts"] = hp.n_shared_experts;
  j["first_k_dense_replace"] = hp.n_dense_layers;
  j["moe_layer_freq"] = 1;
  j["n_group"] = hp.n_expert_groups;
  j["topk_group"] = hp.n_expert_groups_used;
  j["topk_method"] = hp.n_expert_groups > 1 || hp.gating == HParams::Gating::kSigmoid
                         ? "noaux_tc"
                         : "greedy";
  j["scoring_func"] = hp.gating == HParams::Gating::kSigmoid ? "sigmoid" : "softmax";
  j["norm_topk_prob"] = hp.expert_weights_norm;
  j["routed_scaling_factor"] = Shortest(hp.expert_weights_scale);
  const RopeScaling& s = hp.rope_scaling;
  if (s.type == RopeScalingType::kYarn) {
    j["rope_scaling"] = {{"type", "yarn"},
                         {"rope_type", "yarn"},
                         {"factor", Shortest(s.factor)},
                         {"original_max_position_embeddings", s.original_context},
                         {"beta_fast", Shortest(s.beta_fast)},
                         {"beta_slow", Shortest(s.beta_slow)},
                         {"mscale", Shortest(s.yarn_log_mul)},
                         {"mscale_all_dim", Shortest(s.yarn_log_mul)}};
  }
}

}  // namespace

std::string HfConfigJson(const HParams& hp, const TokenizerSpec& tokenizer,
                         const MlxQuantConfig* quant, std::string_view torch_dtype) {
  const HfArchName* arch = HfArchFor(hp);
  const std::string_view model_type = arch != nullptr ? arch->model_type : "llama";
  nlohmann::ordered_json j;
  j["architectures"] = {std::string(arch != nullptr ? arch->class_name : "LlamaForCausalLM")};
  j["model_type"] = std::string(model_type);
  j["hidden_size"] = hp.dim;
  j["intermediate_size"] = hp.ffn_dim;
  j["num_hidden_layers"] = hp.n_layers;
  j["num_attention_heads"] = hp.n_heads;
  j["num_key_value_heads"] = hp.n_kv_heads;
  j["head_dim"] = hp.head_dim;
  j["vocab_size"] = hp.vocab_size;
  j["max_position_embeddings"] = hp.context_length;
  j["rms_norm_eps"] = Shortest(hp.rms_eps);
  j["rope_theta"] = Shortest(hp.rope_theta);
  const RopeScaling& s = hp.rope_scaling;
  if (s.type == RopeScalingType::kLinear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", Shortest(s.factor)}};
  } else if (s.type == RopeScalingType::kLlama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", Shortest(s.factor)},
                         {"low_freq_factor", Shortest(s.low_freq_factor)},
                         {"high_freq_factor", Shortest(s.high_freq_factor)},
                         {"original_max_position_embeddings", s.original_context}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["hidden_act"] = "silu";
  if (hp.arch != "qwen2moe") j["attention_bias"] = hp.arch == "qwen2";
  j["tie_word_embeddings"] = hp.tied_embeddings;
  if (tokenizer.bos_id >= 0) j["bos_token_id"] = tokenizer.bos_id;
  if (tokenizer.eos_id >= 0) j["eos_token_id"] = tokenizer.eos_id;
  j["torch_dtype"] = std::string(torch_dtype);
  AddMoeConfig(hp, model_type, j);
  if (quant != nullptr) {
    nlohmann::ordered_json q = {{"group_size", quant->defaults.group_size},
                                {"bits", quant->defaults.bits}};
    for (const auto& [module, p] : quant->overrides) {
      if (p) {
        q[module] = {{"group_size", p->group_size}, {"bits", p->bits}};
      } else {
        q[module] = false;
      }
    }
    j["quantization"] = q;
    j["quantization_config"] = q;  // mlx-lm writes both
  }
  return j.dump(2) + "\n";
}

}  // namespace loom::model
