#include "loom/text/sentencepiece.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <utility>

namespace loom::text {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";      // "▁" U+2581
constexpr std::string_view kUnknownText = " \xE2\x81\x87 ";  // " ⁇ ", as SentencePiece decodes it

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool IsContinuationByte(char c) { return (static_cast<uint8_t>(c) & 0xC0) == 0x80; }

StatusOr<PieceKind> KindFromGgufType(int32_t type, int64_t id, std::string_view source) {
  switch (type) {
    case 0:  // undefined: treated as normal, as llama.cpp does
    case 1:
      return PieceKind::kNormal;
    case 2:
      return PieceKind::kUnknown;
    case 3:
      return PieceKind::kControl;
    case 4:
      return PieceKind::kUserDefined;
    case 5:
      return PieceKind::kUnused;
    case 6:
      return PieceKind::kByte;
    default:
      return InvalidArgumentError(source, ": sentencepiece: token ", id, " has unknown type ", type,
                                  " (expected 0..6)");
  }
}

// Replaces every "▁" with " ".
std::string MetaspaceToSpaces(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  size_t i = 0;
  while (i < piece.size()) {
    if (piece.substr(i, kMetaspace.size()) == kMetaspace) {
      out.push_back(' ');
      i += kMetaspace.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

// A run of the input text during merging: a doubly linked list over a vector.
struct Symbol {
  int64_t start = 0;  // byte offset in `spelled` (see Encode)
  int64_t len = 0;    // bytes; 0 once merged into its left neighbour
  int64_t prev = -1;  // index in the symbol vector, -1 at the ends
  int64_t next = -1;
  int32_t id = -1;
  bool mergeable = false;  // byte-fallback and unknown symbols never merge
};

// A candidate merge of symbols[left] and the symbol after it; stale once either has changed
// (merging only ever grows the left symbol or empties the right one, so comparing lengths tells).
struct Candidate {
  double score = 0;  // the merged piece's score, or minus the merge's rank
  int32_t id = -1;
  int64_t left = 0;        // symbol index; symbols are in text order, so this orders positions
  int64_t merged_len = 0;  // left.len + right.len when queued
};

// Highest score first; equal scores: leftmost first.
struct CandidateLess {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  }
};

}  // namespace

bool ParseBytePiece(std::string_view piece, uint8_t* byte) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return false;
  const int hi = HexValue(piece[3]);
  const int lo = HexValue(piece[4]);
  if (hi < 0 || lo < 0) return false;
  *byte = static_cast<uint8_t>(hi * 16 + lo);
  return true;
}

StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Create(
    const model::TokenizerSpec& spec, std::string_view source,
    const SentencePieceOptions& options) {
  const int64_t n = static_cast<int64_t>(spec.tokens.size());
  if (spec.model != "llama") {
    return InvalidArgumentError(source, ": sentencepiece: tokenizer model is '", spec.model,
                                "', expected 'llama'");
  }
  if (n == 0) return InvalidArgumentError(source, ": sentencepiece: the vocabulary is empty");
  if (n > INT32_MAX) {
    return InvalidArgumentError(source, ": sentencepiece: ", n, " tokens exceed the int32 ids");
  }
  if (!spec.scores.empty() && static_cast<int64_t>(spec.scores.size()) != n) {
    return InvalidArgumentError(source, ": sentencepiece: ", spec.scores.size(), " scores for ", n,
                                " tokens");
  }
  if (!spec.token_types.empty() && static_cast<int64_t>(spec.token_types.size()) != n) {
    return InvalidArgumentError(source, ": sentencepiece: ", spec.token_types.size(),
                                " token types for ", n, " tokens");
  }
  const std::pair<const char*, int32_t> ids[] = {
      {"bos", spec.bos_id}, {"eos", spec.eos_id}, {"unk", spec.unk_id}, {"pad", spec.pad_id}};
  for (const auto& [name, id] : ids) {
    if (id < -1 || id >= n) {
      return InvalidArgumentError(source, ": sentencepiece: ", name, " id ", id,
                                  " is outside the vocabulary of ", n, " tokens");
    }
  }

  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->source_ = std::string(source);
  t->pieces_ = spec.tokens;
  t->scores_ = spec.scores.empty() ? std::vector<float>(static_cast<size_t>(n), 0.0f) : spec.scores;
  t->bos_id_ = spec.bos_id;
  t->eos_id_ = spec.eos_id;
  t->unk_id_ = spec.unk_id;
  t->add_bos_ = spec.add_bos;
  t->stop_at_bos_ = spec.stop_at_bos;
  t->chat_template_ = spec.chat_template;
  t->has_chat_tokens_ = options.has_chat_tokens;
  t->chat_bos_token_ = options.chat_bos_token;
  t->chat_eos_token_ = options.chat_eos_token;
  t->prepend_ = spec.add_space_prefix ? options.prepend : PrependScheme::kNever;
  t->add_space_prefix_ = t->prepend_ != PrependScheme::kNever;
  t->prepend_unless_space_ = options.prepend_unless_space;
  t->split_words_ = options.split_words;
  t->strip_space_at_start_ = options.strip_space_at_start;
  for (int32_t id : options.eog_ids) {
    if (id < 0 || id >= n) {
      return InvalidArgumentError(source, ": sentencepiece: end-of-generation id ", id,
                                  " is outside the vocabulary of ", n, " tokens");
    }
    t->eog_ids_.push_back(id);
  }
  t->byte_ids_.fill(-1);
  t->kinds_.resize(static_cast<size_t>(n), PieceKind::kNormal);

  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    if (std::isnan(t->scores_[u])) {
      return InvalidArgumentError(source, ": sentencepiece: token ", i, " has a NaN score");
    }
    uint8_t byte = 0;
    if (!spec.token_types.empty()) {
      LOOM_ASSIGN_OR_RETURN(t->kinds_[u], KindFromGgufType(spec.token_types[u], i, source));
      if (t->kinds_[u] == PieceKind::kByte && !ParseBytePiece(t->pieces_[u], &byte)) {
        return InvalidArgumentError(source, ": sentencepiece: token ", i,
                                    " is typed as a byte but spelled '", t->pieces_[u],
                                    "' (expected <0xXX>)");
      }
    } else if (i == spec.bos_id || i == spec.eos_id || i == spec.pad_id) {
      t->kinds_[u] = PieceKind::kControl;
    } else if (i == spec.unk_id) {
      t->kinds_[u] = PieceKind::kUnknown;
    } else if (ParseBytePiece(t->pieces_[u], &byte)) {
      t->kinds_[u] = PieceKind::kByte;
    }
  }

  // Spelling of the space: whichever of "▁" and " " more normal pieces contain.
  int64_t with_metaspace = 0;
  int64_t with_space = 0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    if (t->kinds_[u] != PieceKind::kNormal) continue;
    if (t->pieces_[u].find(kMetaspace) != std::string::npos) ++with_metaspace;
    if (t->pieces_[u].find(' ') != std::string::npos) ++with_space;
  }
  t->metaspace_ = with_metaspace > with_space;

  t->decoded_.resize(static_cast<size_t>(n));
  t->lookup_.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    const std::string& piece = t->pieces_[u];
    uint8_t byte = 0;
    switch (t->kinds_[u]) {
      case PieceKind::kNormal:
        t->decoded_[u] = t->metaspace_ ? MetaspaceToSpaces(piece) : piece;
        break;
      case PieceKind::kUserDefined:
        t->decoded_[u] = piece;
        break;
      case PieceKind::kByte:
        ParseBytePiece(piece, &byte);  // checked above, or how the kind was found
        t->decoded_[u] = std::string(1, static_cast<char>(byte));
        if (t->byte_ids_[byte] < 0) t->byte_ids_[byte] = static_cast<int32_t>(i);
        t->has_byte_pieces_ = true;
        break;
      case PieceKind::kUnknown:
        t->decoded_[u] = std::string(kUnknownText);
        break;
      case PieceKind::kControl:
      case PieceKind::kUnused:
        break;
    }
    const PieceKind kind = t->kinds_[u];
    if ((kind == PieceKind::kControl || kind == PieceKind::kUnknown ||
         kind == PieceKind::kUserDefined) &&
        !piece.empty()) {
      const int32_t id = static_cast<int32_t>(i);
      auto listed = [id](const std::vector<int32_t>& ids) {
        return std::find(ids.begin(), ids.end(), id) != ids.end();
      };
      t->specials_.Add(piece, {.id = id,
                               .control = kind != PieceKind::kUserDefined,
                               .lstrip = listed(options.lstrip_ids),
                               .rstrip = listed(options.rstrip_ids)});
    }
    // Plain text can only produce normal and user-defined pieces; the first id of a duplicated
    // spelling wins.  Empty pieces would never match a character.
    if ((t->kinds_[u] == PieceKind::kNormal || t->kinds_[u] == PieceKind::kUserDefined) &&
        !piece.empty()) {
      t->lookup_.emplace(std::string_view(piece), static_cast<int32_t>(i));
    }
  }

  // A merge list (tokenizer.json): "left right", by rank.  Pieces never contain a real space in
  // the "▁" spelling, so the first space separates the two.
  t->merge_ranks_.reserve(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const std::string_view merge = spec.merges[r];
    const size_t space = merge.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == merge.size()) {
      return InvalidArgumentError(source, ": sentencepiece: merge ", r, " '", merge,
                                  "' is not two pieces separated by a space");
    }
    const std::string_view left = merge.substr(0, space);
    const std::string_view right = merge.substr(space + 1);
    const int32_t a = t->Lookup(left);
    const int32_t b = t->Lookup(right);
    const int32_t ab = t->Lookup(StrCat(left, right));
    if (a < 0 || b < 0 || ab < 0) {
      return InvalidArgumentError(source, ": sentencepiece: merge ", r, " '", merge,
                                  "' joins pieces that are not (both) in the vocabulary, or "
                                  "makes one that is not");
    }
    if (r > static_cast<size_t>(INT32_MAX)) {
      return InvalidArgumentError(source, ": sentencepiece: too many merges");
    }
    // The first (lowest rank) listing of a pair wins.
    t->merge_ranks_.emplace(PairKey(a, b), RankedMerge{static_cast<int32_t>(r), ab});
  }
  return t;
}

int32_t SentencePieceTokenizer::Lookup(std::string_view piece) const {
  const auto it = lookup_.find(piece);
  return it == lookup_.end() ? -1 : it->second;
}

std::string SentencePieceTokenizer::SpellSpaces(std::string_view text) const {
  if (!metaspace_) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (char c : text) {
    if (c == ' ') {
      out.append(kMetaspace);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool SentencePieceTokenizer::WantsPrefix(std::string_view run, size_t offset) const {
  switch (prepend_) {
    case PrependScheme::kNever:
      return false;
    case PrependScheme::kFirst:
      if (offset != 0) return false;
      break;
    case PrependScheme::kAlways:
      break;
  }
  return !(prepend_unless_space_ && !run.empty() && run[0] == ' ');
}

StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(std::string_view text,
                                                              const EncodeOptions& options) const {
  std::vector<int32_t> ids;
  if (options.add_bos && bos_id_ >= 0) ids.push_back(bos_id_);
  if (specials_.empty()) {
    LOOM_RETURN_IF_ERROR(EncodeText(text, WantsPrefix(text, 0), &ids));
    return ids;
  }
  std::vector<SpecialTokenMatcher::Fragment> fragments;
  specials_.Split(text, options.parse_special, &fragments);
  for (const SpecialTokenMatcher::Fragment& f : fragments) {
    if (f.id >= 0) {
      ids.push_back(f.id);
    } else {
      const size_t offset = static_cast<size_t>(f.text.data() - text.data());
      LOOM_RETURN_IF_ERROR(EncodeText(f.text, WantsPrefix(f.text, offset), &ids));
    }
  }
  return ids;
}

Status SentencePieceTokenizer::EncodeText(std::string_view text, bool prefix,
                                          std::vector<int32_t>* out) const {
  const int64_t n = static_cast<int64_t>(text.size());
  // `spelled` holds the text of every symbol back to back in the vocabulary's spelling, so that
  // the concatenation of two adjacent symbols is a substring of it.
  std::string spelled;
  spelled.reserve(static_cast<size_t>(n) + (metaspace_ ? static_cast<size_t>(n) * 2 + 3 : 1));
  std::vector<Symbol> symbols;
  symbols.reserve(static_cast<size_t>(n) + 1);

  // Appends `ch` (one character of the input, in real spaces) as its piece, else its bytes.
  auto add_character = [&](std::string_view ch, int64_t offset) -> Status {
    const int64_t start = static_cast<int64_t>(spelled.size());
    if (metaspace_ && ch.find(' ') != std::string_view::npos) {
      spelled.append(SpellSpaces(ch));
    } else {
      spelled.append(ch);
    }
    const int64_t len = static_cast<int64_t>(spelled.size()) - start;
    const int32_t id = Lookup(std::string_view(spelled).substr(static_cast<size_t>(start)));
    if (id >= 0) {
      symbols.push_back({.start = start, .len = len, .id = id, .mergeable = true});
      return OkStatus();
    }
    spelled.resize(static_cast<size_t>(start));
    if (has_byte_pieces_) {
      // Byte fallback of the input bytes (a space stays 0x20 whatever the spelling).
      for (size_t b = 0; b < ch.size(); ++b) {
        const uint8_t byte = static_cast<uint8_t>(ch[b]);
        const int32_t byte_id = byte_ids_[byte] >= 0 ? byte_ids_[byte] : unk_id_;
        if (byte_id < 0) {
          return InvalidArgumentError(source_, ": encode: byte 0x", std::hex,
                                      static_cast<int>(byte), std::dec, " at offset ",
                                      offset + static_cast<int64_t>(b),
                                      " has no <0xXX> piece and there is no unknown token");
        }
        symbols.push_back({.start = static_cast<int64_t>(spelled.size()), .len = 1, .id = byte_id});
        spelled.push_back(static_cast<char>(byte));
      }
      return OkStatus();
    }
    if (unk_id_ >= 0) {
      symbols.push_back({.start = start, .len = 1, .id = unk_id_});
      spelled.push_back('?');
      return OkStatus();
    }
    return InvalidArgumentError(source_, ": encode: the character at offset ", offset,
                                " is not in the vocabulary, which has neither byte pieces nor an "
                                "unknown token");
  };

  // 1. The dummy prefix is a symbol of its own, as in run.c (it never joins the first character
  //    into one).  Then one symbol per character, grouped as run.c groups bytes: a byte and the
  //    continuation bytes after it, at most 4 bytes in all (so stray continuation bytes form
  //    characters of their own, or join the byte before them).
  if (n > 0 && prefix) LOOM_RETURN_IF_ERROR(add_character(" ", -1));
  for (int64_t i = 0; i < n;) {
    int64_t len = 1;
    while (i + len < n && len < 4 && IsContinuationByte(text[static_cast<size_t>(i + len)])) ++len;
    LOOM_RETURN_IF_ERROR(
        add_character(text.substr(static_cast<size_t>(i), static_cast<size_t>(len)), i));
    i += len;
  }
  const int64_t count = static_cast<int64_t>(symbols.size());
  for (int64_t s = 0; s < count; ++s) {
    symbols[static_cast<size_t>(s)].prev = s - 1;
    symbols[static_cast<size_t>(s)].next = s + 1 < count ? s + 1 : -1;
  }

  // 2. Merge the best pair until none is left.  Stale queue entries (a side merged since) are
  //    skipped when popped, so every live adjacent pair is always in the queue exactly once.
  std::vector<Candidate> storage;
  storage.reserve(static_cast<size_t>(count));
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateLess> queue(CandidateLess{},
                                                                              std::move(storage));
  const std::string_view space = metaspace_ ? kMetaspace : std::string_view(" ");
  auto try_queue = [&](int64_t left) {
    if (left < 0) return;
    const Symbol& a = symbols[static_cast<size_t>(left)];
    if (a.next < 0) return;
    const Symbol& b = symbols[static_cast<size_t>(a.next)];
    if (!a.mergeable || !b.mergeable) return;
    // Split words: a symbol that starts with a space starts a word; nothing merges across.
    if (split_words_ &&
        std::string_view(spelled).substr(static_cast<size_t>(b.start), space.size()) == space) {
      return;
    }
    if (!merge_ranks_.empty()) {
      const auto it = merge_ranks_.find(PairKey(a.id, b.id));
      if (it == merge_ranks_.end()) return;
      queue.push({.score = -static_cast<double>(it->second.rank),
                  .id = it->second.id,
                  .left = left,
                  .merged_len = a.len + b.len});
      return;
    }
    const int32_t id = Lookup(std::string_view(spelled).substr(static_cast<size_t>(a.start),
                                                               static_cast<size_t>(a.len + b.len)));
    if (id < 0) return;
    queue.push({.score = scores_[static_cast<size_t>(id)],
                .id = id,
                .left = left,
                .merged_len = a.len + b.len});
  };
  for (int64_t s = 0; s + 1 < count; ++s) try_queue(s);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& a = symbols[static_cast<size_t>(c.left)];
    if (a.len == 0 || a.next < 0) continue;
    Symbol& b = symbols[static_cast<size_t>(a.next)];
    if (a.len + b.len != c.merged_len) continue;
    a.len += b.len;
    a.id = c.id;
    a.next = b.next;
    if (b.next >= 0) symbols[static_cast<size_t>(b.next)].prev = c.left;
    b.len = 0;
    try_queue(a.prev);
    try_queue(c.left);
  }

  out->reserve(out->size() + static_cast<size_t>(count));
  for (int64_t s = count > 0 ? 0 : -1; s >= 0; s = symbols[static_cast<size_t>(s)].next) {
    out->push_back(symbols[static_cast<size_t>(s)].id);
  }
  return OkStatus();
}

std::string_view SentencePieceTokenizer::DecodePiece(int32_t prev_id, int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  std::string_view piece = decoded_[static_cast<size_t>(id)];
  // SentencePiece drops the dummy prefix it added; llama2.c: "following BOS, strip the leading
  // whitespace".  Byte pieces (an explicit <0x20>) are kept.
  const bool at_start =
      (prev_id == bos_id_ && bos_id_ >= 0) || (strip_space_at_start_ && prev_id < 0);
  if (at_start && kinds_[static_cast<size_t>(id)] == PieceKind::kNormal && !piece.empty() &&
      piece[0] == ' ') {
    piece.remove_prefix(1);
  }
  return piece;
}

std::string_view SentencePieceTokenizer::PieceText(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return pieces_[static_cast<size_t>(id)];
}

bool SentencePieceTokenizer::IsControl(int32_t id) const {
  return id >= 0 && id < vocab_size() && kinds_[static_cast<size_t>(id)] == PieceKind::kControl;
}

ChatTemplateInfo SentencePieceTokenizer::chat_template() const {
  if (has_chat_tokens_) {
    return {.source = chat_template_, .bos_token = chat_bos_token_, .eos_token = chat_eos_token_};
  }
  return {
      .source = chat_template_, .bos_token = PieceText(bos_id_), .eos_token = PieceText(eos_id_)};
}

bool SentencePieceTokenizer::IsEog(int32_t id) const {
  if (id < 0) return false;
  if (id == eos_id_ || (stop_at_bos_ && id == bos_id_)) return true;
  return std::find(eog_ids_.begin(), eog_ids_.end(), id) != eog_ids_.end();
}

}  // namespace loom::text
