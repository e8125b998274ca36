// Test-only helpers for byte-level BPE: small synthetic vocabularies (as a TokenizerSpec and as
// tokenizer.json text) and a reference encoder that applies merges by rescanning, the textbook
// O(n^2) way, to compare the priority-queue encoder against.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loom/model/model_file.h"
#include "loom/text/pretokenizer.h"

namespace loom::text::testing {

inline std::string Spell(std::string_view raw) {
  static const ByteLevelAlphabet alphabet;
  std::string out;
  alphabet.Encode(raw, &out);
  return out;
}

struct AddedToken {
  std::string content;
  bool special = true;
};

// Ids 0..255: the byte characters in byte order; then one token per merge (given in raw bytes, in
// rank order) unless already present; then `extra` whole words (in the vocabulary, made by no
// merge); then the added tokens.
inline model::TokenizerSpec MakeBpeSpec(
    const std::vector<std::pair<std::string, std::string>>& merges,
    const std::vector<std::string>& extra = {}, const std::vector<AddedToken>& added = {},
    std::string pre = "llama-bpe") {
  model::TokenizerSpec spec;
  spec.model = "gpt2";
  spec.pre = std::move(pre);
  spec.add_bos = false;
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(Spell(std::string(1, static_cast<char>(b))));
    seen.insert(spec.tokens.back());
  }
  for (const auto& [a, b] : merges) {
    spec.merges.push_back(Spell(a) + " " + Spell(b));
    if (seen.insert(Spell(a + b)).second) spec.tokens.push_back(Spell(a + b));
  }
  for (const std::string& word : extra) {
    if (seen.insert(Spell(word)).second) spec.tokens.push_back(Spell(word));
  }
  spec.token_types.assign(spec.tokens.size(), 1);
  for (const AddedToken& t : added) {
    spec.tokens.push_back(t.content);
    spec.token_types.push_back(t.special ? 3 : 4);
  }
  return spec;
}

// The same vocabulary as a tokenizer.json (Llama 3 style pre-tokenizer), with merges written as
// pairs or as "a b" strings.
inline std::string MakeTokenizerJson(const model::TokenizerSpec& spec, bool pair_merges,
                                     const std::string& regex = std::string(kLlama3Regex)) {
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::array();
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const int type = spec.token_types.empty() ? 1 : spec.token_types[i];
    if (type == 3 || type == 4) {
      added.push_back({{"id", i},
                       {"content", spec.tokens[i]},
                       {"special", type == 3},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"single_word", false}});
    } else {
      vocab[spec.tokens[i]] = i;
    }
  }
  nlohmann::json merges = nlohmann::json::array();
  for (const std::string& m : spec.merges) {
    const size_t space = m.find(' ');
    if (pair_merges) {
      merges.push_back({m.substr(0, space), m.substr(space + 1)});
    } else {
      merges.push_back(m);
    }
  }
  nlohmann::json j = {{"version", "1.0"},
                      {"truncation", nullptr},
                      {"padding", nullptr},
                      {"added_tokens", added},
                      {"normalizer", nullptr},
                      {"pre_tokenizer",
                       {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", regex}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", false}}}}}},
                      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}}},
                      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}}},
                      {"model",
                       {{"type", "BPE"},
                        {"dropout", nullptr},
                        {"unk_token", nullptr},
                        {"continuing_subword_prefix", nullptr},
                        {"end_of_word_suffix", nullptr},
                        {"fuse_unk", false},
                        {"byte_fallback", false},
                        {"ignore_merges", false},
                        {"vocab", vocab},
                        {"merges", merges}}}};
  return j.dump();
}

// BPE of one word (raw bytes) by rescanning: repeatedly merge the adjacent pair with the lowest
// rank, leftmost first.  `merges` in raw bytes, rank order; `ids` maps spelled pieces to ids.
inline std::vector<std::string> ReferenceBpe(
    const std::string& word, const std::vector<std::pair<std::string, std::string>>& merges) {
  std::vector<std::string> parts;
  for (char c : word) parts.emplace_back(1, c);
  for (;;) {
    size_t best_rank = std::numeric_limits<size_t>::max();
    size_t best_pos = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      for (size_t r = 0; r < merges.size() && r < best_rank; ++r) {
        if (merges[r].first == parts[i] && merges[r].second == parts[i + 1]) {
          best_rank = r;
          best_pos = i;
          break;
        }
      }
    }
    if (best_rank == std::numeric_limits<size_t>::max()) return parts;
    parts[best_pos] += parts[best_pos + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best_pos) + 1);
  }
}

}  // namespace loom::text::testing
