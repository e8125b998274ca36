#include "loom/model/hf_model.h"

#include <array>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "loom/base/mapped_file.h"
#include "loom/model/safetensors.h"

namespace loom::model {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct NamePair {
  std::string_view hf, gguf;
};

constexpr std::array kTopModules = {
    NamePair{"model.embed_tokens", "token_embd"},
    NamePair{"model.norm", "output_norm"},
    NamePair{"lm_head", "output"},
};

constexpr std::array kLayerModules = {
    NamePair{"input_layernorm", "attn_norm"},    NamePair{"post_attention_layernorm", "ffn_norm"},
    NamePair{"self_attn.q_proj", "attn_q"},      NamePair{"self_attn.k_proj", "attn_k"},
    NamePair{"self_attn.v_proj", "attn_v"},      NamePair{"self_attn.o_proj", "attn_output"},
    NamePair{"self_attn.q_norm", "attn_q_norm"}, NamePair{"self_attn.k_norm", "attn_k_norm"},
    NamePair{"mlp.gate_proj", "ffn_gate"},       NamePair{"mlp.up_proj", "ffn_up"},
    NamePair{"mlp.down_proj", "ffn_down"},
    // DeepSeek's latent attention (MLX's mlx-lm splits kv_b_proj into embed_q / unembed_out).
    NamePair{"self_attn.q_a_proj", "attn_q_a"},
    NamePair{"self_attn.q_a_layernorm", "attn_q_a_norm"},
    NamePair{"self_attn.q_b_proj", "attn_q_b"},
    NamePair{"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"},
    NamePair{"self_attn.kv_a_layernorm", "attn_kv_a_norm"},
    NamePair{"self_attn.kv_b_proj", "attn_kv_b"},
    NamePair{"self_attn.embed_q", "attn_k_b"},
    NamePair{"self_attn.unembed_out", "attn_v_b"},
    NamePair{"mlp.shared_expert_gate", "ffn_gate_inp_shexp"},
};

// Mixture-of-experts modules after the block's prefix ("mlp." or Mixtral's "block_sparse_moe.").
constexpr std::array kMoeModules = {
    NamePair{"gate", "ffn_gate_inp"},
    NamePair{"switch_mlp.gate_proj", "ffn_gate_exps"},
    NamePair{"switch_mlp.up_proj", "ffn_up_exps"},
    NamePair{"switch_mlp.down_proj", "ffn_down_exps"},
};
constexpr std::array kSharedModules = {
    NamePair{"gate_proj", "ffn_gate_shexp"},
    NamePair{"up_proj", "ffn_up_shexp"},
    NamePair{"down_proj", "ffn_down_shexp"},
};
// One expert's matrices: Qwen / DeepSeek names, Mixtral's, GGUF's.
struct ExpertName {
  std::string_view hf, mixtral, gguf;
};
constexpr std::array kExpertModules = {
    ExpertName{"gate_proj", "w1", "ffn_gate"},
    ExpertName{"up_proj", "w3", "ffn_up"},
    ExpertName{"down_proj", "w2", "ffn_down"},
};

bool IsMixtral(std::string_view arch) { return arch == "llama" || arch == "mistral"; }

// "12" -> 12 for canonical decimal numbers below 10^7.
bool ParseIndex(std::string_view s, int64_t* n) {
  if (s.empty() || s.size() > 7 || (s[0] == '0' && s.size() > 1)) return false;
  *n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    *n = *n * 10 + (c - '0');
  }
  return true;
}

// "12.rest" -> (12, "rest") for canonical decimal layer numbers.
bool SplitLayer(std::string_view s, int64_t* layer, std::string_view* rest) {
  const size_t dot = s.find('.');
  if (dot == std::string_view::npos || !ParseIndex(s.substr(0, dot), layer)) return false;
  *rest = s.substr(dot + 1);
  return true;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// A layer's module, Hugging Face -> GGUF (without the layer prefixes).
std::optional<std::string> LayerToGguf(std::string_view rest) {
  for (const NamePair& p : kLayerModules) {
    if (rest == p.hf) return std::string(p.gguf);
  }
  for (std::string_view block : {"mlp.", "block_sparse_moe."}) {
    if (!StartsWith(rest, block)) continue;
    const std::string_view r = rest.substr(block.size());
    for (const NamePair& p : kMoeModules) {
      if (r == p.hf) return std::string(p.gguf);
    }
    if (StartsWith(r, "experts.")) {
      int64_t e = 0;
      std::string_view w;
      if (!SplitLayer(r.substr(8), &e, &w)) return std::nullopt;
      for (const ExpertName& x : kExpertModules) {
        if (w == x.hf || w == x.mixtral) return StrCat(x.gguf, ".", e);
      }
    }
  }
  for (std::string_view shared : {"mlp.shared_expert.", "mlp.shared_experts."}) {
    if (!StartsWith(rest, shared)) continue;
    for (const NamePair& p : kSharedModules) {
      if (rest.substr(shared.size()) == p.hf) return std::string(p.gguf);
    }
  }
  return std::nullopt;
}

// A layer's module, GGUF -> Hugging Face.
std::optional<std::string> LayerToHf(std::string_view rest, std::string_view arch) {
  for (const NamePair& p : kLayerModules) {
    if (rest == p.gguf) return std::string(p.hf);
  }
  const std::string_view block = IsMixtral(arch) ? "block_sparse_moe." : "mlp.";
  for (const NamePair& p : kMoeModules) {
    if (rest == p.gguf) return StrCat(block, p.hf);
  }
  for (const NamePair& p : kSharedModules) {
    if (rest == p.gguf) {
      return StrCat(arch == "qwen2moe" ? "mlp.shared_expert." : "mlp.shared_experts.", p.hf);
    }
  }
  for (const ExpertName& x : kExpertModules) {
    int64_t e = 0;
    if (StartsWith(rest, x.gguf) && rest.size() > x.gguf.size() + 1 &&
        rest[x.gguf.size()] == '.' && ParseIndex(rest.substr(x.gguf.size() + 1), &e)) {
      return StrCat(block, "experts.", e, ".", IsMixtral(arch) ? x.mixtral : x.hf);
    }
  }
  return std::nullopt;
}

std::optional<std::string> MapModule(std::string_view name, bool to_gguf, std::string_view arch) {
  for (const NamePair& p : kTopModules) {
    if (name == (to_gguf ? p.hf : p.gguf)) return std::string(to_gguf ? p.gguf : p.hf);
  }
  const std::string_view from_prefix = to_gguf ? "model.layers." : "blk.";
  if (!StartsWith(name, from_prefix)) return std::nullopt;
  int64_t layer = 0;
  std::string_view rest;
  if (!SplitLayer(name.substr(from_prefix.size()), &layer, &rest)) return std::nullopt;
  const std::optional<std::string> r = to_gguf ? LayerToGguf(rest) : LayerToHf(rest, arch);
  if (!r) return std::nullopt;
  return StrCat(to_gguf ? "blk." : "model.layers.", layer, ".", *r);
}

// "a.b.weight" -> ("a.b", "weight").
std::pair<std::string, std::string> SplitSuffix(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

// A shard file name from an index: a plain file name inside the directory.
bool IsPlainFileName(const std::string& f) {
  return !f.empty() && f.size() <= 255 && f != "." && f != ".." &&
         f.find('/') == std::string::npos && f.find('\\') == std::string::npos &&
         f.find('\0') == std::string::npos;
}

struct Shard {
  std::string path;
  base::MappedFile file;
  SafetensorsFile st;
};

// The safetensors files of a directory, and the index's tensor -> file map when there is one.
StatusOr<std::vector<std::string>> FindWeightFiles(const fs::path& dir,
                                                   std::map<std::string, std::string>* weight_map) {
  std::error_code ec;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::is_regular_file(index, ec)) {
    LOOM_ASSIGN_OR_RETURN(const std::string text, base::ReadFileToString(index.string()));
    Json j;
    try {
      j = Json::parse(text);
    } catch (const Json::exception& e) {
      return InvalidArgumentError(index.string(), ": not valid JSON: ", e.what());
    }
    const auto wm = j.is_object() ? j.find("weight_map") : j.end();
    if (wm == j.end() || !wm->is_object()) {
      return InvalidArgumentError(index.string(), ": lacks a \"weight_map\" object");
    }
    std::set<std::string> files;
    for (const auto& [tensor, file] : wm->items()) {
      if (!file.is_string() || !IsPlainFileName(file.get<std::string>())) {
        return InvalidArgumentError(index.string(), ": weight_map entry '", tensor, "' is ",
                                    file.dump(), ", expected a file name in the directory");
      }
      (*weight_map)[tensor] = file.get<std::string>();
      files.insert(file.get<std::string>());
    }
    if (files.empty()) return InvalidArgumentError(index.string(), ": weight_map is empty");
    std::vector<std::string> out;
    for (const std::string& f : files) out.push_back((dir / f).string());
    return out;
  }
  const fs::path single = dir / "model.safetensors";
  if (fs::is_regular_file(single, ec)) return std::vector<std::string>{single.string()};
  // Older exports name shards freely (weights.00.safetensors, ...) without an index.
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) {
      out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  if (out.empty()) {
    return NotFoundError(dir.string(),
                         ": no model.safetensors, model.safetensors.index.json or other "
                         ".safetensors file (a Hugging Face model directory has config.json and "
                         "its weights in safetensors files)");
  }
  return out;
}

StatusOr<kernels::DType> FloatDType(const SafetensorsTensor& t, const std::string& file) {
  switch (t.dtype) {
    case StDType::kF32:
      return kernels::DType::kF32;
    case StDType::kF16:
      return kernels::DType::kF16;
    case StDType::kBF16:
      return kernels::DType::kBF16;
    default:
      return UnimplementedError(file, ": tensor '", t.name, "' is ", StDTypeName(t.dtype),
                                "; Loom reads F32, F16 and BF16 tensors (and MLX-quantized U32 ",
                                "weights that come with .scales and .biases)");
  }
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Tensors GGUF (and MLX) store as (n, rows, cols) stacks.
bool IsStacked(std::string_view gguf_name) {
  for (std::string_view s : {"_exps.weight", ".attn_k_b.weight", ".attn_v_b.weight"}) {
    if (EndsWith(gguf_name, s)) return true;
  }
  return false;
}

// Qwen2-MoE's shared-expert gate is a (1, dim) linear layer in Hugging Face files and a (dim)
// vector in GGUF ones.
Status ShapeAsGguf(const std::string& file, std::string_view hf_name, TensorInfo* t) {
  if (!EndsWith(t->name, ".ffn_gate_inp_shexp.weight")) return OkStatus();
  if (t->shape.size() == 2 && t->shape[0] == 1) {
    t->shape = {t->shape[1]};
  } else if (t->shape.size() != 1) {
    return DataLossError(file, ": tensor '", hf_name, "' has ", t->shape.size(),
                         " dimensions; expected (1, hidden_size)");
  }
  return OkStatus();
}

struct Located {
  const Shard* shard;
  const SafetensorsTensor* tensor;
};

// Builds the tensor table: MLX-quantized modules first (weight + scales + biases), then plain ones.
Status BuildTensors(const HfConfig& cfg, const std::map<std::string, Located>& all,
                    const std::string& config_path, ModelFile* m) {
  std::set<std::string> used;
  std::vector<std::string> ignored;
  for (const auto& [name, loc] : all) {
    const auto [module, suffix] = SplitSuffix(name);
    if (suffix != "scales") continue;
    const std::string where = StrCat(loc.shard->path, ": module '", module, "'");
    const auto weight = all.find(module + ".weight");
    const auto biases = all.find(module + ".biases");
    if (weight == all.end() || biases == all.end()) {
      return DataLossError(where, " has .scales but no ",
                           weight == all.end() ? ".weight" : ".biases");
    }
    if (!cfg.quantization) {
      return DataLossError(where, " is quantized (it has .scales) but ", config_path,
                           " has no \"quantization\"");
    }
    const std::optional<MlxQuantParams> p = cfg.quantization->For(module);
    if (!p) {
      return DataLossError(where, " has .scales but ", config_path, " says it is not quantized");
    }
    used.insert({name, weight->first, biases->first});
    const std::optional<std::string> gguf = HfModuleToGguf(module);
    if (!gguf) {
      ignored.push_back(module);
      continue;
    }
    TensorInfo t;
    t.name = *gguf + ".weight";
    LOOM_RETURN_IF_ERROR(MlxTensorFromParts(*weight->second.tensor, *loc.tensor,
                                            *biases->second.tensor, *p, where, &t));
    if (t.shape.size() == 3 && !IsStacked(t.name)) {
      return DataLossError(where, " is a stack of matrices; only experts (switch_mlp) and "
                           "DeepSeek's embed_q / unembed_out are");
    }
    LOOM_RETURN_IF_ERROR(ShapeAsGguf(loc.shard->path, module, &t));
    m->tensors.emplace(t.name, std::move(t));
  }
  for (const auto& [name, loc] : all) {
    if (used.count(name) != 0) continue;
    const auto [module, suffix] = SplitSuffix(name);
    if (suffix == "biases") {
      return DataLossError(loc.shard->path, ": module '", module, "' has .biases but no .scales");
    }
    const std::optional<std::string> gguf = HfTensorToGguf(name);
    if (!gguf) {
      // Old checkpoints store rotary tables; other tensors (vision towers, ...) are not used.
      if (name.find("rotary_emb.inv_freq") == std::string::npos) ignored.push_back(name);
      continue;
    }
    TensorInfo t;
    t.name = *gguf;
    LOOM_ASSIGN_OR_RETURN(t.type, FloatDType(*loc.tensor, loc.shard->path));
    t.shape = loc.tensor->shape;
    t.data = loc.tensor->data.data();
    t.size_bytes = static_cast<int64_t>(loc.tensor->data.size());
    t.file_offset = loc.tensor->file_offset;
    // Stacked experts (MLX's switch_mlp, attn_k_b / attn_v_b) are the only 3-D tensors.
    const size_t max_dims = IsStacked(t.name) ? 3 : 2;
    if (t.shape.empty() || t.shape.size() > max_dims || t.size_bytes == 0) {
      return DataLossError(loc.shard->path, ": tensor '", name, "' has ", t.shape.size(),
                           " dimensions and ", t.size_bytes, " bytes; expected a vector or matrix",
                           max_dims == 3 ? " or a stack of matrices" : "");
    }
    LOOM_RETURN_IF_ERROR(ShapeAsGguf(loc.shard->path, name, &t));
    m->tensors.emplace(t.name, std::move(t));
  }
  if (!ignored.empty()) {
    std::string list;
    for (size_t i = 0; i < ignored.size() && i < 4; ++i) list += (i ? ", " : "") + ignored[i];
    if (ignored.size() > 4) list += ", ...";
    m->metadata["hf.ignored_tensors"] = StrCat(ignored.size(), " (", list, ")");
  }
  return OkStatus();
}

// Experts stored one tensor each must be numbered below the config's expert count (the binding
// finds missing ones; extra ones would be ignored silently).
Status CheckExpertIndices(const ModelFile& m, const std::string& config_path) {
  for (const auto& [name, t] : m.tensors) {
    int64_t layer = 0, e = 0;
    std::string_view rest;
    if (!StartsWith(name, "blk.") || !SplitLayer(std::string_view(name).substr(4), &layer, &rest)) {
      continue;
    }
    for (const ExpertName& x : kExpertModules) {
      if (!StartsWith(rest, StrCat(x.gguf, ".")) || !EndsWith(rest, ".weight")) continue;
      const std::string_view index =
          rest.substr(x.gguf.size() + 1, rest.size() - x.gguf.size() - 1 - 7);
      if (ParseIndex(index, &e) && e >= m.hparams.n_experts) {
        return DataLossError(m.path, ": layer ", layer, " has a tensor for expert ", e, " but ",
                             config_path, " says the model has ", m.hparams.n_experts,
                             " experts");
      }
    }
  }
  return OkStatus();
}

}  // namespace

std::optional<std::string> HfModuleToGguf(std::string_view hf_module) {
  return MapModule(hf_module, /*to_gguf=*/true, {});
}

std::optional<std::string> GgufModuleToHf(std::string_view gguf_module, std::string_view arch) {
  return MapModule(gguf_module, /*to_gguf=*/false, arch);
}

std::optional<std::string> HfTensorToGguf(std::string_view hf_tensor) {
  const size_t dot = hf_tensor.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view suffix = hf_tensor.substr(dot + 1);
  const std::optional<std::string> module = HfModuleToGguf(hf_tensor.substr(0, dot));
  if (!module) return std::nullopt;
  if (suffix == "e_score_correction_bias") {
    constexpr std::string_view kRouter = ".ffn_gate_inp";
    if (module->size() <= kRouter.size() ||
        std::string_view(*module).substr(module->size() - kRouter.size()) != kRouter) {
      return std::nullopt;
    }
    return module->substr(0, module->size() - kRouter.size()) + ".exp_probs_b.bias";
  }
  if (suffix != "weight" && suffix != "bias") return std::nullopt;
  return StrCat(*module, ".", suffix);
}

std::optional<std::string> GgufTensorToHf(std::string_view gguf_tensor, std::string_view arch) {
  const size_t dot = gguf_tensor.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view module = gguf_tensor.substr(0, dot);
  const std::string_view suffix = gguf_tensor.substr(dot + 1);
  constexpr std::string_view kBias = ".exp_probs_b";
  if (suffix == "bias" && module.size() > kBias.size() &&
      module.substr(module.size() - kBias.size()) == kBias) {
    const std::optional<std::string> router = GgufModuleToHf(
        StrCat(module.substr(0, module.size() - kBias.size()), ".ffn_gate_inp"), arch);
    if (!router) return std::nullopt;
    return *router + ".e_score_correction_bias";
  }
  const std::optional<std::string> m = GgufModuleToHf(module, arch);
  if (!m) return std::nullopt;
  return StrCat(*m, ".", suffix);
}

bool IsModelDirectory(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_regular_file(fs::path(dir) / "config.json", ec);
}

StatusOr<std::unique_ptr<ModelFile>> OpenModelDirectory(const std::string& dir) {
  const fs::path root = dir;
  const std::string config_path = (root / "config.json").string();
  std::error_code ec;
  if (!fs::is_regular_file(config_path, ec)) {
    return NotFoundError(dir,
                         ": is a directory without config.json (a Hugging Face or MLX model "
                         "directory has config.json and model.safetensors)");
  }
  LOOM_ASSIGN_OR_RETURN(const std::string config_text, base::ReadFileToString(config_path));
  LOOM_ASSIGN_OR_RETURN(HfConfig cfg, ParseHfConfig(config_text, config_path));

  std::map<std::string, std::string> weight_map;
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> files, FindWeightFiles(root, &weight_map));
  std::vector<std::unique_ptr<Shard>> shards;
  std::map<std::string, Located> all;
  for (const std::string& path : files) {
    auto shard = std::make_unique<Shard>();
    shard->path = path;
    LOOM_ASSIGN_OR_RETURN(shard->file, base::MappedFile::Open(path));
    LOOM_ASSIGN_OR_RETURN(shard->st, ParseSafetensors(shard->file.bytes(), path));
    for (const auto& [name, t] : shard->st.tensors) {
      const auto [it, inserted] = all.emplace(name, Located{shard.get(), &t});
      if (!inserted) {
        return DataLossError(dir, ": tensor '", name, "' is in both ", it->second.shard->path,
                             " and ", path);
      }
    }
    shards.push_back(std::move(shard));
  }
  for (const auto& [tensor, file] : weight_map) {
    const auto it = all.find(tensor);
    if (it == all.end() || fs::path(it->second.shard->path).filename() != file) {
      return DataLossError((root / "model.safetensors.index.json").string(), ": tensor '", tensor,
                           "' is not in ", file, " as the weight_map says");
    }
  }

  auto m = std::make_unique<ModelFile>();
  m->path = dir;
  m->format = cfg.quantization ? "mlx" : "hf";
  m->hparams = cfg.hp;
  LOOM_RETURN_IF_ERROR(BuildTensors(cfg, all, config_path, m.get()));

  HParams& hp = m->hparams;
  LOOM_RETURN_IF_ERROR(CheckExpertIndices(*m, config_path));
  const bool has_output = m->tensors.count("output.weight") != 0;
  if (hp.tied_embeddings && has_output) {
    // Transformers ties the head to the embedding whatever lm_head.weight holds.
    m->tensors.erase("output.weight");
    m->metadata["hf.note"] = "lm_head.weight ignored (tie_word_embeddings is true)";
  } else if (!has_output && !cfg.tie_given) {
    hp.tied_embeddings = true;  // exporters drop lm_head when it equals the embedding
  }
  if (cfg.sliding_window > 0 && cfg.sliding_window < hp.context_length) {  // Mistral, Mixtral
    // Attention over a sliding window equals full attention up to the window's length.
    m->metadata["hf.sliding_window"] = StrCat(cfg.sliding_window, " (context limited to it)");
    hp.context_length = cfg.sliding_window;
  }
  m->tokenizer.model = "";
  m->tokenizer.bos_id = cfg.bos_id;
  m->tokenizer.eos_id = cfg.eos_ids.empty() ? -1 : cfg.eos_ids[0];

  m->metadata["hf.model_type"] = cfg.model_type;
  if (!cfg.architectures.empty()) m->metadata["hf.architectures"] = cfg.architectures[0];
  if (!cfg.torch_dtype.empty()) m->metadata["hf.torch_dtype"] = cfg.torch_dtype;
  m->metadata["hf.files"] = StrCat(files.size(), " safetensors file", files.size() == 1 ? "" : "s");
  if (cfg.quantization) {
    const MlxQuantConfig& q = *cfg.quantization;
    m->metadata["mlx.quantization"] =
        StrCat(q.defaults.bits, " bits, group size ", q.defaults.group_size, ", ",
               q.overrides.size(), " per-module override", q.overrides.size() == 1 ? "" : "s");
  }
  for (const auto& [k, v] : shards.front()->st.metadata) m->metadata["safetensors." + k] = v;
  for (auto& shard : shards) m->mappings.push_back(std::move(shard->file));
  LOOM_RETURN_IF_ERROR(ValidateModel(*m));
  return m;
}

}  // namespace loom::model
