// The synthetic SentencePiece-style vocabulary.  Every multi-character piece is the concatenation
// of two earlier pieces, so BPE merging by score can reach it, and the 256 byte tokens let any text
// tokenize (bytes outside the pieces fall back to <0xNN>).
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "loom/model/synth.h"

namespace loom::model {

namespace {

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's word-start mark

constexpr const char* kLower = "etaoinshrdlcumwfgypbvkjxqz";  // by English letter frequency
constexpr const char* kUpper = "TSAIHWMBOLCDFPRNEGYJKUVQXZ";
constexpr const char* kOther = "0123456789.,!?'\"-:;()";

// Frequent English words and letter groups, most useful first ('_' stands for the word-start mark).
constexpr const char* kGroups[] = {
    "_t",     "_a",      "_s",     "_w",     "_h",     "_b",    "_o",      "_c",    "_m",
    "_f",     "_d",      "_l",     "_p",     "_i",     "_g",    "_n",      "_r",    "_e",
    "_T",     "_S",      "_I",     "_A",     "_H",     "_W",    "_M",      "_B",    "_O",
    "_L",     "he",      "in",     "er",     "an",     "re",    "on",      "at",    "en",
    "nd",     "ti",      "es",     "or",     "te",     "of",    "ed",      "is",    "it",
    "al",     "ar",      "st",     "to",     "nt",     "ng",    "se",      "ha",    "as",
    "ou",     "io",      "le",     "ve",     "co",     "me",    "de",      "hi",    "ri",
    "ro",     "ic",      "ne",     "ea",     "ra",     "ce",    "li",      "ch",    "ll",
    "be",     "ma",      "si",     "om",     "ur",     "ay",    "ly",      "ow",    "ck",
    "ot",     "ut",      "id",     "im",     "il",     "ig",    "ee",      "oo",    "_the",
    "ing",    "_and",    "_to",    "_of",    "_in",    "_was",  "_he",     "_she",  "_it",
    "_is",    "_on",     "_with",  "_had",   "_her",   "_his",  "_for",    "_they", "_The",
    "_day",   "_one",    "_up",    "_so",    "_said",  "_play", "_time",   "_Once", "_upon",
    "_there", "_little", "_girl",  "_boy",   "_big",   "_saw",  "_friend", "_very", "_went",
    "_named", "_you",    "_that",  "_not",   "_but",   "_all",  "_we",     "_are",  "_be",
    "_have",  "_this",   "_from",  "_at",    "_by",    "_can",  "_do",     "_what", "_go",
    "_like",  "_want",   "_Lily",  "_Tim",   "_happy", "_mom",  "_dog",    "_cat",  "_sun",
    "_tree",  "ion",     "ent",    "ter",    "ers",    "est",   "ive",     "ous",   "ould",
    "ight",   "ake",     "ook",    "ome",    "ame",    "ound",  "ly",      "ed",    "_were",
    "_said",  "_could",  "_would", "_about", "_out",   "_them",
};

class Builder {
 public:
  explicit Builder(size_t limit) : limit_(limit) {}

  bool full() const { return pieces_.size() >= limit_; }
  bool Has(const std::string& s) const { return set_.count(s) != 0; }
  void Add(const std::string& s) {
    if (!full() && !s.empty() && set_.insert(s).second) pieces_.push_back(s);
  }
  // Adds `word` and every shorter prefix of it longer than one character (each is an earlier
  // prefix plus one character, so merging can build it).
  void AddWithPrefixes(const std::string& word) {
    std::vector<size_t> cuts;  // character boundaries (UTF-8)
    for (size_t i = 1; i <= word.size(); ++i) {
      if (i == word.size() || (static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) {
        cuts.push_back(i);
      }
    }
    for (size_t c = 1; c < cuts.size(); ++c) Add(word.substr(0, cuts[c]));
  }
  std::vector<std::string> Take() { return std::move(pieces_); }
  const std::vector<std::string>& pieces() const { return pieces_; }

 private:
  size_t limit_;
  std::vector<std::string> pieces_;
  std::set<std::string> set_;
};

std::string Expand(const char* group) {
  std::string s;
  for (const char* p = group; *p != '\0'; ++p) {
    if (*p == '_') {
      s += kSpace;
    } else {
      s.push_back(*p);
    }
  }
  return s;
}

}  // namespace

StatusOr<TokenizerSpec> SynthVocab(int64_t vocab_size) {
  constexpr int64_t kFirstPiece = 3 + 256;
  if (vocab_size < kFirstPiece || vocab_size > (int64_t{1} << 20)) {
    return InvalidArgumentError("synth vocab: size ", vocab_size, " (expected ", kFirstPiece,
                                " to ", int64_t{1} << 20, ")");
  }
  TokenizerSpec t;
  t.model = "llama";
  t.unk_id = 0;
  t.bos_id = 1;
  t.eos_id = 2;
  t.pad_id = -1;
  t.add_bos = true;
  t.add_eos = false;
  t.add_space_prefix = true;
  t.tokens = {"<unk>", "<s>", "</s>"};
  t.token_types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    t.tokens.push_back(buf);
    t.token_types.push_back(6);
  }

  Builder pieces(static_cast<size_t>(vocab_size - kFirstPiece));
  pieces.Add(kSpace);
  for (const char* set : {kLower, kUpper, kOther}) {
    for (const char* c = set; *c != '\0'; ++c) pieces.Add(std::string(1, *c));
  }
  for (const char* g : kGroups) pieces.AddWithPrefixes(Expand(g));
  // Fill the rest breadth-first: each piece so far extended by one letter, shortest pieces first.
  for (size_t begin = 0; !pieces.full();) {
    const size_t end = pieces.pieces().size();
    if (end == begin) return InternalError("synth vocab: ran out of pieces at ", end);
    for (size_t i = begin; i < end && !pieces.full(); ++i) {
      const std::string base = pieces.pieces()[i];
      if (base.size() > 24) continue;
      for (const char* c = kLower; *c != '\0' && !pieces.full(); ++c) pieces.Add(base + *c);
    }
    begin = end;
  }
  for (std::string& p : pieces.Take()) {
    t.tokens.push_back(std::move(p));
    t.token_types.push_back(1);
  }
  t.scores.assign(t.tokens.size(), 0.0f);
  for (size_t i = kFirstPiece; i < t.tokens.size(); ++i) {
    t.scores[i] = -static_cast<float>(i - kFirstPiece);
  }
  return t;
}

}  // namespace loom::model
