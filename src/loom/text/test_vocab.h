// Test-only helpers for the text layer: synthetic vocabularies, random strings, and a reference
// encoder that transcribes llama2.c run.c's O(n^2) merge loop directly.
#pragma once

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loom/model/model_file.h"
#include "loom/text/sentencepiece.h"

namespace loom::text::testing {

inline std::string ToMetaspace(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == ' ') {
      out += "\xE2\x96\x81";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// <unk> <s> </s>, the 256 byte pieces at ids 3..258 (as llama2.c and Llama vocabularies), then
// `pieces` (written with real spaces; converted to "▁" when `metaspace`).
inline model::TokenizerSpec MakeSpec(const std::vector<std::pair<std::string, float>>& pieces,
                                     bool metaspace) {
  model::TokenizerSpec spec;
  spec.model = "llama";
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.tokens = {"<unk>", metaspace ? "<s>" : "\n<s>\n", metaspace ? "</s>" : "\n</s>\n"};
  spec.scores = {0, 0, 0};
  spec.token_types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    spec.tokens.emplace_back(buf);
    spec.scores.push_back(0);
    spec.token_types.push_back(6);
  }
  for (const auto& [piece, score] : pieces) {
    spec.tokens.push_back(metaspace ? ToMetaspace(piece) : piece);
    spec.scores.push_back(score);
    spec.token_types.push_back(1);
  }
  return spec;
}

// A random vocabulary over a small alphabet (ASCII, a space, 2- and 3-byte characters) whose
// pieces are concatenations of earlier pieces, with scores from {0, -1, -2} so ties are common.
inline model::TokenizerSpec RandomSpec(std::mt19937_64& rng, int n_pieces, bool metaspace) {
  const std::vector<std::string> alphabet = {" ", "a", "b", "c", "d", "\xC3\xA9", "\xE4\xB8\xAD"};
  std::vector<std::string> pieces(alphabet.begin(), alphabet.end());
  std::set<std::string> seen(pieces.begin(), pieces.end());
  std::uniform_int_distribution<size_t> pick;
  while (static_cast<int>(pieces.size()) < n_pieces) {
    std::string p = pieces[pick(rng) % pieces.size()] + pieces[pick(rng) % pieces.size()];
    if (p.size() > 12 || !seen.insert(p).second) continue;
    pieces.push_back(p);
  }
  std::vector<std::pair<std::string, float>> scored;
  for (const std::string& p : pieces) {
    scored.emplace_back(p, -static_cast<float>(pick(rng) % 3));
  }
  return MakeSpec(scored, metaspace);
}

// Random text from fragments that exercise merging, spaces, newlines, multi-byte characters,
// byte fallback (emoji, CJK) and invalid UTF-8.
inline std::string RandomText(std::mt19937_64& rng, int max_fragments, bool with_metaspace) {
  static const std::vector<std::string> kFragments = {
      " ",   "  ",  "a",  "b",   "c",  "d",  "ab", "abc",  "cd",   "\xC3\xA9", "\xE4\xB8\xAD",
      "\n",  "\t",  "x",  "1",   "Z",  "da", "ba", "\x80", "\xE4", "\xFF",     "\xF0\x9F\x98\x80",
      "the", "  a", "bb", "cab", "dd", "é é"};
  std::uniform_int_distribution<int> len(0, max_fragments);
  std::uniform_int_distribution<size_t> pick(0, kFragments.size() - (with_metaspace ? 0 : 1));
  std::string text;
  const int n = len(rng);
  for (int i = 0; i < n; ++i) {
    const size_t k = pick(rng);
    text += k == kFragments.size() ? std::string("\xE2\x96\x81") : kFragments[k];
  }
  return text;
}

// run.c's encode(), transcribed: characters (a byte and up to 3 following continuation bytes) as
// pieces or byte pieces, then repeatedly merge the adjacent pair whose concatenated piece text
// has the strictly highest score, scanning left to right.  Uses the tokenizer only for its
// vocabulary lookups.
inline std::vector<int32_t> ReferenceEncode(const SentencePieceTokenizer& t, std::string_view text,
                                            bool add_bos) {
  std::vector<int32_t> ids;
  auto add = [&](std::string_view ch) {
    const int32_t id = t.Lookup(t.SpellSpaces(ch));
    if (id >= 0) {
      ids.push_back(id);
    } else {
      for (char c : ch) ids.push_back(t.ByteId(static_cast<uint8_t>(c)));
    }
  };
  if (!text.empty() && t.add_space_prefix()) add(" ");  // run.c: a dummy-prefix token
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    while (i + len < text.size() && len < 4 &&
           (static_cast<uint8_t>(text[i + len]) & 0xC0) == 0x80) {
      ++len;
    }
    add(text.substr(i, len));
    i += len;
  }
  for (;;) {
    float best_score = 0;
    int32_t best_id = -1;
    size_t best_idx = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const std::string merged =
          std::string(t.PieceText(ids[i])) + std::string(t.PieceText(ids[i + 1]));
      const int32_t id = t.Lookup(merged);
      if (id >= 0 && (best_id < 0 || t.score(id) > best_score)) {
        best_score = t.score(id);
        best_id = id;
        best_idx = i;
      }
    }
    if (best_id < 0) break;
    ids[best_idx] = best_id;
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best_idx) + 1);
  }
  if (add_bos) ids.insert(ids.begin(), t.bos_id());
  return ids;
}

}  // namespace loom::text::testing
