#include "loom/text/bpe.h"

#include <algorithm>
#include <iterator>
#include <queue>
#include <utility>

namespace loom::text {
namespace {

// Token texts that end a turn or a document; as control tokens of a vocabulary they end
// generation even when the model's metadata names only one EOS (llama.cpp does the same).
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|eom_id|>", "<|im_end|>",    "<|endoftext|>", "<|end_of_text|>",
    "</s>",       "<|end|>",    "<end_of_turn>", "<|return|>",    "<｜end▁of▁sentence｜>"};

StatusOr<PieceKind> KindFromType(int32_t type, int64_t id, std::string_view source) {
  switch (type) {
    case 0:
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
      return PieceKind::kNormal;  // byte pieces are ordinary one-character pieces here
    default:
      return InvalidArgumentError(source, ": bpe: token ", id, " has unknown type ", type,
                                  " (expected 0..6)");
  }
}

// A symbol of the word being merged: a doubly linked list over a vector.
struct Symbol {
  int32_t id = -1;
  int32_t prev = -1;
  int32_t next = -1;
  bool alive = true;
};

// A queued merge of symbols[left] and symbols[right]; stale once either has changed.
struct Candidate {
  int32_t rank = 0;
  int32_t left = 0;  // symbol index; symbols are in text order, so this is the position
  int32_t right = 0;
  int32_t left_id = 0;
  int32_t right_id = 0;
  int32_t merged_id = 0;
};

// Lowest rank first; equal ranks (the same pair twice): leftmost first.
struct CandidateAfter {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.left > b.left;
  }
};

size_t TableSize(size_t n) {
  size_t size = 16;
  while (size < n * 2) size <<= 1;
  return size;
}

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

void BpeTokenizer::PieceTable::Reserve(size_t n) {
  slots_.assign(TableSize(n), {std::string_view(), -1});
  mask_ = slots_.size() - 1;
}

void BpeTokenizer::PieceTable::Insert(std::string_view piece, int32_t id) {
  for (size_t i = std::hash<std::string_view>{}(piece)&mask_;; i = (i + 1) & mask_) {
    if (slots_[i].second < 0) {
      slots_[i] = {piece, id};
      return;
    }
    if (slots_[i].first == piece) return;
  }
}

int32_t BpeTokenizer::PieceTable::Find(std::string_view piece) const {
  if (slots_.empty()) return -1;
  for (size_t i = std::hash<std::string_view>{}(piece)&mask_;; i = (i + 1) & mask_) {
    if (slots_[i].second < 0) return -1;
    if (slots_[i].first == piece) return slots_[i].second;
  }
}

void BpeTokenizer::MergeTable::Reserve(size_t n) {
  slots_.assign(TableSize(n), {0, Merge{}});
  mask_ = slots_.size() - 1;
}

void BpeTokenizer::MergeTable::Insert(uint64_t key, Merge merge) {
  for (size_t i = Mix(key) & mask_;; i = (i + 1) & mask_) {
    if (slots_[i].second.id < 0) {
      slots_[i] = {key, merge};
      ++size_;
      return;
    }
    if (slots_[i].first == key) return;
  }
}

const BpeTokenizer::Merge* BpeTokenizer::MergeTable::Find(uint64_t key) const {
  if (slots_.empty()) return nullptr;
  for (size_t i = Mix(key) & mask_;; i = (i + 1) & mask_) {
    if (slots_[i].second.id < 0) return nullptr;
    if (slots_[i].first == key) return &slots_[i].second;
  }
}

StatusOr<BpeOptions> BpeOptionsForPre(std::string_view pre, std::string_view source) {
  BpeOptions o;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "smaug-bpe" ||
      pre == "falcon3") {
    o.pre.split_regexes = {std::string(kLlama3Regex)};
    o.ignore_merges = true;
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    o.pre.split_regexes = {std::string(kQwen2Regex)};
    o.pre.nfc = true;  // Qwen's tokenizer.json normalizes to NFC
  } else if (pre == "gpt-2" || pre == "gpt2") {
    o.pre.split_regexes = {std::string(kGpt2Regex)};
  } else if (pre == "deepseek-v3") {
    o.pre.split_regexes.assign(std::begin(kDeepSeekV3Regexes), std::end(kDeepSeekV3Regexes));
  } else if (pre == "kimi-k2") {
    o.pre.split_regexes = {std::string(kKimiK2Regex)};
    // tiktoken takes a piece that is itself a token whole (llama.cpp leaves this out; with a
    // vocabulary converted from ranks, merging reaches the same token in practice).
    o.ignore_merges = true;
  } else if (pre == "tekken") {
    o.pre.split_regexes = {std::string(kTekkenRegex)};
    o.ignore_merges = true;
  } else if (pre.empty() || pre == "default") {
    // llama.cpp's fallback for GGUF files without a pre-tokenizer name.
    o.pre.split_regexes = {
        R"([\p{P}\$\+<=>\^~\|]+)",
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))", R"(\p{N}+)",
        "[0-9][0-9][0-9]"};
  } else {
    return UnimplementedError(source, ": byte-level BPE pre-tokenizer '", pre,
                              "' is not supported (known: llama-bpe, llama3, qwen2, gpt-2, tekken, "
                              "smaug-bpe, deepseek-r1-qwen, deepseek-v3, kimi-k2, default)");
  }
  return o;
}

StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(model::TokenizerSpec spec,
                                                             const BpeOptions& options,
                                                             std::string_view source) {
  const int64_t n = static_cast<int64_t>(spec.tokens.size());
  if (spec.model != "gpt2") {
    return InvalidArgumentError(source, ": bpe: tokenizer model is '", spec.model,
                                "', expected 'gpt2'");
  }
  if (n == 0) return InvalidArgumentError(source, ": bpe: the vocabulary is empty");
  if (n >= INT32_MAX) {
    return InvalidArgumentError(source, ": bpe: ", n, " tokens exceed the int32 ids");
  }
  if (!spec.token_types.empty() && static_cast<int64_t>(spec.token_types.size()) != n) {
    return InvalidArgumentError(source, ": bpe: ", spec.token_types.size(), " token types for ", n,
                                " tokens");
  }
  if (static_cast<int64_t>(spec.merges.size()) >= INT32_MAX) {
    return InvalidArgumentError(source, ": bpe: too many merges (", spec.merges.size(), ")");
  }
  if (!options.merge_ranks.empty() && options.merge_ranks.size() != spec.merges.size()) {
    return InvalidArgumentError(source, ": bpe: ", options.merge_ranks.size(), " merge ranks for ",
                                spec.merges.size(), " merges");
  }
  const std::pair<const char*, int32_t> special_ids[] = {
      {"bos", spec.bos_id}, {"eos", spec.eos_id}, {"unk", spec.unk_id}, {"pad", spec.pad_id}};
  for (const auto& [name, id] : special_ids) {
    if (id < -1 || id >= n) {
      return InvalidArgumentError(source, ": bpe: ", name, " id ", id,
                                  " is outside the vocabulary of ", n, " tokens");
    }
  }
  for (const std::vector<int32_t>* list :
       {&options.lstrip_ids, &options.rstrip_ids, &options.eog_ids}) {
    for (int32_t id : *list) {
      if (id < 0 || id >= n) {
        return InvalidArgumentError(source, ": bpe: token id ", id,
                                    " is outside the vocabulary of ", n, " tokens");
      }
    }
  }

  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->source_ = std::string(source);
  t->pre_name_ = spec.pre;
  t->pieces_ = std::move(spec.tokens);
  t->bos_id_ = spec.bos_id;
  t->eos_id_ = spec.eos_id;
  t->unk_id_ = spec.unk_id;
  t->add_bos_ = spec.add_bos && spec.bos_id >= 0;
  t->ignore_merges_ = options.ignore_merges;
  t->chat_template_ = spec.chat_template;
  if (options.has_chat_tokens) {
    t->chat_bos_token_ = options.chat_bos_token;
    t->chat_eos_token_ = options.chat_eos_token;
  } else {
    if (spec.bos_id >= 0) t->chat_bos_token_ = t->pieces_[static_cast<size_t>(spec.bos_id)];
    if (spec.eos_id >= 0) t->chat_eos_token_ = t->pieces_[static_cast<size_t>(spec.eos_id)];
  }
  LOOM_ASSIGN_OR_RETURN(t->pre_, PreTokenizer::Create(options.pre, source));
  t->regex_jit_ = t->pre_.jit();

  t->kinds_.assign(static_cast<size_t>(n), PieceKind::kNormal);
  if (!spec.token_types.empty()) {
    for (int64_t i = 0; i < n; ++i) {
      LOOM_ASSIGN_OR_RETURN(t->kinds_[static_cast<size_t>(i)],
                            KindFromType(spec.token_types[static_cast<size_t>(i)], i, source));
    }
  } else {
    for (int32_t id : {spec.bos_id, spec.eos_id, spec.pad_id}) {
      if (id >= 0) t->kinds_[static_cast<size_t>(id)] = PieceKind::kControl;
    }
  }

  std::unordered_set<int32_t> lstrip(options.lstrip_ids.begin(), options.lstrip_ids.end());
  std::unordered_set<int32_t> rstrip(options.rstrip_ids.begin(), options.rstrip_ids.end());
  t->decoded_.resize(static_cast<size_t>(n));
  t->lookup_.Reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    const int32_t id = static_cast<int32_t>(i);
    const std::string& piece = t->pieces_[u];
    switch (t->kinds_[u]) {
      case PieceKind::kNormal:
      case PieceKind::kByte:
      case PieceKind::kUnknown:
        // Pieces outside the byte alphabet (rare, hand-added) decode as their own text.
        if (!t->alphabet_.Decode(piece, &t->decoded_[u])) t->decoded_[u] = piece;
        if (t->kinds_[u] != PieceKind::kUnknown && !piece.empty()) {
          t->lookup_.Insert(piece, id);  // the first of duplicates wins
        }
        break;
      case PieceKind::kUserDefined:
        t->decoded_[u] = piece;
        if (!piece.empty()) {
          t->specials_.Add(piece, {.id = id,
                                   .control = false,
                                   .lstrip = lstrip.count(id) > 0,
                                   .rstrip = rstrip.count(id) > 0});
        }
        break;
      case PieceKind::kControl:
        if (!piece.empty()) {
          t->specials_.Add(piece, {.id = id,
                                   .control = true,
                                   .lstrip = lstrip.count(id) > 0,
                                   .rstrip = rstrip.count(id) > 0});
        }
        if (std::find(std::begin(kEndOfTurnTexts), std::end(kEndOfTurnTexts), piece) !=
            std::end(kEndOfTurnTexts)) {
          t->eog_.insert(id);
        }
        break;
      case PieceKind::kUnused:
        break;
    }
  }
  for (int b = 0; b < 256; ++b) {
    t->byte_ids_[static_cast<size_t>(b)] =
        t->lookup_.Find(t->alphabet_.Char(static_cast<uint8_t>(b)));
  }
  if (spec.eos_id >= 0) t->eog_.insert(spec.eos_id);
  t->eog_.insert(options.eog_ids.begin(), options.eog_ids.end());

  t->merges_.Reserve(spec.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const std::string_view merge = spec.merges[rank];
    const size_t space = merge.find(' ');
    if (space == std::string_view::npos || merge.find(' ', space + 1) != std::string_view::npos) {
      return InvalidArgumentError(source, ": bpe: merge ", rank, " '", merge,
                                  "' is not two tokens separated by one space");
    }
    const std::string_view left = merge.substr(0, space);
    const std::string_view right = merge.substr(space + 1);
    const int32_t a = t->lookup_.Find(left);
    const int32_t b = t->lookup_.Find(right);
    if (a < 0 || b < 0) {
      return InvalidArgumentError(source, ": bpe: merge ", rank, " '", merge,
                                  "' refers to a token not in the vocabulary ('",
                                  a < 0 ? left : right, "')");
    }
    joined.assign(left).append(right);
    const int32_t m = t->lookup_.Find(joined);
    if (m < 0) {
      return InvalidArgumentError(source, ": bpe: merge ", rank, " '", merge, "' makes '", joined,
                                  "', which is not in the vocabulary");
    }
    const int32_t priority =
        options.merge_ranks.empty() ? static_cast<int32_t>(rank) : options.merge_ranks[rank];
    t->merges_.Insert(PairKey(a, b), Merge{.rank = priority, .id = m});
  }
  return t;
}

Status BpeTokenizer::EncodeWord(std::string_view raw, std::vector<int32_t>* ids) const {
  if (raw.empty()) return OkStatus();
  if (ignore_merges_) {
    std::string spelled;
    spelled.reserve(raw.size() * 2);
    alphabet_.Encode(raw, &spelled);
    const int32_t whole = lookup_.Find(spelled);
    if (whole >= 0) {
      ids->push_back(whole);
      return OkStatus();
    }
  }
  if (raw.size() >= static_cast<size_t>(INT32_MAX)) {
    return InvalidArgumentError(source_, ": encode: a ", raw.size(), "-byte word is too long");
  }
  const int32_t count = static_cast<int32_t>(raw.size());
  std::vector<Symbol> symbols(raw.size());
  for (int32_t i = 0; i < count; ++i) {
    const uint8_t byte = static_cast<uint8_t>(raw[static_cast<size_t>(i)]);
    int32_t id = byte_ids_[byte];
    if (id < 0) id = unk_id_;
    if (id < 0) {
      return InvalidArgumentError(source_, ": encode: byte 0x", std::hex, static_cast<int>(byte),
                                  std::dec, " has no token and there is no unknown token");
    }
    symbols[static_cast<size_t>(i)] = {.id = id, .prev = i - 1, .next = i + 1 < count ? i + 1 : -1};
  }

  std::priority_queue<Candidate, std::vector<Candidate>, CandidateAfter> queue;
  auto try_queue = [&](int32_t left) {
    if (left < 0) return;
    const Symbol& a = symbols[static_cast<size_t>(left)];
    if (a.next < 0) return;
    const Symbol& b = symbols[static_cast<size_t>(a.next)];
    const Merge* m = merges_.Find(PairKey(a.id, b.id));
    if (m == nullptr) return;
    queue.push({.rank = m->rank,
                .left = left,
                .right = a.next,
                .left_id = a.id,
                .right_id = b.id,
                .merged_id = m->id});
  };
  for (int32_t i = 0; i + 1 < count; ++i) try_queue(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& a = symbols[static_cast<size_t>(c.left)];
    if (!a.alive || a.id != c.left_id || a.next != c.right) continue;
    Symbol& b = symbols[static_cast<size_t>(c.right)];
    if (!b.alive || b.id != c.right_id) continue;
    a.id = c.merged_id;
    a.next = b.next;
    if (b.next >= 0) symbols[static_cast<size_t>(b.next)].prev = c.left;
    b.alive = false;
    try_queue(a.prev);
    try_queue(c.left);
  }
  for (int32_t s = 0; s >= 0; s = symbols[static_cast<size_t>(s)].next) {
    ids->push_back(symbols[static_cast<size_t>(s)].id);
  }
  return OkStatus();
}

Status BpeTokenizer::EncodeText(std::string_view text, std::vector<int32_t>* ids) const {
  std::string buffer;
  std::vector<std::string_view> words;
  LOOM_RETURN_IF_ERROR(pre_.Run(text, &buffer, &words));
  for (std::string_view word : words) LOOM_RETURN_IF_ERROR(EncodeWord(word, ids));
  return OkStatus();
}

StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text,
                                                    const EncodeOptions& options) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (options.add_bos && bos_id_ >= 0) ids.push_back(bos_id_);
  if (specials_.empty()) {
    LOOM_RETURN_IF_ERROR(EncodeText(text, &ids));
    return ids;
  }
  std::vector<SpecialTokenMatcher::Fragment> fragments;
  specials_.Split(text, options.parse_special, &fragments);
  for (const SpecialTokenMatcher::Fragment& f : fragments) {
    if (f.id >= 0) {
      ids.push_back(f.id);
    } else {
      LOOM_RETURN_IF_ERROR(EncodeText(f.text, &ids));
    }
  }
  return ids;
}

std::string_view BpeTokenizer::DecodePiece(int32_t prev_id, int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return decoded_[static_cast<size_t>(id)];
}

std::string_view BpeTokenizer::PieceText(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return pieces_[static_cast<size_t>(id)];
}

bool BpeTokenizer::IsControl(int32_t id) const {
  return id >= 0 && id < vocab_size() && kinds_[static_cast<size_t>(id)] == PieceKind::kControl;
}

bool BpeTokenizer::IsEog(int32_t id) const { return eog_.count(id) > 0; }

ChatTemplateInfo BpeTokenizer::chat_template() const {
  return {.source = chat_template_, .bos_token = chat_bos_token_, .eos_token = chat_eos_token_};
}

}  // namespace loom::text
