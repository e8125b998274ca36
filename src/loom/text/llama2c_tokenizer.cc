#include "loom/text/llama2c_tokenizer.h"

#include <cmath>
#include <cstring>

#include "loom/base/byte_reader.h"
#include "loom/base/mapped_file.h"
#include "loom/text/sentencepiece.h"

namespace loom::text {
namespace {

bool IsControlSpelling(std::string_view piece) {
  return piece == "\n<s>\n" || piece == "\n</s>\n" || piece == "<s>" || piece == "</s>";
}

// GGUF token type numbers (see model::TokenizerSpec::token_types).
constexpr int32_t kTypeNormal = 1;
constexpr int32_t kTypeUnknown = 2;
constexpr int32_t kTypeControl = 3;
constexpr int32_t kTypeByte = 6;

}  // namespace

StatusOr<model::TokenizerSpec> ParseLlama2cTokenizer(std::span<const std::byte> bytes,
                                                     int64_t vocab_size, std::string_view source) {
  base::ByteReader reader(bytes);
  int32_t max_token_length = 0;
  if (Status s = reader.Read(&max_token_length); !s.ok()) {
    return DataLossError(source, ": llama2.c tokenizer: file of ", bytes.size(),
                         " bytes is too short for its 4-byte header");
  }
  if (max_token_length < 1 || max_token_length > kLlama2cMaxTokenLength) {
    return DataLossError(source, ": llama2.c tokenizer: max_token_length ", max_token_length,
                         " is outside [1, ", kLlama2cMaxTokenLength, "]");
  }
  if (vocab_size < 0) {
    return InvalidArgumentError(source, ": llama2.c tokenizer: negative vocab size ", vocab_size);
  }
  // Each token takes at least 8 bytes, which bounds the count before anything is allocated.
  const int64_t max_tokens = reader.remaining() / 8;
  if (vocab_size > max_tokens) {
    return DataLossError(source, ": llama2.c tokenizer: the model expects ", vocab_size,
                         " tokens but the ", bytes.size(), "-byte file can hold at most ",
                         max_tokens);
  }

  model::TokenizerSpec spec;
  spec.model = "llama";
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.add_bos = true;
  spec.add_space_prefix = true;
  spec.stop_at_bos = true;
  const size_t reserve = static_cast<size_t>(vocab_size > 0 ? vocab_size : max_tokens);
  spec.tokens.reserve(reserve);
  spec.scores.reserve(reserve);

  for (int64_t i = 0; vocab_size > 0 ? i < vocab_size : reader.remaining() > 0; ++i) {
    float score = 0;
    int32_t length = 0;
    if (!reader.Read(&score).ok() || !reader.Read(&length).ok()) {
      return DataLossError(source, ": llama2.c tokenizer: truncated in the header of token ", i,
                           " at offset ", reader.offset(), " (", reader.remaining(),
                           " bytes left, need 8)");
    }
    if (std::isnan(score)) {
      return DataLossError(source, ": llama2.c tokenizer: token ", i, " has a NaN score");
    }
    if (length < 0 || length > max_token_length) {
      return DataLossError(source, ": llama2.c tokenizer: token ", i, " has length ", length,
                           ", outside [0, max_token_length ", max_token_length, "]");
    }
    std::string piece;
    if (!reader.ReadString(length, &piece).ok()) {
      return DataLossError(source, ": llama2.c tokenizer: token ", i, " needs ", length,
                           " bytes at offset ", reader.offset(), " but only ", reader.remaining(),
                           " remain (truncated file?)");
    }
    spec.tokens.push_back(std::move(piece));
    spec.scores.push_back(score);
  }
  if (reader.remaining() != 0) {
    return DataLossError(source, ": llama2.c tokenizer: ", reader.remaining(),
                         " bytes remain after the ", vocab_size,
                         " tokens the model expects (a tokenizer for another vocabulary?)");
  }
  const int64_t n = static_cast<int64_t>(spec.tokens.size());
  if (n < 3) {
    return DataLossError(source, ": llama2.c tokenizer: ", n,
                         " tokens; at least <unk>, <s> and </s> (ids 0..2) are required");
  }
  spec.token_types.resize(static_cast<size_t>(n), kTypeNormal);
  for (int64_t i = 0; i < n; ++i) {
    const std::string& p = spec.tokens[static_cast<size_t>(i)];
    int32_t& type = spec.token_types[static_cast<size_t>(i)];
    uint8_t byte = 0;
    if (i == 1 || i == 2 || IsControlSpelling(p)) {
      type = kTypeControl;
    } else if (i == 0) {
      type = kTypeUnknown;
    } else if (ParseBytePiece(p, &byte)) {
      type = kTypeByte;
    }
  }
  return spec;
}

StatusOr<model::TokenizerSpec> ReadLlama2cTokenizer(const std::string& path, int64_t vocab_size) {
  LOOM_ASSIGN_OR_RETURN(base::MappedFile file, base::MappedFile::Open(path));
  return ParseLlama2cTokenizer(file.bytes(), vocab_size, path);
}

}  // namespace loom::text
