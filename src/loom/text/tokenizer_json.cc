#include "loom/text/tokenizer_json.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "loom/base/mapped_file.h"
#include "loom/text/tokenizer_json_internal.h"

namespace loom::text {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int64_t kMaxVocab = 16 << 20;  // ids above this are surely not a real vocabulary

}  // namespace

namespace json_internal {

StatusOr<Json> ParseJson(std::string_view text, std::string_view source) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return InvalidArgumentError(source, ": not valid JSON: ", e.what());
  }
}

Status TypeError(std::string_view source, std::string_view field, std::string_view expected,
                 const Json& value) {
  return InvalidArgumentError(source, ": ", field, " must be ", expected, ", not ",
                              value.type_name());
}

StatusOr<std::string> OptString(const Json& o, const char* field, std::string_view source,
                                std::string_view path, std::string fallback) {
  const auto it = o.find(field);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_string()) return TypeError(source, StrCat(path, field), "a string", *it);
  return it->get<std::string>();
}

StatusOr<bool> OptBool(const Json& o, const char* field, std::string_view source,
                       std::string_view path, bool fallback) {
  const auto it = o.find(field);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return TypeError(source, StrCat(path, field), "true or false", *it);
  return it->get<bool>();
}

StatusOr<int32_t> TokenId(const Json& v, std::string_view source, std::string_view field) {
  if (!v.is_number_integer()) return TypeError(source, field, "an integer token id", v);
  if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(kMaxVocab)
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() >= kMaxVocab)) {
    return InvalidArgumentError(source, ": ", field, " is ", v.dump(), ", outside 0..", kMaxVocab);
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

int32_t FindToken(const model::TokenizerSpec& spec, std::string_view text) {
  if (text.empty()) return -1;
  // Added tokens sit at the end of the vocabulary; search from there.
  for (size_t i = spec.tokens.size(); i-- > 0;) {
    if (spec.tokens[i] == text) return static_cast<int32_t>(i);
  }
  return -1;
}

}  // namespace json_internal

namespace {

using namespace json_internal;  // NOLINT: the helpers are this file's own

// tokenizer.json as parsed: model.vocab and model.merges streamed straight into vectors (a DOM of
// 400k small strings in std::map nodes would cost most of the load time), the rest as a DOM.
struct RawTokenizerJson {
  Json rest;
  bool has_vocab = false;
  bool has_merges = false;
  std::vector<std::pair<std::string, Json>> vocab;  // (piece, id as parsed)
  std::vector<std::string> merges;                  // "a b"
};

class TokenizerJsonSax final : public nlohmann::json_sax<Json> {
 public:
  explicit TokenizerJsonSax(RawTokenizerJson* out) : out_(out) {}

  bool null() override { return Value(Json(nullptr)); }
  bool boolean(bool v) override { return Value(Json(v)); }
  bool number_integer(number_integer_t v) override { return Value(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Value(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Value(Json(v)); }
  bool string(string_t& v) override {
    if (mode_ == Mode::kMerges) {
      out_->merges.push_back(std::move(v));
      return true;
    }
    if (mode_ == Mode::kMergePair) {
      pair_.push_back(std::move(v));
      return pair_.size() <= 2 || Fail("model.merges entries must be pairs of strings");
    }
    return Value(Json(std::move(v)));
  }
  bool binary(binary_t&) override { return Fail("binary values are not JSON"); }

  bool start_object(std::size_t) override {
    if (mode_ == Mode::kVocab) return Fail("model.vocab values must be integer token ids");
    if (mode_ != Mode::kDom) return Fail("model.merges entries must be strings or pairs");
    if (AtModelKey("vocab")) {
      mode_ = Mode::kVocab;
      out_->has_vocab = true;
      return true;
    }
    return Push(Json::object());
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    path_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kVocab) return Fail("model.vocab values must be integer token ids");
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_.clear();
      return true;
    }
    if (mode_ == Mode::kMergePair) return Fail("model.merges entries must be pairs of strings");
    if (AtModelKey("merges")) {
      mode_ = Mode::kMerges;
      out_->has_merges = true;
      return true;
    }
    return Push(Json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_.size() != 2) return Fail("model.merges entries must be pairs of strings");
      if (pair_[0].find(' ') != std::string::npos || pair_[1].find(' ') != std::string::npos) {
        return Fail(
            "model.merges joins tokens containing spaces, which byte-level BPE "
            "vocabularies never have");
      }
      out_->merges.push_back(pair_[0] + " " + pair_[1]);
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    path_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    if (error_.empty()) error_ = StrCat("not valid JSON at byte ", position, ": ", e.what());
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  enum class Mode : uint8_t { kDom, kVocab, kMerges, kMergePair };

  bool Fail(std::string_view what) {
    if (error_.empty()) error_ = std::string(what);
    return false;
  }
  // Whether the next value is "model"."<name>" (a value of the top-level "model" object).
  bool AtModelKey(std::string_view name) const {
    return path_.size() == 2 && path_[1] == "model" && key_ == name;
  }
  // Stores a scalar where the DOM is; inside the vocabulary, an id.
  bool Value(Json v) {
    if (mode_ == Mode::kVocab) {
      if (!v.is_number_integer()) {
        return Fail(StrCat("model.vocab['", vocab_key_, "'] must be an integer token id"));
      }
      out_->vocab.emplace_back(std::move(vocab_key_), std::move(v));
      return true;
    }
    if (mode_ != Mode::kDom) return Fail("model.merges entries must be strings or pairs");
    Place(std::move(v));
    return true;
  }
  Json* Place(Json v) {
    if (stack_.empty()) {
      out_->rest = std::move(v);
      return &out_->rest;
    }
    Json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    Json& slot = (*top)[key_];
    slot = std::move(v);
    return &slot;
  }
  bool Push(Json container) {
    const std::string name =
        stack_.empty() ? std::string() : (stack_.back()->is_array() ? "[]" : key_);
    stack_.push_back(Place(std::move(container)));
    path_.push_back(name);
    return true;
  }

  RawTokenizerJson* out_;
  Mode mode_ = Mode::kDom;
  std::vector<Json*> stack_;
  std::vector<std::string> path_;  // key (or "[]") of each open container; "" for the root
  std::string key_;
  std::string vocab_key_;
  std::vector<std::string> pair_;
  std::string error_;
};

StatusOr<RawTokenizerJson> ReadTokenizerJson(std::string_view text, std::string_view source) {
  RawTokenizerJson raw;
  TokenizerJsonSax sax(&raw);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const Json::exception& e) {
    return InvalidArgumentError(source, ": not valid JSON: ", e.what());
  }
  if (!ok) {
    return InvalidArgumentError(source, ": ", sax.error().empty() ? "not valid JSON" : sax.error());
  }
  return raw;
}

Status ParseNormalizer(const Json& n, std::string_view source, PreTokenizerConfig* pre) {
  if (n.is_null()) return OkStatus();
  if (!n.is_object()) return TypeError(source, "normalizer", "an object or null", n);
  LOOM_ASSIGN_OR_RETURN(const std::string type, OptString(n, "type", source, "normalizer."));
  if (type == "NFC") {
    pre->nfc = true;
    return OkStatus();
  }
  if (type == "Sequence") {
    const auto it = n.find("normalizers");
    if (it == n.end() || !it->is_array()) {
      return InvalidArgumentError(source, ": normalizer Sequence without a normalizers array");
    }
    for (const Json& step : *it) LOOM_RETURN_IF_ERROR(ParseNormalizer(step, source, pre));
    return OkStatus();
  }
  return UnimplementedError(source, ": normalizer '", type,
                            "' is not supported (byte-level BPE supports none or NFC)");
}

// Escapes `literal` for a PCRE2 pattern.
std::string EscapeRegex(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// One pre-tokenizer step; `seen_byte_level` is set by the ByteLevel step, after which nothing may
// follow (it would split text already spelled in the byte alphabet).
Status ParsePreTokenizer(const Json& p, std::string_view source, PreTokenizerConfig* pre,
                         bool* seen_byte_level) {
  if (!p.is_object()) return TypeError(source, "pre_tokenizer", "an object", p);
  LOOM_ASSIGN_OR_RETURN(const std::string type, OptString(p, "type", source, "pre_tokenizer."));
  if (type == "Sequence") {
    const auto it = p.find("pretokenizers");
    if (it == p.end() || !it->is_array()) {
      return InvalidArgumentError(source, ": pre_tokenizer Sequence without a pretokenizers array");
    }
    for (const Json& step : *it) {
      LOOM_RETURN_IF_ERROR(ParsePreTokenizer(step, source, pre, seen_byte_level));
    }
    return OkStatus();
  }
  if (*seen_byte_level) {
    return UnimplementedError(source, ": pre_tokenizer '", type,
                              "' after ByteLevel is not supported");
  }
  if (type == "ByteLevel") {
    LOOM_ASSIGN_OR_RETURN(pre->add_prefix_space,
                          OptBool(p, "add_prefix_space", source, "pre_tokenizer.", false));
    LOOM_ASSIGN_OR_RETURN(pre->byte_level_regex,
                          OptBool(p, "use_regex", source, "pre_tokenizer.", true));
    *seen_byte_level = true;
    return OkStatus();
  }
  if (type == "Split") {
    LOOM_ASSIGN_OR_RETURN(const std::string behavior,
                          OptString(p, "behavior", source, "pre_tokenizer.Split."));
    LOOM_ASSIGN_OR_RETURN(const bool invert,
                          OptBool(p, "invert", source, "pre_tokenizer.Split.", false));
    if (behavior != "Isolated" || invert) {
      return UnimplementedError(source, ": pre_tokenizer Split with behavior '", behavior, "'",
                                invert ? " and invert" : "",
                                " is not supported (only Isolated, not inverted)");
    }
    const auto pattern = p.find("pattern");
    if (pattern == p.end() || !pattern->is_object()) {
      return InvalidArgumentError(source, ": pre_tokenizer Split without a pattern object");
    }
    if (const auto r = pattern->find("Regex"); r != pattern->end() && r->is_string()) {
      pre->split_regexes.push_back(r->get<std::string>());
    } else if (const auto s = pattern->find("String"); s != pattern->end() && s->is_string()) {
      pre->split_regexes.push_back(EscapeRegex(s->get<std::string>()));
    } else {
      return InvalidArgumentError(source,
                                  ": pre_tokenizer Split pattern needs a Regex or String string");
    }
    return OkStatus();
  }
  return UnimplementedError(source, ": pre_tokenizer '", type, "' is not supported");
}

Status CheckDecoder(const Json& d, std::string_view source) {
  if (d.is_null()) return OkStatus();
  if (!d.is_object()) return TypeError(source, "decoder", "an object or null", d);
  LOOM_ASSIGN_OR_RETURN(const std::string type, OptString(d, "type", source, "decoder."));
  if (type == "ByteLevel") return OkStatus();
  if (type == "Sequence") {
    const auto it = d.find("decoders");
    if (it == d.end() || !it->is_array()) {
      return InvalidArgumentError(source, ": decoder Sequence without a decoders array");
    }
    for (const Json& step : *it) LOOM_RETURN_IF_ERROR(CheckDecoder(step, source));
    return OkStatus();
  }
  return UnimplementedError(source, ": decoder '", type,
                            "' is not supported (byte-level BPE decodes with ByteLevel)");
}

// Reads TemplateProcessing's single-sequence template: a leading {"SpecialToken": {"id": X}}.
Status ParsePostProcessor(const Json& p, std::string_view source, TokenizerJson* t) {
  if (p.is_null() || !p.is_object()) return OkStatus();  // nothing there decides BOS
  LOOM_ASSIGN_OR_RETURN(const std::string type, OptString(p, "type", source, "post_processor."));
  if (type == "Sequence") {
    const auto it = p.find("processors");
    if (it == p.end() || !it->is_array()) return OkStatus();
    for (const Json& step : *it) LOOM_RETURN_IF_ERROR(ParsePostProcessor(step, source, t));
    return OkStatus();
  }
  if (type != "TemplateProcessing") return OkStatus();
  t->has_template = true;
  const auto single = p.find("single");
  if (single == p.end() || !single->is_array() || single->empty()) return OkStatus();
  const Json& first = single->front();
  if (!first.is_object()) return OkStatus();
  const auto special = first.find("SpecialToken");
  if (special == first.end() || !special->is_object()) return OkStatus();
  LOOM_ASSIGN_OR_RETURN(const std::string id,
                        OptString(*special, "id", source, "post_processor.single.SpecialToken."));
  t->template_bos_id = FindToken(t->spec, id);
  if (t->template_bos_id < 0) {
    return InvalidArgumentError(source, ": post_processor template starts with '", id,
                                "', which is not a token");
  }
  return OkStatus();
}

std::string KnownPreName(const PreTokenizerConfig& pre) {
  if (pre.split_regexes.size() == 1 && !pre.byte_level_regex) {
    const std::string& r = pre.split_regexes[0];
    if (r == kLlama3Regex) return "llama-bpe";
    if (r == kQwen2Regex) return "qwen2";
    if (r == kTekkenRegex) return "tekken";
    if (r == kGpt2Regex) return "gpt-2";
  }
  if (pre.split_regexes.empty() && pre.byte_level_regex) return "gpt-2";
  if (!pre.byte_level_regex &&
      std::equal(pre.split_regexes.begin(), pre.split_regexes.end(), std::begin(kDeepSeekV3Regexes),
                 std::end(kDeepSeekV3Regexes))) {
    return "deepseek-v3";
  }
  return "";
}

// A token given as a string or as {"content": string} (tokenizer_config.json); "" for null.
StatusOr<std::string> TokenText(const Json& o, const char* field, std::string_view source) {
  const auto it = o.find(field);
  if (it == o.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return OptString(*it, "content", source, StrCat(field, "."));
  return TypeError(source, field, "a string or an object with content", *it);
}

// The ids of an id-or-list field of config.json.
StatusOr<std::vector<int32_t>> IdList(const Json& o, const char* field, std::string_view source) {
  std::vector<int32_t> out;
  const auto it = o.find(field);
  if (it == o.end() || it->is_null()) return out;
  if (it->is_array()) {
    for (const Json& v : *it) {
      LOOM_ASSIGN_OR_RETURN(const int32_t id, TokenId(v, source, field));
      out.push_back(id);
    }
    return out;
  }
  LOOM_ASSIGN_OR_RETURN(const int32_t id, TokenId(*it, source, field));
  out.push_back(id);
  return out;
}

}  // namespace

StatusOr<TokenizerJson> ParseTokenizerJson(std::string_view text, std::string_view source) {
  LOOM_ASSIGN_OR_RETURN(RawTokenizerJson raw, ReadTokenizerJson(text, source));
  const Json& root = raw.rest;
  if (!root.is_object()) return TypeError(source, "the top level", "an object", root);
  const auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) {
    return InvalidArgumentError(source, ": no \"model\" object (not a tokenizer.json?)");
  }
  const Json& m = *model_it;
  LOOM_ASSIGN_OR_RETURN(const std::string type, OptString(m, "type", source, "model.", "BPE"));
  if (type != "BPE") {
    return UnimplementedError(source, ": tokenizer model type '", type,
                              "' is not supported (only byte-level BPE)");
  }
  const bool sentencepiece = IsSentencePieceStyle(root, m);
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    LOOM_ASSIGN_OR_RETURN(const std::string affix, OptString(m, field, source, "model."));
    if (!affix.empty()) {
      return UnimplementedError(source, ": model.", field, " '", affix, "' is not supported");
    }
  }

  TokenizerJson t;
  model::TokenizerSpec& spec = t.spec;
  spec.model = "gpt2";
  spec.add_bos = false;
  spec.add_space_prefix = false;
  LOOM_ASSIGN_OR_RETURN(t.options.ignore_merges,
                        OptBool(m, "ignore_merges", source, "model.", false));

  // Vocabulary and added tokens, by id.
  if (!raw.has_vocab || m.contains("vocab")) {
    return InvalidArgumentError(source, ": model.vocab must be an object of piece -> id");
  }
  struct Entry {
    std::string text;
    int32_t type = 0;  // 0 = free slot
  };
  std::vector<Entry> entries;
  const int64_t max_entries = static_cast<int64_t>(raw.vocab.size()) + 1024;
  auto place = [&](int32_t id, const std::string& piece, int32_t type, const char* what) -> Status {
    // Gaps are allowed, but not so many that a few entries could demand a huge table.
    if (id >= 2 * max_entries) {
      return InvalidArgumentError(source, ": ", what, " '", piece, "' has id ", id,
                                  ", far beyond the ", raw.vocab.size(), " vocabulary entries");
    }
    if (static_cast<size_t>(id) >= entries.size()) entries.resize(static_cast<size_t>(id) + 1);
    Entry& e = entries[static_cast<size_t>(id)];
    if (e.type != 0) {
      if (e.text != piece) {
        return InvalidArgumentError(source, ": ", what, " '", piece, "' has id ", id,
                                    ", which already belongs to '", e.text, "'");
      }
      if (type == 1) {
        return InvalidArgumentError(source, ": model.vocab lists id ", id, " twice");
      }
    }
    e.text = piece;
    e.type = type;
    return OkStatus();
  };
  for (auto& [piece, value] : raw.vocab) {
    LOOM_ASSIGN_OR_RETURN(const int32_t id,
                          TokenId(value, source, StrCat("model.vocab['", piece, "']")));
    LOOM_RETURN_IF_ERROR(place(id, piece, 1, "vocabulary piece"));
  }
  if (const auto added = root.find("added_tokens"); added != root.end() && !added->is_null()) {
    if (!added->is_array()) return TypeError(source, "added_tokens", "an array", *added);
    std::vector<bool> seen;
    for (size_t i = 0; i < added->size(); ++i) {
      const Json& a = (*added)[i];
      const std::string path = StrCat("added_tokens[", i, "].");
      if (!a.is_object()) return TypeError(source, StrCat("added_tokens[", i, "]"), "an object", a);
      const auto id_it = a.find("id");
      if (id_it == a.end()) return InvalidArgumentError(source, ": ", path, "id is missing");
      LOOM_ASSIGN_OR_RETURN(const int32_t id, TokenId(*id_it, source, path + "id"));
      LOOM_ASSIGN_OR_RETURN(const std::string content, OptString(a, "content", source, path));
      if (content.empty()) return InvalidArgumentError(source, ": ", path, "content is empty");
      LOOM_ASSIGN_OR_RETURN(const bool special, OptBool(a, "special", source, path, false));
      LOOM_ASSIGN_OR_RETURN(const bool lstrip, OptBool(a, "lstrip", source, path, false));
      LOOM_ASSIGN_OR_RETURN(const bool rstrip, OptBool(a, "rstrip", source, path, false));
      if (static_cast<size_t>(id) < seen.size() && seen[static_cast<size_t>(id)]) {
        return InvalidArgumentError(source, ": added_tokens lists id ", id, " twice");
      }
      LOOM_RETURN_IF_ERROR(place(id, content, special ? 3 : 4, "added token"));
      if (static_cast<size_t>(id) >= seen.size()) seen.resize(static_cast<size_t>(id) + 1);
      seen[static_cast<size_t>(id)] = true;
      if (lstrip) t.options.lstrip_ids.push_back(id);
      if (rstrip) t.options.rstrip_ids.push_back(id);
    }
  }
  if (entries.empty()) return InvalidArgumentError(source, ": the vocabulary is empty");
  spec.tokens.resize(entries.size());
  spec.token_types.resize(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    spec.tokens[i] = std::move(entries[i].text);
    spec.token_types[i] = entries[i].type == 0 ? 5 : entries[i].type;  // gaps: unused
  }

  // Merges: "a b" strings (older files) or [a, b] pairs (tokenizers >= 0.20), already joined.
  if (m.contains("merges") && !m["merges"].is_null()) {
    return TypeError(source, "model.merges", "an array", m["merges"]);
  }
  spec.merges = std::move(raw.merges);

  LOOM_ASSIGN_OR_RETURN(const std::string unk, OptString(m, "unk_token", source, "model."));
  if (!unk.empty()) {
    spec.unk_id = FindToken(spec, unk);
    if (spec.unk_id < 0) {
      return InvalidArgumentError(source, ": model.unk_token '", unk, "' is not in the vocabulary");
    }
  }

  if (sentencepiece) {
    LOOM_RETURN_IF_ERROR(ParseSentencePieceStyle(root, m, source, &t));
    if (const auto p = root.find("post_processor"); p != root.end()) {
      LOOM_RETURN_IF_ERROR(ParsePostProcessor(*p, source, &t));
    }
    spec.bos_id = t.template_bos_id;
    spec.add_bos = t.template_bos_id >= 0;
    return t;
  }
  if (const auto n = root.find("normalizer"); n != root.end()) {
    LOOM_RETURN_IF_ERROR(ParseNormalizer(*n, source, &t.options.pre));
  }
  bool byte_level = false;
  if (const auto p = root.find("pre_tokenizer"); p != root.end() && !p->is_null()) {
    LOOM_RETURN_IF_ERROR(ParsePreTokenizer(*p, source, &t.options.pre, &byte_level));
  }
  if (!byte_level) {
    return UnimplementedError(source,
                              ": the pre_tokenizer has no ByteLevel step, so this is not a "
                              "byte-level BPE tokenizer (not supported)");
  }
  if (const auto d = root.find("decoder"); d != root.end()) {
    LOOM_RETURN_IF_ERROR(CheckDecoder(*d, source));
  }
  if (const auto p = root.find("post_processor"); p != root.end()) {
    LOOM_RETURN_IF_ERROR(ParsePostProcessor(*p, source, &t));
  }
  spec.pre = KnownPreName(t.options.pre);
  if (t.template_bos_id >= 0) {
    spec.bos_id = t.template_bos_id;
    spec.add_bos = true;
  }
  return t;
}

Status ApplyTokenizerConfig(std::string_view text, std::string_view source, TokenizerJson* t) {
  LOOM_ASSIGN_OR_RETURN(const Json root, ParseJson(text, source));
  if (!root.is_object()) return TypeError(source, "the top level", "an object", root);
  model::TokenizerSpec& spec = t->spec;
  if (const auto it = root.find("chat_template"); it != root.end() && !it->is_null()) {
    if (it->is_string()) {
      spec.chat_template = it->get<std::string>();
    } else if (it->is_array()) {
      for (const Json& named : *it) {
        if (named.is_object() && named.value("name", "") == "default" &&
            named.contains("template") && named["template"].is_string()) {
          spec.chat_template = named["template"].get<std::string>();
        }
      }
    } else {
      return TypeError(source, "chat_template", "a string or a list of named templates", *it);
    }
  }
  LOOM_ASSIGN_OR_RETURN(const std::string bos, TokenText(root, "bos_token", source));
  LOOM_ASSIGN_OR_RETURN(const std::string eos, TokenText(root, "eos_token", source));
  t->options.has_chat_tokens = true;
  t->options.chat_bos_token = bos;
  t->options.chat_eos_token = eos;
  for (const auto& [name, value, id] :
       {std::tuple{"bos_token", bos, &spec.bos_id}, std::tuple{"eos_token", eos, &spec.eos_id}}) {
    if (value.empty()) continue;
    const int32_t found = FindToken(spec, value);
    if (found < 0) {
      return InvalidArgumentError(source, ": ", name, " '", value, "' is not in the vocabulary");
    }
    *id = found;
  }
  if (const auto it = root.find("add_bos_token"); it != root.end() && !it->is_null()) {
    if (!it->is_boolean()) return TypeError(source, "add_bos_token", "true or false", *it);
    spec.add_bos = it->get<bool>();
  }
  if (const auto it = root.find("add_eos_token"); it != root.end() && !it->is_null()) {
    if (!it->is_boolean()) return TypeError(source, "add_eos_token", "true or false", *it);
    spec.add_eos = it->get<bool>();
  }
  return OkStatus();
}

Status ApplyModelConfig(std::string_view text, std::string_view source, TokenizerJson* t) {
  LOOM_ASSIGN_OR_RETURN(const Json root, ParseJson(text, source));
  if (!root.is_object()) return TypeError(source, "the top level", "an object", root);
  const int64_t n = static_cast<int64_t>(t->spec.tokens.size());
  LOOM_ASSIGN_OR_RETURN(const std::vector<int32_t> bos, IdList(root, "bos_token_id", source));
  LOOM_ASSIGN_OR_RETURN(const std::vector<int32_t> eos, IdList(root, "eos_token_id", source));
  // Ids beyond the tokenizer (models pad their embedding tables) cannot be produced; skip them.
  if (t->spec.bos_id < 0 && !bos.empty() && bos[0] < n) t->spec.bos_id = bos[0];
  for (int32_t id : eos) {
    if (id >= n) continue;
    if (t->spec.eos_id < 0) t->spec.eos_id = id;
    if (std::find(t->options.eog_ids.begin(), t->options.eog_ids.end(), id) ==
        t->options.eog_ids.end()) {
      t->options.eog_ids.push_back(id);
    }
  }
  return OkStatus();
}

void FinishTokenizerJson(bool config_set_add_bos, TokenizerJson* t) {
  model::TokenizerSpec& spec = t->spec;
  if (!config_set_add_bos) {
    if (t->has_template) {
      spec.add_bos = t->template_bos_id >= 0;
    } else {
      spec.add_bos = t->options.has_chat_tokens && !t->options.chat_bos_token.empty() &&
                     t->options.chat_bos_token != t->options.chat_eos_token;
    }
  }
  if (spec.bos_id < 0) spec.add_bos = false;
}

StatusOr<TokenizerJson> LoadTokenizerJson(const std::string& path) {
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) {
    file /= "tokenizer.json";
    if (!fs::is_regular_file(file, ec)) {
      return NotFoundError(path, " is a directory without a tokenizer.json");
    }
  }
  const fs::path dir = file.parent_path();
  TokenizerJson t;
  {
    LOOM_ASSIGN_OR_RETURN(const base::MappedFile mapped, base::MappedFile::Open(file.string()));
    const std::span<const std::byte> bytes = mapped.bytes();
    LOOM_ASSIGN_OR_RETURN(
        t, ParseTokenizerJson(
               std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
               file.string()));
  }

  LOOM_ASSIGN_OR_RETURN(const bool config_set_add_bos, ApplyDirectoryConfigs(dir.string(), &t));
  FinishTokenizerJson(config_set_add_bos, &t);
  return t;
}

StatusOr<bool> ApplyDirectoryConfigs(const std::string& directory, TokenizerJson* t) {
  std::error_code ec;
  const fs::path dir = directory;
  auto read_if_present = [&](const char* name) -> StatusOr<std::string> {
    const fs::path p = dir / name;
    if (!fs::is_regular_file(p, ec)) return std::string();
    return base::ReadFileToString(p.string());
  };
  bool config_set_add_bos = false;
  LOOM_ASSIGN_OR_RETURN(const std::string config_text, read_if_present("tokenizer_config.json"));
  if (!config_text.empty()) {
    const std::string name = (dir / "tokenizer_config.json").string();
    LOOM_RETURN_IF_ERROR(ApplyTokenizerConfig(config_text, name, t));
    LOOM_ASSIGN_OR_RETURN(const Json root, ParseJson(config_text, name));
    config_set_add_bos = root.contains("add_bos_token") && root["add_bos_token"].is_boolean();
  }
  if (t->spec.chat_template.empty()) {
    // Newer transformers save the template in a file of its own.
    LOOM_ASSIGN_OR_RETURN(t->spec.chat_template, read_if_present("chat_template.jinja"));
  }
  for (const char* name : {"config.json", "generation_config.json"}) {
    LOOM_ASSIGN_OR_RETURN(const std::string model_config, read_if_present(name));
    if (!model_config.empty()) {
      LOOM_RETURN_IF_ERROR(ApplyModelConfig(model_config, (dir / name).string(), t));
    }
  }
  return config_set_add_bos;
}

bool LooksLikeJson(std::span<const std::byte> bytes) {
  for (std::byte b : bytes) {
    const char c = static_cast<char>(b);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    return c == '{';
  }
  return false;
}

}  // namespace loom::text
