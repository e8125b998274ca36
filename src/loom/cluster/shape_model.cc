#include "loom/cluster/shape_model.h"

#include <sys/mman.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>

#include "loom/base/mapped_file.h"
#include "loom/kernels/dtype.h"
#include "loom/model/gguf.h"
#include "loom/model/gguf_reader.h"

namespace loom::cluster {

namespace {

using nlohmann::json;

// How a config-only model's tensors are stored.
struct Storage {
  kernels::DType matrix = kernels::DType::kBF16;  // matrices (embedding and head included)
  kernels::DType vector = kernels::DType::kBF16;  // norms, biases, routers' bias
  int64_t group_size = 0;                         // MLX: values per scale/bias pair
  int bits = 0;                                   // MLX: bits per value
};

StatusOr<Storage> StorageFor(const std::string& type, const json& config, const std::string& name) {
  Storage s;
  std::string t = type;
  if (t.empty()) {
    auto q = config.find("quantization");
    if (q != config.end() && q->is_object()) {
      auto number = [&](const char* key) -> int64_t {
        auto it = q->find(key);
        return it != q->end() && it->is_number_integer() ? it->get<int64_t>() : 0;
      };
      const int64_t bits = number("bits");
      const int64_t group = number("group_size");
      if ((bits != 4 && bits != 8) || group <= 0 || group % 32 != 0) {
        return InvalidArgumentError(name, ": quantization {bits ", bits, ", group_size ", group,
                                    "} is not one the planner sizes (bits 4 or 8, groups of a "
                                    "multiple of 32); give --type");
      }
      s.matrix = bits == 4 ? kernels::DType::kMlx4 : kernels::DType::kMlx8;
      s.bits = static_cast<int>(bits);
      s.group_size = group;
      return s;
    }
    t = "bf16";
  }
  if (t == "f32") {
    s.matrix = s.vector = kernels::DType::kF32;
  } else if (t == "f16") {
    s.matrix = s.vector = kernels::DType::kF16;
  } else if (t == "bf16") {
    s.matrix = s.vector = kernels::DType::kBF16;
  } else if (t == "q8_0" || t == "q4_0") {
    s.matrix = t == "q8_0" ? kernels::DType::kQ8_0 : kernels::DType::kQ4_0;
    s.vector = kernels::DType::kF32;  // as llama.cpp's converter keeps norms
  } else if (t == "mlx4" || t == "mlx8") {
    s.matrix = t == "mlx4" ? kernels::DType::kMlx4 : kernels::DType::kMlx8;
    s.bits = t == "mlx4" ? 4 : 8;
    s.group_size = 64;
  } else {
    return InvalidArgumentError("--type ", t,
                                ": not a type the planner sizes (f32, f16, bf16, q8_0, q4_0, mlx4, "
                                "mlx8)");
  }
  return s;
}

class Builder {
 public:
  Builder(model::ModelFile* m, const Storage& s) : m_(m), s_(s) {}

  // shape outermost first; the last dimension is the row length.
  void Matrix(const std::string& name, std::vector<int64_t> shape) { Add(name, shape, true); }
  void Vector(const std::string& name, int64_t n) { Add(name, {n}, false); }

 private:
  void Add(const std::string& name, const std::vector<int64_t>& shape, bool matrix) {
    model::TensorInfo t;
    t.name = name;
    t.shape = shape;
    const int64_t n = t.elements();
    t.type = matrix ? s_.matrix : s_.vector;
    if (matrix && s_.group_size > 0) {
      t.size_bytes = n * s_.bits / 8;
      t.group_size = s_.group_size;
      t.scale_type = kernels::DType::kBF16;
      t.scales_bytes = n / s_.group_size * 2;
    } else {
      const kernels::DTypeTraits& tr = kernels::Traits(t.type);
      t.size_bytes = (n + tr.block_elems - 1) / tr.block_elems * tr.block_bytes;
    }
    m_->tensors[name] = std::move(t);
  }

  model::ModelFile* m_;
  Storage s_;
};

StatusOr<int64_t> Int(const json& c, const char* key, const std::string& name, int64_t fallback,
                      bool required) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) {
    if (required) return InvalidArgumentError(name, ": config has no \"", key, "\"");
    return fallback;
  }
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return InvalidArgumentError(name, ": config \"", key, "\" must be a non-negative integer");
  }
  // Bounds far beyond real models that keep every byte count below 2^62 (1024 layers of 4096
  // experts of 2^20 x 65536 values at most).
  struct Limit {
    std::string_view key;
    int64_t max;
  };
  static constexpr Limit kLimits[] = {{"hidden_size", 65536},
                                      {"num_hidden_layers", 1024},
                                      {"num_attention_heads", 1024},
                                      {"num_key_value_heads", 1024},
                                      {"vocab_size", int64_t{1} << 22},
                                      {"max_position_embeddings", int64_t{1} << 24},
                                      {"num_experts", 4096},
                                      {"num_local_experts", 4096},
                                      {"n_routed_experts", 4096},
                                      {"num_experts_per_tok", 4096},
                                      {"n_shared_experts", 64},
                                      {"head_dim", 4096},
                                      {"qk_nope_head_dim", 4096},
                                      {"qk_rope_head_dim", 4096},
                                      {"v_head_dim", 4096},
                                      {"kv_lora_rank", 65536},
                                      {"q_lora_rank", 65536}};
  int64_t max = int64_t{1} << 20;  // feed-forward widths, layer counts and steps
  for (const Limit& l : kLimits) {
    if (l.key == key) max = l.max;
  }
  if (it->get<int64_t>() > max) {
    return InvalidArgumentError(name, ": config \"", key, "\" is ", it->get<int64_t>(),
                                ", above the planner's limit of ", max);
  }
  return it->get<int64_t>();
}

std::string Text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<int64_t> GgufInt(const model::GgufFile& g, const std::string& key) {
  const model::GgufValue* v = g.Find(key);
  if (v == nullptr || v->count != 1 || !v->is_integer()) return std::nullopt;
  return v->IntAt(0);
}

// The tensor table and the few hyperparameters the planner reads, for a GGUF file whose
// architecture the runtime does not read yet (DeepSeek-V3 / Kimi K2 as llama.cpp's "deepseek2":
// key and value lengths differ, YaRN scaling): the table gives every tensor's exact bytes.
StatusOr<std::unique_ptr<model::ModelFile>> ShapeFromGgufTable(const model::GgufFile& g,
                                                               const std::string& path) {
  auto m = std::make_unique<model::ModelFile>();
  m->path = path;
  model::HParams& hp = m->hparams;
  const model::GgufValue* arch = g.Find("general.architecture");
  if (arch == nullptr || arch->strings.size() != 1 || arch->strings[0].empty()) {
    return InvalidArgumentError(path, ": no general.architecture");
  }
  hp.arch = arch->strings[0];
  const std::string p = hp.arch + ".";
  hp.dim = GgufInt(g, p + "embedding_length").value_or(0);
  hp.n_layers = GgufInt(g, p + "block_count").value_or(0);
  hp.n_heads = GgufInt(g, p + "attention.head_count").value_or(0);
  hp.n_kv_heads = GgufInt(g, p + "attention.head_count_kv").value_or(hp.n_heads);
  hp.ffn_dim = GgufInt(g, p + "feed_forward_length").value_or(0);
  hp.context_length = GgufInt(g, p + "context_length").value_or(4096);
  hp.n_experts = GgufInt(g, p + "expert_count").value_or(0);
  hp.n_experts_used = GgufInt(g, p + "expert_used_count").value_or(0);
  hp.expert_ffn_dim = GgufInt(g, p + "expert_feed_forward_length").value_or(hp.ffn_dim);
  hp.head_dim =
      GgufInt(g, p + "attention.key_length").value_or(hp.n_heads > 0 ? hp.dim / hp.n_heads : 0);
  const int64_t kv_lora = GgufInt(g, p + "attention.kv_lora_rank").value_or(0);
  const int64_t rope = GgufInt(g, p + "rope.dimension_count").value_or(0);
  if (kv_lora > 0) {  // the MLA cache as in ShapeFromConfig
    hp.n_kv_heads = 1;
    hp.head_dim = (kv_lora + rope) / 2;
  }
  bool has_output = false;
  for (const model::GgufTensor& t : g.tensors) {
    model::TensorInfo info;
    info.name = t.name;
    info.shape.assign(t.ne.rbegin(), t.ne.rend());
    // Types the kernels do not support keep their exact bytes; the planner reads only sizes.
    info.type = t.type->dtype.value_or(kernels::DType::kF32);
    info.size_bytes = t.size_bytes;
    if (t.name == "token_embd.weight" && t.ne.size() == 2) hp.vocab_size = t.ne[1];
    has_output = has_output || t.name == "output.weight";
    m->tensors[t.name] = std::move(info);
  }
  hp.tied_embeddings = !has_output;
  m->metadata["general.architecture"] = hp.arch;
  return m;
}

// A GGUF header: the reader parses a span as long as the largest model could be, of which the
// file's bytes are the beginning and the rest reads as zeros (an address-space reservation with
// no memory behind it), so the tensor table passes its bounds checks whether or not the data
// section is there.  Tensor data pointers are cleared before the reservation goes.
StatusOr<std::unique_ptr<model::ModelFile>> ShapeFromGguf(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(base::MappedFile file, base::MappedFile::Open(path));
  // 16 TiB is beyond any model's file; smaller where the address space is (down to 256 GiB).
  int64_t span = int64_t{1} << 44;
  void* base = MAP_FAILED;
  for (; span >= int64_t{1} << 38 && base == MAP_FAILED; span /= 4) {
    base = mmap(nullptr, static_cast<size_t>(span), PROT_READ,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base != MAP_FAILED) break;
  }
  if (base == MAP_FAILED) {
    return ResourceExhaustedError(path, ": cannot reserve address space to read the GGUF header");
  }
  struct Unmap {
    void* p;
    int64_t size;
    ~Unmap() { munmap(p, static_cast<size_t>(size)); }
  } unmap{base, span};
  // The reservation is read-only: copy the header in through a writable view of its first pages.
  const int64_t page = 1 << 16;
  const int64_t head =
      std::min<int64_t>(file.size(), int64_t{256} << 20);  // metadata + tensor table
  const size_t copy_span = static_cast<size_t>((head + page - 1) / page * page);
  if (copy_span > 0) {
    if (mmap(base, copy_span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0) == MAP_FAILED) {
      return ResourceExhaustedError(path, ": cannot map the GGUF header");
    }
    std::memcpy(base, file.data(), static_cast<size_t>(head));
  }
  const std::span<const std::byte> bytes(static_cast<const std::byte*>(base),
                                         static_cast<size_t>(span));
  auto gguf = model::ParseGguf(bytes, path);
  if (!gguf.ok()) {
    return InvalidArgumentError(gguf.status().message(), " (as a GGUF header: the file's ",
                                file.size(), " bytes may end inside its metadata)");
  }
  // The data section starts at the tensor table's end rounded up to the alignment: a file that
  // ends before the table does has lost part of it to the zeros.
  if (gguf->data_offset - (gguf->alignment - 1) > file.size()) {
    return InvalidArgumentError(path,
                                ": the GGUF header is cut short (its metadata and tensor "
                                "table take ",
                                gguf->data_offset - (gguf->alignment - 1),
                                " bytes or more, the file has ", file.size(), ")");
  }
  auto m = std::make_unique<model::ModelFile>();
  m->path = path;
  if (Status st = model::GgufToModel(*gguf, bytes, m.get()); !st.ok()) {
    // An architecture or setting the runtime does not read yet: plan from the table alone.
    if (st.code() != StatusCode::kUnimplemented) return st;
    LOOM_ASSIGN_OR_RETURN(m, ShapeFromGgufTable(*gguf, path));
    m->metadata["planner.note"] = st.message();
  }
  m->format = "gguf-header";
  for (auto& [name, t] : m->tensors) {
    t.data = t.scales = t.biases = nullptr;
    t.file_offset = 0;
  }
  m->mappings.clear();
  const model::HParams& hp = m->hparams;
  if (hp.dim <= 0 || hp.n_layers <= 0 || hp.n_heads <= 0 || hp.n_kv_heads <= 0 ||
      hp.vocab_size <= 0 || hp.n_heads % hp.n_kv_heads != 0) {
    return InvalidArgumentError(path, ": the GGUF header's hyperparameters are incomplete (dim ",
                                hp.dim, ", layers ", hp.n_layers, ", heads ", hp.n_heads, "/",
                                hp.n_kv_heads, ", vocab ", hp.vocab_size, ")");
  }
  if (hp.is_moe() && (hp.n_experts_used <= 0 || hp.n_experts_used > hp.n_experts)) {
    return InvalidArgumentError(path, ": expert_used_count ", hp.n_experts_used, " of ",
                                hp.n_experts, " experts");
  }
  return m;
}

}  // namespace

StatusOr<std::unique_ptr<model::ModelFile>> ShapeFromConfig(const std::string& text,
                                                            const std::string& name,
                                                            const std::string& type) {
  const json c = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (c.is_discarded() || !c.is_object()) return InvalidArgumentError(name, ": not a JSON object");
  LOOM_ASSIGN_OR_RETURN(const Storage storage, StorageFor(type, c, name));
  auto m = std::make_unique<model::ModelFile>();
  m->path = name;
  m->format = "config";
  model::HParams& hp = m->hparams;
  auto text_field = [&](const char* key) {
    auto it = c.find(key);
    return it != c.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string model_type = text_field("model_type");
  LOOM_ASSIGN_OR_RETURN(hp.dim, Int(c, "hidden_size", name, 0, true));
  LOOM_ASSIGN_OR_RETURN(hp.n_layers, Int(c, "num_hidden_layers", name, 0, true));
  LOOM_ASSIGN_OR_RETURN(hp.n_heads, Int(c, "num_attention_heads", name, 0, true));
  LOOM_ASSIGN_OR_RETURN(hp.n_kv_heads, Int(c, "num_key_value_heads", name, hp.n_heads, false));
  LOOM_ASSIGN_OR_RETURN(hp.ffn_dim, Int(c, "intermediate_size", name, 0, true));
  LOOM_ASSIGN_OR_RETURN(hp.vocab_size, Int(c, "vocab_size", name, 0, true));
  LOOM_ASSIGN_OR_RETURN(hp.context_length, Int(c, "max_position_embeddings", name, 4096, false));
  if (hp.dim == 0 || hp.n_layers == 0 || hp.n_heads == 0 || hp.n_kv_heads == 0 || hp.ffn_dim == 0 ||
      hp.vocab_size == 0 || hp.n_heads % hp.n_kv_heads != 0) {
    return InvalidArgumentError(
        name, ": hidden_size, num_hidden_layers, num_attention_heads, ",
        "intermediate_size and vocab_size must be positive and the key/value "
        "heads must divide the heads");
  }
  LOOM_ASSIGN_OR_RETURN(hp.head_dim, Int(c, "head_dim", name, hp.dim / hp.n_heads, false));
  if (auto it = c.find("tie_word_embeddings"); it != c.end() && !it->is_null()) {
    if (!it->is_boolean())
      return InvalidArgumentError(name, ": tie_word_embeddings must be true or false");
    hp.tied_embeddings = it->get<bool>();
  }
  // Experts: Qwen-MoE and Mixtral spell them num_experts / num_local_experts, DeepSeek
  // n_routed_experts.
  int64_t experts = 0;
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"}) {
    LOOM_ASSIGN_OR_RETURN(const int64_t n, Int(c, key, name, 0, false));
    experts = std::max(experts, n);
  }
  LOOM_ASSIGN_OR_RETURN(const int64_t used, Int(c, "num_experts_per_tok", name, 0, false));
  LOOM_ASSIGN_OR_RETURN(const int64_t shared, Int(c, "n_shared_experts", name, 0, false));
  // Qwen2-MoE's one shared expert has a width of its own (and a gate vector).
  LOOM_ASSIGN_OR_RETURN(const int64_t shared_width,
                        Int(c, "shared_expert_intermediate_size", name, 0, false));
  LOOM_ASSIGN_OR_RETURN(const int64_t expert_ffn,
                        Int(c, "moe_intermediate_size", name, hp.ffn_dim, false));
  LOOM_ASSIGN_OR_RETURN(const int64_t first_dense, Int(c, "first_k_dense_replace", name, 0, false));
  LOOM_ASSIGN_OR_RETURN(const int64_t sparse_step, Int(c, "decoder_sparse_step", name, 1, false));
  if (experts > 0) {
    if (used == 0 || used > experts) {
      return InvalidArgumentError(name, ": num_experts_per_tok ", used, " of ", experts,
                                  " experts");
    }
    hp.n_experts = experts;
    hp.n_experts_used = used;
    hp.expert_ffn_dim = expert_ffn;
    hp.n_shared_experts = shared_width > 0 ? 1 : shared;
    hp.shared_ffn_dim = shared_width;
  }
  std::vector<bool> dense_only(static_cast<size_t>(hp.n_layers), experts == 0);
  for (int64_t l = 0; l < hp.n_layers; ++l) {
    if (l < first_dense || (sparse_step > 1 && (l + 1) % sparse_step != 0)) {
      dense_only[static_cast<size_t>(l)] = true;
    }
  }
  if (auto it = c.find("mlp_only_layers"); it != c.end() && it->is_array()) {
    for (const json& l : *it) {
      if (l.is_number_integer() && l.get<int64_t>() >= 0 && l.get<int64_t>() < hp.n_layers) {
        dense_only[static_cast<size_t>(l.get<int64_t>())] = true;
      }
    }
  }
  // Multi-head latent attention (DeepSeek-V2/V3, Kimi K2).
  LOOM_ASSIGN_OR_RETURN(const int64_t kv_lora, Int(c, "kv_lora_rank", name, 0, false));
  LOOM_ASSIGN_OR_RETURN(const int64_t q_lora, Int(c, "q_lora_rank", name, 0, false));
  LOOM_ASSIGN_OR_RETURN(const int64_t nope, Int(c, "qk_nope_head_dim", name, 0, false));
  LOOM_ASSIGN_OR_RETURN(const int64_t rope, Int(c, "qk_rope_head_dim", name, 0, false));
  LOOM_ASSIGN_OR_RETURN(const int64_t v_dim, Int(c, "v_head_dim", name, 0, false));
  const bool mla = kv_lora > 0;
  if (mla && (nope == 0 || rope == 0 || v_dim == 0 || rope % 2 != 0)) {
    return InvalidArgumentError(name,
                                ": kv_lora_rank needs qk_nope_head_dim, qk_rope_head_dim "
                                "(even) and v_head_dim");
  }
  if (mla) {
    hp.arch = "deepseek2";  // llama.cpp's name for the DeepSeek-V2/V3 layout
    // The cache holds, per token and layer, the latent (kv_lora_rank) and the shared rope key
    // (qk_rope_head_dim): the planner's KV count (2 x kv_heads x head_dim) sees it as one head
    // of half that width.
    hp.n_kv_heads = 1;
    hp.head_dim = (kv_lora + rope) / 2;
  } else if (model_type.find("qwen3") != std::string::npos) {
    hp.arch = experts > 0 ? "qwen3moe" : "qwen3";
  } else if (model_type.find("qwen2") != std::string::npos) {
    hp.arch = "qwen2";
  } else {
    hp.arch = "llama";  // Llama, Mistral, Mixtral
  }

  Builder b(m.get(), storage);
  const int64_t d = hp.dim;
  b.Matrix("token_embd.weight", {hp.vocab_size, d});
  if (!hp.tied_embeddings) b.Matrix("output.weight", {hp.vocab_size, d});
  b.Vector("output_norm.weight", d);
  for (int64_t l = 0; l < hp.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    b.Vector(p + "attn_norm.weight", d);
    b.Vector(p + "ffn_norm.weight", d);
    if (mla) {
      const int64_t q_width = hp.n_heads * (nope + rope);
      if (q_lora > 0) {
        b.Matrix(p + "attn_q_a.weight", {q_lora, d});
        b.Vector(p + "attn_q_a_norm.weight", q_lora);
        b.Matrix(p + "attn_q_b.weight", {q_width, q_lora});
      } else {
        b.Matrix(p + "attn_q.weight", {q_width, d});
      }
      b.Matrix(p + "attn_kv_a_mqa.weight", {kv_lora + rope, d});
      b.Vector(p + "attn_kv_a_norm.weight", kv_lora);
      b.Matrix(p + "attn_kv_b.weight", {hp.n_heads * (nope + v_dim), kv_lora});
      b.Matrix(p + "attn_output.weight", {d, hp.n_heads * v_dim});
    } else {
      b.Matrix(p + "attn_q.weight", {hp.n_heads * hp.head_dim, d});
      b.Matrix(p + "attn_k.weight", {hp.n_kv_heads * hp.head_dim, d});
      b.Matrix(p + "attn_v.weight", {hp.n_kv_heads * hp.head_dim, d});
      b.Matrix(p + "attn_output.weight", {d, hp.n_heads * hp.head_dim});
      if (hp.arch == "qwen2") {
        b.Vector(p + "attn_q.bias", hp.n_heads * hp.head_dim);
        b.Vector(p + "attn_k.bias", hp.n_kv_heads * hp.head_dim);
        b.Vector(p + "attn_v.bias", hp.n_kv_heads * hp.head_dim);
      } else if (hp.arch.starts_with("qwen3")) {
        b.Vector(p + "attn_q_norm.weight", hp.head_dim);
        b.Vector(p + "attn_k_norm.weight", hp.head_dim);
      }
    }
    if (dense_only[static_cast<size_t>(l)]) {
      b.Matrix(p + "ffn_gate.weight", {hp.ffn_dim, d});
      b.Matrix(p + "ffn_up.weight", {hp.ffn_dim, d});
      b.Matrix(p + "ffn_down.weight", {d, hp.ffn_dim});
      continue;
    }
    b.Matrix(p + "ffn_gate_inp.weight", {experts, d});
    if (mla) b.Vector(p + "exp_probs_b.bias", experts);
    b.Matrix(p + "ffn_gate_exps.weight", {experts, expert_ffn, d});
    b.Matrix(p + "ffn_up_exps.weight", {experts, expert_ffn, d});
    b.Matrix(p + "ffn_down_exps.weight", {experts, d, expert_ffn});
    const int64_t sw = shared_width > 0 ? shared_width : shared * expert_ffn;
    if (sw > 0) {
      b.Matrix(p + "ffn_gate_shexp.weight", {sw, d});
      b.Matrix(p + "ffn_up_shexp.weight", {sw, d});
      b.Matrix(p + "ffn_down_shexp.weight", {d, sw});
    }
    if (shared_width > 0) b.Vector(p + "ffn_gate_inp_shexp.weight", d);
  }
  m->metadata["general.architecture"] = hp.arch;
  m->metadata["planner.source"] =
      "config.json, " + std::string(kernels::Traits(storage.matrix).name);
  return m;
}

StatusOr<std::unique_ptr<model::ModelFile>> OpenShapeOnly(const std::string& path,
                                                          const std::string& type) {
  std::error_code ec;
  std::filesystem::path p = path;
  if (std::filesystem::is_directory(p, ec)) p /= "config.json";
  if (p.extension() == ".json") {  // config.json, or a config saved under another name
    if (!std::filesystem::is_regular_file(p, ec)) {
      return NotFoundError(path, ": no config.json to plan from");
    }
    return ShapeFromConfig(Text(p.string()), p.string(), type);
  }
  if (!type.empty()) {
    return InvalidArgumentError(path,
                                ": --type sizes a config.json; a GGUF file has its own types");
  }
  return ShapeFromGguf(path);
}

}  // namespace loom::cluster
