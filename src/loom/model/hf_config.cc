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
    HfArchName{"llama", "LlamaForCausalLM"},
    HfArchName{"mistral", "MistralForCausalLM"},
    HfArchName{"qwen2", "Qwen2ForCausalLM"},
    HfArchName{"qwen3", "Qwen3ForCausalLM"},
};

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
  if (c.model_type != "qwen2") {
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
  if (sliding && c.model_type != "mistral") {
    return UnimplementedError(name, ": use_sliding_window true is not supported for ",
                              c.model_type);
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
  if (FindHfArch(c.model_type) == nullptr) {
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
  hp.arch = c.model_type;
  hp.rope_style = kernels::RopeStyle::kHalves;
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
  c.tie_given = k.Get("tie_word_embeddings") != nullptr;
  LOOM_ASSIGN_OR_RETURN(hp.tied_embeddings, k.Bool("tie_word_embeddings", false));
  LOOM_ASSIGN_OR_RETURN(c.torch_dtype, k.String("torch_dtype", ""));
  if (c.torch_dtype.empty()) {
    LOOM_ASSIGN_OR_RETURN(c.torch_dtype, k.String("dtype", ""));
  }
  LOOM_RETURN_IF_ERROR(CheckUnsupported(k, name, c));
  if (c.model_type == "mistral") {
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

std::string HfConfigJson(const HParams& hp, const TokenizerSpec& tokenizer,
                         const MlxQuantParams* quant, std::string_view torch_dtype) {
  const HfArchName* arch = FindHfArch(hp.arch);
  nlohmann::ordered_json j;
  j["architectures"] = {std::string(arch != nullptr ? arch->class_name : "LlamaForCausalLM")};
  j["model_type"] = std::string(arch != nullptr ? arch->model_type : "llama");
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
  j["attention_bias"] = hp.arch == "qwen2";
  j["tie_word_embeddings"] = hp.tied_embeddings;
  if (tokenizer.bos_id >= 0) j["bos_token_id"] = tokenizer.bos_id;
  if (tokenizer.eos_id >= 0) j["eos_token_id"] = tokenizer.eos_id;
  j["torch_dtype"] = std::string(torch_dtype);
  if (quant != nullptr) {
    const nlohmann::ordered_json q = {{"group_size", quant->group_size}, {"bits", quant->bits}};
    j["quantization"] = q;
    j["quantization_config"] = q;  // mlx-lm writes both
  }
  return j.dump(2) + "\n";
}

}  // namespace loom::model
