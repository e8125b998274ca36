// Helpers shared by the tokenizer.json readers (tokenizer_json.cc for the file and byte-level BPE,
// tokenizer_json_spm.cc for SentencePiece-style BPE).  Not for use outside the text layer.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/model/model_file.h"

namespace loom::text {
struct TokenizerJson;

namespace json_internal {

using Json = nlohmann::json;

StatusOr<Json> ParseJson(std::string_view text, std::string_view source);
// "<source>: <field> must be <expected>, not <type>".
Status TypeError(std::string_view source, std::string_view field, std::string_view expected,
                 const Json& value);
// The string at `field` of object `o`, or `fallback` when absent or null; `path` prefixes the
// field in errors ("normalizer.").
StatusOr<std::string> OptString(const Json& o, const char* field, std::string_view source,
                                std::string_view path, std::string fallback = {});
StatusOr<bool> OptBool(const Json& o, const char* field, std::string_view source,
                       std::string_view path, bool fallback);
// A token id: a non-negative integer below 16M.
StatusOr<int32_t> TokenId(const Json& v, std::string_view source, std::string_view field);
// The id of the token spelled `text` (the last one when spelled twice), or -1.
int32_t FindToken(const model::TokenizerSpec& spec, std::string_view text);

// Whether a tokenizer.json (its top level and its "model") is SentencePiece-style: byte_fallback,
// a Metaspace pre-tokenizer or decoder, or a Prepend/Replace normalizer.
bool IsSentencePieceStyle(const Json& root, const Json& model);

// Reads the normalizer, pre-tokenizer and decoder of a SentencePiece-style tokenizer.json into
// t->sp, and types the vocabulary (byte pieces, unknown) and derives scores from the merge ranks
// so that the spec is also a GGUF "llama" tokenizer.  t->spec has its tokens, token types (1
// vocabulary, 3 special added, 4 other added, 5 gaps), merges and unk_id already.
Status ParseSentencePieceStyle(const Json& root, const Json& model, std::string_view source,
                               TokenizerJson* t);

}  // namespace json_internal
}  // namespace loom::text
