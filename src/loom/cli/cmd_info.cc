// `loom info -m MODEL [--json] [--tensors]`: describes a model file: format, architecture,
// hyperparameters, tokenizer, tensor count and bytes per type, and every metadata key.  A GGUF file
// that loom cannot run (an unsupported tensor type or architecture detail) is still described from
// its raw contents, with the reason it cannot be loaded.  Bad files: a message on stderr, exit 1.
// Everything taken from the file is escaped for the terminal (base/escape.h) in the text output;
// --json output is JSON (invalid UTF-8 replaced, controls escaped by JSON itself).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "loom/base/escape.h"
#include "loom/base/mapped_file.h"
#include "loom/cli/commands.h"
#include "loom/model/gguf_reader.h"
#include "loom/model/model_cache.h"
#include "loom/model/model_file.h"

namespace loom::cli {
namespace {

struct InfoOptions {
  std::string model;
  bool json = false;
  bool tensors = false;
};

struct TensorRow {
  std::string name;
  std::string type;
  std::vector<int64_t> shape;  // outermost first
  int64_t offset = 0;
  int64_t bytes = 0;
};

// What `info` shows, from a loaded model or (when loom cannot load it) from a raw GGUF parse.
struct Report {
  std::string path;
  std::string format;
  int64_t file_bytes = 0;
  std::string load_error;  // empty when loom can run the model
  const model::ModelFile* model = nullptr;
  std::vector<TensorRow> tensors;
  std::map<std::string, std::string> metadata;
};

// A string from the file, safe to print.
std::string E(std::string_view s) { return base::EscapeForTerminal(s); }

std::string Bytes(int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

std::string Shape(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

const char* RopeStyleName(kernels::RopeStyle s) {
  return s == kernels::RopeStyle::kInterleaved ? "interleaved" : "halves";
}

const char* RopeScalingName(model::RopeScalingType t) {
  switch (t) {
    case model::RopeScalingType::kNone:
      return "none";
    case model::RopeScalingType::kLinear:
      return "linear";
    case model::RopeScalingType::kLlama3:
      return "llama3";
    case model::RopeScalingType::kYarn:
      return "yarn";
  }
  return "?";
}

struct TypeTotal {
  int64_t count = 0;
  int64_t bytes = 0;
};

std::map<std::string, TypeTotal> ByType(const Report& r) {
  std::map<std::string, TypeTotal> by_type;
  for (const TensorRow& t : r.tensors) {
    by_type[t.type].count++;
    by_type[t.type].bytes += t.bytes;
  }
  return by_type;
}

int64_t TotalBytes(const Report& r) {
  int64_t total = 0;
  for (const TensorRow& t : r.tensors) total += t.bytes;
  return total;
}

nlohmann::json ToJson(const Report& r, bool with_tensors) {
  nlohmann::json j;
  j["path"] = r.path;
  j["format"] = r.format;
  j["file_bytes"] = r.file_bytes;
  j["loadable"] = r.load_error.empty();
  if (!r.load_error.empty()) j["load_error"] = r.load_error;
  if (r.model != nullptr) {
    const model::HParams& hp = r.model->hparams;
    j["architecture"] = hp.arch;
    j["hparams"] = {
        {"dim", hp.dim},
        {"n_layers", hp.n_layers},
        {"n_heads", hp.n_heads},
        {"n_kv_heads", hp.n_kv_heads},
        {"head_dim", hp.head_dim},
        {"ffn_dim", hp.ffn_dim},
        {"vocab_size", hp.vocab_size},
        {"context_length", hp.context_length},
        {"rms_eps", hp.rms_eps},
        {"rope_theta", hp.rope_theta},
        {"rope_style", RopeStyleName(hp.rope_style)},
        {"rope_scaling",
         {{"type", RopeScalingName(hp.rope_scaling.type)},
          {"factor", hp.rope_scaling.factor},
          {"original_context", hp.rope_scaling.original_context}}},
        {"tied_embeddings", hp.tied_embeddings},
        {"n_experts", hp.n_experts},
        {"n_experts_used", hp.n_experts_used},
        {"expert_ffn_dim", hp.expert_ffn_dim},
        {"n_shared_experts", hp.n_shared_experts},
        {"shared_ffn_dim", hp.n_shared_experts > 0 ? hp.shared_ffn() : 0},
        {"n_dense_layers", hp.n_dense_layers},
        {"n_expert_groups", hp.n_expert_groups},
        {"n_expert_groups_used", hp.n_expert_groups_used},
        {"expert_gating", hp.gating == model::HParams::Gating::kSigmoid ? "sigmoid" : "softmax"},
        {"expert_weights_norm", hp.expert_weights_norm},
        {"expert_weights_scale", hp.expert_weights_scale},
        {"q_lora_rank", hp.q_lora_rank},
        {"kv_lora_rank", hp.kv_lora_rank},
        {"rope_dim", hp.rope_dim},
        {"v_head_dim", hp.v_head_dim},
    };
    // The f32 cache Loom keeps: per token and layer, the latent and rope key (latent attention)
    // or a key and a value per KV head.
    j["kv_bytes_per_token"] = hp.kv_values_per_token_layer() * 4 * hp.n_layers;
    const model::ParameterCounts pc = model::CountParameters(*r.model);
    j["parameters"] = {{"total", pc.total},
                       {"active", pc.active},
                       {"active_bytes_per_token", pc.active_bytes_per_token}};
    const model::TokenizerSpec& t = r.model->tokenizer;
    j["tokenizer"] = {
        {"model", t.model},
        {"tokens", t.tokens.size()},
        {"merges", t.merges.size()},
        {"pre", t.pre},
        {"bos_id", t.bos_id},
        {"eos_id", t.eos_id},
        {"unk_id", t.unk_id},
        {"pad_id", t.pad_id},
        {"add_bos", t.add_bos},
        {"add_eos", t.add_eos},
        {"add_space_prefix", t.add_space_prefix},
        {"chat_template_bytes", t.chat_template.size()},
    };
  }
  nlohmann::json by_type = nlohmann::json::object();
  for (const auto& [type, total] : ByType(r)) {
    by_type[type] = {{"count", total.count}, {"bytes", total.bytes}};
  }
  j["tensors"] = {{"count", r.tensors.size()}, {"bytes", TotalBytes(r)}, {"by_type", by_type}};
  if (with_tensors) {
    nlohmann::json list = nlohmann::json::array();
    for (const TensorRow& t : r.tensors) {
      list.push_back({{"name", t.name},
                      {"type", t.type},
                      {"shape", t.shape},
                      {"offset", t.offset},
                      {"bytes", t.bytes}});
    }
    j["tensors"]["list"] = list;
  }
  j["metadata"] = r.metadata;
  return j;
}

void PrintText(const Report& r, bool with_tensors) {
  std::printf("file      %s (%s)\n", E(r.path).c_str(), Bytes(r.file_bytes).c_str());
  std::printf("format    %s\n", E(r.format).c_str());
  if (!r.load_error.empty()) std::printf("loadable  no: %s\n", E(r.load_error).c_str());
  if (r.model != nullptr) {
    const model::HParams& hp = r.model->hparams;
    std::printf("arch      %s\n", E(hp.arch).c_str());
    std::printf("shape     dim %lld, %lld layers, %lld heads (%lld kv) of %lld, ffn %lld\n",
                static_cast<long long>(hp.dim), static_cast<long long>(hp.n_layers),
                static_cast<long long>(hp.n_heads), static_cast<long long>(hp.n_kv_heads),
                static_cast<long long>(hp.head_dim), static_cast<long long>(hp.ffn_dim));
    std::printf("          vocab %lld, context %lld, rms eps %g, %s embeddings\n",
                static_cast<long long>(hp.vocab_size), static_cast<long long>(hp.context_length),
                hp.rms_eps, hp.tied_embeddings ? "tied" : "separate output");
    if (hp.is_moe()) {
      std::printf("experts   %lld per layer of ffn %lld, %lld used per token\n",
                  static_cast<long long>(hp.n_experts), static_cast<long long>(hp.expert_ffn_dim),
                  static_cast<long long>(hp.n_experts_used));
    }
    if (hp.n_shared_experts > 0 || hp.n_dense_layers > 0 || hp.n_expert_groups > 1) {
      std::printf(
          "          %lld shared (ffn %lld), %lld leading dense layers, %lld of %lld groups, %s "
          "gating, weights %s x%g\n",
          static_cast<long long>(hp.n_shared_experts),
          static_cast<long long>(hp.n_shared_experts > 0 ? hp.shared_ffn() : 0),
          static_cast<long long>(hp.n_dense_layers),
          static_cast<long long>(hp.n_expert_groups_used),
          static_cast<long long>(hp.n_expert_groups),
          hp.gating == model::HParams::Gating::kSigmoid ? "sigmoid" : "softmax",
          hp.expert_weights_norm ? "renormalised" : "as is", hp.expert_weights_scale);
    }
    if (hp.is_mla()) {
      std::printf(
          "latent    kv rank %lld, q rank %lld, key heads %lld (rope %lld), value heads %lld\n",
          static_cast<long long>(hp.kv_lora_rank), static_cast<long long>(hp.q_lora_rank),
          static_cast<long long>(hp.head_dim), static_cast<long long>(hp.rope_dim),
          static_cast<long long>(hp.v_head_dim));
    }
    std::printf("kv cache  %s per token (f32, all layers)\n",
                Bytes(hp.kv_values_per_token_layer() * 4 * hp.n_layers).c_str());
    const model::ParameterCounts pc = model::CountParameters(*r.model);
    std::printf("params    %.2fM total, %.2fM active; a token reads %s\n",
                static_cast<double>(pc.total) / 1e6, static_cast<double>(pc.active) / 1e6,
                Bytes(pc.active_bytes_per_token).c_str());
    std::printf("rope      theta %g, %s pairs, scaling %s", hp.rope_theta,
                RopeStyleName(hp.rope_style), RopeScalingName(hp.rope_scaling.type));
    if (hp.rope_scaling.type != model::RopeScalingType::kNone) {
      std::printf(" x%g", hp.rope_scaling.factor);
    }
    std::printf("\n");
    const model::TokenizerSpec& t = r.model->tokenizer;
    if (t.model.empty()) {
      std::printf("tokenizer none in the file (bos %d, eos %d; load one separately)\n", t.bos_id,
                  t.eos_id);
    } else {
      std::printf(
          "tokenizer %s, %zu tokens%s, bos %d, eos %d, unk %d, pad %d\n", E(t.model).c_str(),
          t.tokens.size(),
          t.merges.empty() ? "" : (", " + std::to_string(t.merges.size()) + " merges").c_str(),
          t.bos_id, t.eos_id, t.unk_id, t.pad_id);
      std::printf(
          "          add bos %s, add eos %s, space prefix %s, chat template %s\n",
          t.add_bos ? "yes" : "no", t.add_eos ? "yes" : "no", t.add_space_prefix ? "yes" : "no",
          t.chat_template.empty() ? "none"
                                  : (std::to_string(t.chat_template.size()) + " bytes").c_str());
    }
  }
  std::printf("tensors   %zu, %s (%lld bytes)\n", r.tensors.size(), Bytes(TotalBytes(r)).c_str(),
              static_cast<long long>(TotalBytes(r)));
  for (const auto& [type, total] : ByType(r)) {
    std::printf("          %-6s %5lld tensors %12lld bytes\n", E(type).c_str(),
                static_cast<long long>(total.count), static_cast<long long>(total.bytes));
  }
  if (with_tensors) {
    for (const TensorRow& t : r.tensors) {
      std::printf("  %-32s %-6s %-16s offset %lld, %lld bytes\n", E(t.name).c_str(),
                  E(t.type).c_str(), Shape(t.shape).c_str(), static_cast<long long>(t.offset),
                  static_cast<long long>(t.bytes));
    }
  }
  std::printf("metadata  %zu keys\n", r.metadata.size());
  for (const auto& [key, value] : r.metadata) {
    std::printf("  %s = %s\n", E(key).c_str(), E(value).c_str());
  }
}

// Describes a GGUF that OpenModel rejected as unimplemented from its raw structure.
StatusOr<Report> RawGgufReport(const std::string& path, const Status& why) {
  LOOM_ASSIGN_OR_RETURN(base::MappedFile file, base::MappedFile::Open(path));
  LOOM_ASSIGN_OR_RETURN(model::GgufFile gguf, model::ParseGguf(file.bytes(), path));
  Report r;
  r.path = path;
  r.format = "gguf (version " + std::to_string(gguf.version) + ")";
  r.file_bytes = file.size();
  r.load_error = why.ToString();
  for (const model::GgufTensor& t : gguf.tensors) {
    r.tensors.push_back({t.name, std::string(t.type->name),
                         std::vector<int64_t>(t.ne.rbegin(), t.ne.rend()),
                         gguf.data_offset + t.offset, t.size_bytes});
  }
  for (const auto& [key, value] : gguf.metadata) r.metadata[key] = value.Summary();
  return r;
}

int RunInfo(const InfoOptions& options) {
  // -m takes a path or the name of a pulled model (ORG/NAME[@REVISION]).
  StatusOr<std::string> resolved = model::ResolveModelPath(options.model);
  if (!resolved.ok()) {
    std::fprintf(stderr, "loom info: %s\n", E(resolved.status().ToString()).c_str());
    return 1;
  }
  InfoOptions o = options;
  o.model = *resolved;
  StatusOr<std::unique_ptr<model::ModelFile>> m = model::OpenModel(o.model);
  Report r;
  if (m.ok()) {
    const model::ModelFile& mf = **m;
    r.path = o.model;
    r.format = mf.format;
    if (auto v = mf.metadata.find("gguf.version"); v != mf.metadata.end()) {
      r.format += " (version " + v->second + ")";
    } else if (auto v1 = mf.metadata.find("llama2c.version"); v1 != mf.metadata.end()) {
      r.format += " (version " + v1->second + ")";
    }
    r.file_bytes = mf.mappings.empty() ? 0 : mf.mappings[0].size();
    r.model = &mf;
    for (const auto& [name, t] : mf.tensors) {
      r.tensors.push_back(
          {name, std::string(kernels::Traits(t.type).name), t.shape, t.file_offset, t.size_bytes});
    }
    std::sort(r.tensors.begin(), r.tensors.end(),
              [](const TensorRow& a, const TensorRow& b) { return a.offset < b.offset; });
    r.metadata = mf.metadata;
  } else if (m.status().code() == StatusCode::kUnimplemented &&
             !std::filesystem::is_directory(o.model)) {
    StatusOr<Report> raw = RawGgufReport(o.model, m.status());
    if (!raw.ok()) {
      std::fprintf(stderr, "loom info: %s\n", E(m.status().ToString()).c_str());
      return 1;
    }
    r = std::move(raw).value();
  } else {
    std::fprintf(stderr, "loom info: %s\n", E(m.status().ToString()).c_str());
    return 1;
  }
  if (o.json) {
    const std::string text =
        ToJson(r, o.tensors).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    std::printf("%s\n", text.c_str());
  } else {
    PrintText(r, o.tensors);
  }
  return 0;
}

}  // namespace

void AddInfoCommand(CLI::App& app, Action* action) {
  CLI::App* sub = app.add_subcommand("info", "describe a model file");
  auto options = std::make_shared<InfoOptions>();
  sub->add_option("-m,--model", options->model,
                  "a GGUF model, a llama2.c checkpoint, or a pulled model (ORG/NAME[@REV])")
      ->required();
  sub->add_flag("--json", options->json, "print one JSON object (for tools)");
  sub->add_flag("--tensors", options->tensors, "also list every tensor");
  sub->callback([action, options] { *action = [options] { return RunInfo(*options); }; });
}

}  // namespace loom::cli
