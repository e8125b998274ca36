// tiktoken rank files (Kimi K2's tiktoken.model, OpenAI's *.tiktoken): one token per line, its
// bytes in base64 and its rank in decimal ("IQ== 0").  The rank is both the token id and the merge
// priority: tiktoken splits text with the model's regex, takes a piece whole when it is a token,
// and otherwise merges adjacent parts, lowest rank of the joined bytes first (ties: leftmost).
//
// Loom runs such a vocabulary on its byte-level BPE: tokens spelled in GPT-2's byte alphabet, and
// one merge for every split of a token into two tokens, each with the rank of the token it makes
// (BpeOptions::merge_ranks), so that every pair tiktoken would join is joined in the same order.
//
// A Kimi K2 directory: tiktoken.model (163,584 ranks) and tokenizer_config.json, whose
// added_tokens_decoder names the 256 special tokens after the ranks (ids 163584..163839; unnamed
// ones are "<|reserved_token_ID|>", as tokenization_kimi.py names them), with the bos/eos texts and
// the chat template; config.json / generation_config.json add eos ids.  The pre-tokenizer is
// Kimi's Han-aware pat_str (kKimiK2Regex).  Specials are control tokens (tiktoken's
// allowed_special="all" with parse_special; none without it, as tokenization_kimi.py's
// encode(allow_special_tokens=False)), and no BOS is added unless tokenizer_config.json says
// add_bos_token.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/base/status.h"
#include "loom/model/model_file.h"
#include "loom/text/tokenizer_json.h"

namespace loom::text {

// Kimi's tokenization_kimi.py reserves this many special ids after the ranks.
inline constexpr int32_t kTiktokenReservedSpecials = 256;

// The token bytes by rank (index = rank) of a rank file's text.  Ranks must be 0..n-1, each once;
// tokens non-empty and distinct; lines "BASE64 RANK" (trailing "\r" allowed, empty lines skipped).
// Errors name `source`, the line number and the offending text.
StatusOr<std::vector<std::string>> ParseTiktokenRanks(std::string_view text,
                                                      std::string_view source);

// Whether `bytes` start like a rank file: a base64 word, one space, decimal digits, end of line.
bool LooksLikeTiktoken(std::span<const std::byte> bytes);

// The merges that make a ranked vocabulary tiktoken-exact on byte-level BPE: for each token, in
// id order, every split into two tokens ("left right", the vocabulary's own spelling), and in
// `ranks` the id of the token each one makes.  `tokens[i]` is token i's spelling and `normal[i]`
// whether it takes part (special and unused tokens do not).
void RankMerges(const std::vector<std::string>& tokens, const std::vector<bool>& normal,
                std::vector<std::string>* merges, std::vector<int32_t>* ranks);

// The byte-level BPE vocabulary of `ranks` (token bytes by rank) and the special ids after them,
// `named` ones (id, text) with their text and the others "<|reserved_token_ID|>"; spec.pre
// "kimi-k2", no BOS.  Errors (a named id outside the special range) name `source`.
StatusOr<TokenizerJson> TiktokenVocabulary(
    std::vector<std::string> ranks, const std::vector<std::pair<int32_t, std::string>>& named,
    std::string_view source);

// The tokenizer of a tiktoken.model (`path`, a file or a directory holding tiktoken.model) and the
// config files beside it, as a TokenizerJson for TokenizerFromJson (spec.pre = "kimi-k2").
StatusOr<TokenizerJson> LoadTiktokenDirectory(const std::string& path);

}  // namespace loom::text
