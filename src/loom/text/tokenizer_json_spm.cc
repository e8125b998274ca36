// SentencePiece-style tokenizer.json (Llama 2, Mistral, TinyLlama): BPE with byte fallback whose
// spaces are spelled "▁", by a Prepend/Replace normalizer (older files) or a Metaspace
// pre-tokenizer (newer ones).  See tokenizer_json.h for the subset read.
#include <limits>
#include <unordered_map>

#include "loom/text/sentencepiece.h"
#include "loom/text/tokenizer_json.h"
#include "loom/text/tokenizer_json_internal.h"

namespace loom::text::json_internal {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // "▁" U+2581

// Calls `visit` on every step of a component that may be a Sequence (under `list`).
template <typename Visit>
Status ForEachStep(const Json& c, const char* list, std::string_view source, std::string_view what,
                   const Visit& visit) {
  if (c.is_null()) return OkStatus();
  if (!c.is_object()) return TypeError(source, what, "an object or null", c);
  LOOM_ASSIGN_OR_RETURN(const std::string type, OptString(c, "type", source, StrCat(what, ".")));
  if (type == "Sequence") {
    const auto it = c.find(list);
    if (it == c.end() || !it->is_array()) {
      return InvalidArgumentError(source, ": ", what, " Sequence without a ", list, " array");
    }
    for (const Json& step : *it) LOOM_RETURN_IF_ERROR(ForEachStep(step, list, source, what, visit));
    return OkStatus();
  }
  return visit(type, c);
}

bool AnyStep(const Json& root, const char* field, const char* list,
             std::initializer_list<std::string_view> types) {
  const auto it = root.find(field);
  if (it == root.end()) return false;
  bool found = false;
  const Status s = ForEachStep(*it, list, "", field, [&](const std::string& type, const Json&) {
    for (std::string_view t : types) found = found || type == t;
    return OkStatus();
  });
  return s.ok() && found;
}

// The pattern of a Replace step: its "String" (a "Regex" is not supported).
StatusOr<std::string> ReplacePattern(const Json& step, std::string_view source,
                                     std::string_view what) {
  const auto pattern = step.find("pattern");
  if (pattern == step.end() || !pattern->is_object()) {
    return InvalidArgumentError(source, ": ", what, " Replace without a pattern object");
  }
  if (const auto str = pattern->find("String"); str != pattern->end() && str->is_string()) {
    return str->get<std::string>();
  }
  return UnimplementedError(source, ": ", what, " Replace with a Regex pattern is not supported");
}

// Metaspace's prepend_scheme (tokenizers >= 0.14), else the older add_prefix_space.
StatusOr<PrependScheme> MetaspaceScheme(const Json& step, std::string_view source,
                                        std::string_view what) {
  LOOM_ASSIGN_OR_RETURN(const std::string scheme,
                        OptString(step, "prepend_scheme", source, StrCat(what, ".")));
  if (scheme.empty()) {
    LOOM_ASSIGN_OR_RETURN(const bool add,
                          OptBool(step, "add_prefix_space", source, StrCat(what, "."), true));
    return add ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  if (scheme == "always") return PrependScheme::kAlways;
  if (scheme == "first") return PrependScheme::kFirst;
  if (scheme == "never") return PrependScheme::kNever;
  return InvalidArgumentError(source, ": ", what, ".prepend_scheme '", scheme,
                              "' (expected always, first or never)");
}

Status CheckReplacement(const Json& step, std::string_view source, std::string_view what) {
  LOOM_ASSIGN_OR_RETURN(const std::string replacement,
                        OptString(step, "replacement", source, StrCat(what, "."), "\xE2\x96\x81"));
  if (replacement != kMetaspace) {
    return UnimplementedError(source, ": ", what, " Metaspace replacement '", replacement,
                              "' is not supported (only \"\xE2\x96\x81\")");
  }
  return OkStatus();
}

}  // namespace

bool IsSentencePieceStyle(const Json& root, const Json& model) {
  if (const auto b = model.find("byte_fallback");
      b != model.end() && b->is_boolean() && b->get<bool>()) {
    return true;
  }
  return AnyStep(root, "normalizer", "normalizers", {"Prepend", "Replace"}) ||
         AnyStep(root, "pre_tokenizer", "pretokenizers", {"Metaspace"}) ||
         AnyStep(root, "decoder", "decoders", {"Metaspace", "ByteFallback"});
}

Status ParseSentencePieceStyle(const Json& root, const Json& m, std::string_view source,
                               TokenizerJson* t) {
  model::TokenizerSpec& spec = t->spec;
  SentencePieceOptions& sp = t->sp;
  spec.model = "llama";
  spec.pre.clear();
  if (AnyStep(root, "pre_tokenizer", "pretokenizers", {"ByteLevel"})) {
    return UnimplementedError(source,
                              ": model.byte_fallback or \"\xE2\x96\x81\" steps together with a "
                              "ByteLevel pre-tokenizer are not supported");
  }

  // Normalizer: Prepend("▁") and Replace(" " -> "▁"), in either order.
  bool prepend = false;
  bool replace = false;
  if (const auto n = root.find("normalizer"); n != root.end()) {
    LOOM_RETURN_IF_ERROR(ForEachStep(
        *n, "normalizers", source, "normalizer",
        [&](const std::string& type, const Json& step) -> Status {
          if (type == "Prepend") {
            LOOM_ASSIGN_OR_RETURN(const std::string text,
                                  OptString(step, "prepend", source, "normalizer.Prepend."));
            if (text != kMetaspace) {
              return UnimplementedError(source, ": normalizer Prepend '", text,
                                        "' is not supported (only \"\xE2\x96\x81\")");
            }
            prepend = true;
            return OkStatus();
          }
          if (type == "Replace") {
            LOOM_ASSIGN_OR_RETURN(const std::string pattern,
                                  ReplacePattern(step, source, "normalizer"));
            LOOM_ASSIGN_OR_RETURN(const std::string content,
                                  OptString(step, "content", source, "normalizer.Replace."));
            if (pattern != " " || content != kMetaspace) {
              return UnimplementedError(source, ": normalizer Replace '", pattern, "' -> '",
                                        content, "' is not supported (only spaces -> \"",
                                        kMetaspace, "\")");
            }
            replace = true;
            return OkStatus();
          }
          return UnimplementedError(source, ": normalizer '", type,
                                    "' is not supported in a SentencePiece-style tokenizer.json "
                                    "(Prepend and Replace are)");
        }));
  }

  // Pre-tokenizer: none, or Metaspace.
  bool metaspace = false;
  PrependScheme scheme = PrependScheme::kAlways;
  if (const auto p = root.find("pre_tokenizer"); p != root.end()) {
    LOOM_RETURN_IF_ERROR(
        ForEachStep(*p, "pretokenizers", source, "pre_tokenizer",
                    [&](const std::string& type, const Json& step) -> Status {
                      if (type != "Metaspace") {
                        return UnimplementedError(source, ": pre_tokenizer '", type,
                                                  "' is not supported in a SentencePiece-style "
                                                  "tokenizer.json (Metaspace is)");
                      }
                      LOOM_RETURN_IF_ERROR(CheckReplacement(step, source, "pre_tokenizer"));
                      LOOM_ASSIGN_OR_RETURN(scheme, MetaspaceScheme(step, source, "pre_tokenizer"));
                      LOOM_ASSIGN_OR_RETURN(sp.split_words,
                                            OptBool(step, "split", source, "pre_tokenizer.", true));
                      metaspace = true;
                      return OkStatus();
                    }));
  }
  if (!replace && !metaspace) {
    return UnimplementedError(source,
                              ": byte_fallback BPE without a Replace normalizer or a Metaspace "
                              "pre-tokenizer (spaces would never become \"\xE2\x96\x81\") is not "
                              "supported");
  }
  if (prepend) {
    sp.prepend = PrependScheme::kAlways;
  } else if (metaspace) {
    sp.prepend = scheme;
    sp.prepend_unless_space = true;
  } else {
    sp.prepend = PrependScheme::kNever;
  }
  spec.add_space_prefix = sp.prepend != PrependScheme::kNever;

  // Decoder: what undoes the above.
  if (const auto d = root.find("decoder"); d != root.end()) {
    LOOM_RETURN_IF_ERROR(ForEachStep(
        *d, "decoders", source, "decoder",
        [&](const std::string& type, const Json& step) -> Status {
          if (type == "ByteFallback" || type == "Fuse") return OkStatus();
          if (type == "Replace") {
            LOOM_ASSIGN_OR_RETURN(const std::string pattern,
                                  ReplacePattern(step, source, "decoder"));
            LOOM_ASSIGN_OR_RETURN(const std::string content,
                                  OptString(step, "content", source, "decoder.Replace."));
            if (pattern != kMetaspace || content != " ") {
              return UnimplementedError(source, ": decoder Replace '", pattern, "' -> '", content,
                                        "' is not supported");
            }
            return OkStatus();
          }
          if (type == "Strip") {
            LOOM_ASSIGN_OR_RETURN(const std::string content,
                                  OptString(step, "content", source, "decoder.Strip.", " "));
            const int64_t start = step.value("start", int64_t{0});
            const int64_t stop = step.value("stop", int64_t{0});
            if (content != " " || start > 1 || start < 0 || stop != 0) {
              return UnimplementedError(source, ": decoder Strip of '", content, "' (start ", start,
                                        ", stop ", stop,
                                        ") is not supported (only one leading space)");
            }
            sp.strip_space_at_start = start == 1;
            return OkStatus();
          }
          if (type == "Metaspace") {
            LOOM_RETURN_IF_ERROR(CheckReplacement(step, source, "decoder"));
            LOOM_ASSIGN_OR_RETURN(const PrependScheme s, MetaspaceScheme(step, source, "decoder"));
            sp.strip_space_at_start = s != PrependScheme::kNever;
            return OkStatus();
          }
          return UnimplementedError(source, ": decoder '", type,
                                    "' is not supported in a SentencePiece-style tokenizer.json");
        }));
  }

  // Piece kinds: byte pieces, the unknown token.
  LOOM_ASSIGN_OR_RETURN(const bool byte_fallback,
                        OptBool(m, "byte_fallback", source, "model.", false));
  const size_t n = spec.tokens.size();
  for (size_t i = 0; i < n; ++i) {
    uint8_t byte = 0;
    if (spec.token_types[i] == 1 && byte_fallback && ParseBytePiece(spec.tokens[i], &byte)) {
      spec.token_types[i] = 6;
    }
  }
  if (spec.unk_id >= 0) spec.token_types[static_cast<size_t>(spec.unk_id)] = 2;

  // Scores for the GGUF view: a piece ranks as the first merge that makes it (higher is earlier);
  // pieces no merge makes rank after all of them.  Encoding from this spec uses the merges.
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (spec.token_types[i] == 1 || spec.token_types[i] == 4) {
      ids.emplace(spec.tokens[i], static_cast<int32_t>(i));
    }
  }
  const float unmade = -static_cast<float>(spec.merges.size()) - 1.0f;
  spec.scores.assign(n, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    if (spec.token_types[i] == 1 && spec.tokens[i].size() > 1) spec.scores[i] = unmade;
  }
  std::vector<bool> made(n, false);
  std::string joined;
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    joined = spec.merges[r];
    const size_t space = joined.find(' ');
    if (space == std::string::npos) continue;  // SentencePieceTokenizer::Create reports it
    joined.erase(space, 1);
    const auto it = ids.find(joined);
    if (it == ids.end()) continue;
    const size_t id = static_cast<size_t>(it->second);
    if (made[id]) continue;
    made[id] = true;
    spec.scores[id] = -static_cast<float>(r);
  }
  return OkStatus();
}

}  // namespace loom::text::json_internal
