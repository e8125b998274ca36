#include "loom/text/tokenizer_files.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "loom/base/mapped_file.h"
#include "loom/text/bpe.h"
#include "loom/text/sentencepiece_model.h"

namespace loom::text {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // "▁" U+2581

bool IsUtf8Continuation(char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0x80; }

std::string PieceOrEmpty(const model::TokenizerSpec& spec, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= spec.tokens.size()) return {};
  return spec.tokens[static_cast<size_t>(id)];
}

// Tokens that text matching finds whole: control, unknown and user-defined ones.
Json AddedTokens(const model::TokenizerSpec& spec) {
  Json added = Json::array();
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const int32_t type = spec.token_types.empty() ? 1 : spec.token_types[i];
    const bool listed = type == 2 || type == 3 || type == 4 ||
                        static_cast<int32_t>(i) == spec.bos_id ||
                        static_cast<int32_t>(i) == spec.eos_id;
    if (!listed || spec.tokens[i].empty()) continue;
    added.push_back({{"id", static_cast<int64_t>(i)},
                     {"content", spec.tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", type != 4}});
  }
  return added;
}

Json PostProcessor(const model::TokenizerSpec& spec) {
  const std::string bos = PieceOrEmpty(spec, spec.bos_id);
  Json single = Json::array();
  Json pair = Json::array();
  Json specials = Json::object();
  if (spec.add_bos && !bos.empty()) {
    single.push_back({{"SpecialToken", {{"id", bos}, {"type_id", 0}}}});
    pair.push_back({{"SpecialToken", {{"id", bos}, {"type_id", 0}}}});
    specials[bos] = {{"id", bos}, {"ids", {spec.bos_id}}, {"tokens", {bos}}};
  }
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  pair.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (spec.add_bos && !bos.empty()) {
    pair.push_back({{"SpecialToken", {{"id", bos}, {"type_id", 1}}}});
  }
  pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", pair},
          {"special_tokens", specials}};
}

// The vocabulary object; a spelling listed twice keeps its first id (the later ids become gaps).
Json Vocab(const model::TokenizerSpec& spec) {
  Json vocab = Json::object();
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    if (!vocab.contains(spec.tokens[i])) vocab[spec.tokens[i]] = static_cast<int64_t>(i);
  }
  return vocab;
}

// Merges from scores: every split (at character boundaries) of a normal piece into two pieces
// that text can produce, ordered by the merged piece's score (highest first), then by its id and
// the ids of the halves.
std::vector<std::string> MergesFromScores(const model::TokenizerSpec& spec) {
  std::unordered_map<std::string_view, int32_t> ids;
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const int32_t type = spec.token_types[i];
    if (type == 1 || type == 4) ids.emplace(spec.tokens[i], static_cast<int32_t>(i));
  }
  struct Candidate {
    float score;
    int32_t id, left, right;
    size_t split;
  };
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    if (spec.token_types[i] != 1) continue;
    const std::string_view piece = spec.tokens[i];
    for (size_t k = 1; k < piece.size(); ++k) {
      if (IsUtf8Continuation(piece[k])) continue;
      const auto l = ids.find(piece.substr(0, k));
      const auto r = ids.find(piece.substr(k));
      if (l == ids.end() || r == ids.end()) continue;
      candidates.push_back({spec.scores[i], static_cast<int32_t>(i), l->second, r->second, k});
    }
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.id != b.id) return a.id < b.id;
    if (a.left != b.left) return a.left < b.left;
    return a.right < b.right;
  });
  std::vector<std::string> merges;
  merges.reserve(candidates.size());
  for (const Candidate& c : candidates) {
    const std::string& piece = spec.tokens[static_cast<size_t>(c.id)];
    merges.push_back(piece.substr(0, c.split) + " " + piece.substr(c.split));
  }
  return merges;
}

StatusOr<Json> SentencePieceJson(const model::TokenizerSpec& in) {
  LOOM_ASSIGN_OR_RETURN(const model::TokenizerSpec spec, MetaspaceSpec(in));
  const bool byte_fallback = std::count(spec.token_types.begin(), spec.token_types.end(), 6) > 0;
  Json normalizers = Json::array();
  if (spec.add_space_prefix) {
    normalizers.push_back({{"type", "Prepend"}, {"prepend", kMetaspace}});
  }
  normalizers.push_back(
      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMetaspace}});
  Json decoders = Json::array();
  decoders.push_back(
      {{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}});
  decoders.push_back({{"type", "ByteFallback"}});
  decoders.push_back({{"type", "Fuse"}});
  if (spec.add_space_prefix) {
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  Json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = AddedTokens(spec);
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = PostProcessor(spec);
  j["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  const std::string unk = PieceOrEmpty(spec, spec.unk_id);
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", unk.empty() ? Json(nullptr) : Json(unk)},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", true},
                {"byte_fallback", byte_fallback},
                {"vocab", Vocab(spec)},
                {"merges", spec.merges.empty() ? MergesFromScores(spec) : spec.merges}};
  return j;
}

StatusOr<Json> ByteLevelJson(const model::TokenizerSpec& spec) {
  LOOM_ASSIGN_OR_RETURN(const BpeOptions options, BpeOptionsForPre(spec.pre, "tokenizer"));
  Json steps = Json::array();
  for (const std::string& regex : options.pre.split_regexes) {
    steps.push_back({{"type", "Split"},
                     {"pattern", {{"Regex", regex}}},
                     {"behavior", "Isolated"},
                     {"invert", false}});
  }
  steps.push_back({{"type", "ByteLevel"},
                   {"add_prefix_space", options.pre.add_prefix_space},
                   {"trim_offsets", false},
                   {"use_regex", options.pre.byte_level_regex}});
  Json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = AddedTokens(spec);
  j["normalizer"] = options.pre.nfc ? Json{{"type", "NFC"}} : Json(nullptr);
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
  j["post_processor"] = PostProcessor(spec);
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  const std::string unk = PieceOrEmpty(spec, spec.unk_id);
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", unk.empty() ? Json(nullptr) : Json(unk)},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", options.ignore_merges},
                {"vocab", Vocab(spec)},
                {"merges", spec.merges}};
  return j;
}

Status WriteText(const fs::path& path, std::string_view text, bool overwrite) {
  std::error_code ec;
  if (!overwrite && fs::exists(path, ec)) return OkStatus();
  return base::WriteFileAtomically(path.string(),
                                   {reinterpret_cast<const std::byte*>(text.data()), text.size()});
}

}  // namespace

StatusOr<std::string> TokenizerJsonText(const model::TokenizerSpec& spec) {
  Json j;
  if (spec.model == "llama") {
    LOOM_ASSIGN_OR_RETURN(j, SentencePieceJson(spec));
  } else if (spec.model == "gpt2") {
    LOOM_ASSIGN_OR_RETURN(j, ByteLevelJson(spec));
  } else {
    return UnimplementedError("tokenizer model '", spec.model, "' has no tokenizer.json form here");
  }
  // Pieces of a vocabulary may be invalid UTF-8 (byte-level ones never are): replace, not throw.
  return j.dump(1, ' ', false, Json::error_handler_t::replace) + "\n";
}

StatusOr<std::string> TokenizerConfigText(const model::TokenizerSpec& in) {
  model::TokenizerSpec spec = in;
  if (spec.model == "llama") {
    LOOM_ASSIGN_OR_RETURN(spec, MetaspaceSpec(in));
  }
  auto token = [&](int32_t id) {
    const std::string text = PieceOrEmpty(spec, id);
    return text.empty() ? Json(nullptr) : Json(text);
  };
  Json j;
  j["add_bos_token"] = spec.add_bos && spec.bos_id >= 0;
  j["add_eos_token"] = spec.add_eos;
  j["bos_token"] = token(spec.bos_id);
  j["eos_token"] = token(spec.eos_id);
  j["unk_token"] = token(spec.unk_id);
  j["pad_token"] = token(spec.pad_id);
  j["clean_up_tokenization_spaces"] = false;
  if (spec.model == "llama") {
    j["legacy"] = true;
    j["tokenizer_class"] = "LlamaTokenizer";
  } else {
    j["tokenizer_class"] = "PreTrainedTokenizerFast";
  }
  if (!spec.chat_template.empty()) j["chat_template"] = spec.chat_template;
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

Status WriteTokenizerFiles(const model::TokenizerSpec& spec, const std::string& dir,
                           const TokenizerFileOptions& options) {
  const fs::path d = dir;
  if (options.tokenizer_json) {
    LOOM_ASSIGN_OR_RETURN(const std::string json, TokenizerJsonText(spec));
    LOOM_RETURN_IF_ERROR(WriteText(d / "tokenizer.json", json, options.overwrite));
    LOOM_ASSIGN_OR_RETURN(const std::string config, TokenizerConfigText(spec));
    LOOM_RETURN_IF_ERROR(WriteText(d / "tokenizer_config.json", config, options.overwrite));
  }
  if (options.tokenizer_model && spec.model == "llama") {
    LOOM_ASSIGN_OR_RETURN(const std::string bytes, SerializeSentencePieceModel(spec));
    LOOM_RETURN_IF_ERROR(WriteText(d / "tokenizer.model", bytes, options.overwrite));
  }
  if (spec.stop_at_bos && spec.bos_id >= 0) {
    // llama2.c models end when they sample BOS: an eos_token_id list says so.
    Json g;
    g["bos_token_id"] = spec.bos_id;
    g["eos_token_id"] = spec.eos_id >= 0 ? Json{spec.eos_id, spec.bos_id} : Json{spec.bos_id};
    LOOM_RETURN_IF_ERROR(WriteText(d / "generation_config.json", g.dump(2) + "\n", false));
  }
  return OkStatus();
}

}  // namespace loom::text
