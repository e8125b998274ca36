// Reader for llama2.c tokenizer.bin files (karpathy/llama2.c tokenizer.py export):
//   int32 max_token_length
//   then per token: float32 score, int32 length, `length` bytes of piece text (no terminator)
// The number of tokens is not stored: the model's vocab_size tells; without a model the file is
// read to its end.  Pieces spell spaces as real spaces, BOS/EOS as "\n<s>\n" / "\n</s>\n" and raw
// bytes as "<0xXX>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/model/model_file.h"

namespace loom::text {

inline constexpr int64_t kLlama2cMaxTokenLength = int64_t{1} << 20;  // bytes; sanity bound

// Parses tokenizer.bin bytes into a TokenizerSpec (model "llama", unk 0, bos 1, eos 2,
// stop_at_bos, add_space_prefix; ids 1 and 2 and every "\n<s>\n" / "\n</s>\n" / "<s>" / "</s>"
// piece typed control, "<0xXX>" pieces typed byte).  `vocab_size` > 0 requires exactly that many
// tokens and nothing after them; 0 reads tokens until the end.  Every length is checked against
// max_token_length and the remaining bytes; errors name `source` and the token.
StatusOr<model::TokenizerSpec> ParseLlama2cTokenizer(std::span<const std::byte> bytes,
                                                     int64_t vocab_size, std::string_view source);

// Maps `path` and parses it as above.
StatusOr<model::TokenizerSpec> ReadLlama2cTokenizer(const std::string& path, int64_t vocab_size);

}  // namespace loom::text
