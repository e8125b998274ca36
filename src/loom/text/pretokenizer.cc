#include "loom/text/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <utility>

#include "loom/text/utf8.h"

namespace loom::text {
namespace {

std::string PcreErrorText(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return "PCRE2 error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* p) const { pcre2_match_data_free(p); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* p) const { pcre2_match_context_free(p); }
};

// Calls `fn` on each maximal valid UTF-8 run of `text` (valid = true) and each invalid byte
// (valid = false), in order.
template <class Fn>
Status ForEachRun(std::string_view text, Fn&& fn) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t valid = ValidUtf8Prefix(text.substr(pos));
    if (valid > 0) {
      LOOM_RETURN_IF_ERROR(fn(text.substr(pos, valid), true));
      pos += valid;
      continue;
    }
    LOOM_RETURN_IF_ERROR(fn(text.substr(pos, 1), false));
    ++pos;
  }
  return OkStatus();
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

StatusOr<Regex> Regex::Compile(std::string_view pattern, std::string_view source) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    return InvalidArgumentError(source, ": pre-tokenizer regex does not compile at offset ", offset,
                                ": ", PcreErrorText(error), " (pattern '", pattern, "')");
  }
  Regex r;
  r.code_ = std::make_unique<Code>();
  r.code_->code = code;
  r.pattern_ = std::string(pattern);
  // JIT when this PCRE2 was built with it; the interpreter otherwise (same results).
  r.jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return r;
}

Status Regex::Split(std::string_view text, std::vector<std::string_view>* out) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(code_->code, nullptr));
  if (md == nullptr) return ResourceExhaustedError("pre-tokenizer: out of memory for match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t start = 0;
  size_t last_end = 0;
  std::unique_ptr<pcre2_match_context, MatchContextDeleter> interp_ctx;
  while (start <= n) {
    int rc = pcre2_match(code_->code, subject, n, start, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT's default stack is small; the interpreter keeps its backtracking frames on the
      // heap (bounded by PCRE2's heap limit), so retry there.
      rc = pcre2_match(code_->code, subject, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(),
                       nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return ResourceExhaustedError("pre-tokenizer: regex match failed at byte ", start, " of a ",
                                    n, "-byte piece: ", PcreErrorText(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t ms = ov[0];
    const size_t me = ov[1];
    if (ms > me || me > n) return InternalError("pre-tokenizer: PCRE2 returned a bad match range");
    if (me == ms) {
      // An empty match: step over one character and look again.
      if (ms >= n) break;
      const size_t len = Utf8CharLength(text, ms);
      start = ms + (len == 0 ? 1 : len);
      continue;
    }
    if (ms > last_end) out->push_back(text.substr(last_end, ms - last_end));
    out->push_back(text.substr(ms, me - ms));
    last_end = me;
    start = me;
  }
  if (last_end < n) out->push_back(text.substr(last_end));
  return OkStatus();
}

Status AppendNfc(std::string_view text, std::string* out) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err) || nfc == nullptr) {
    return InternalError("NFC normalizer unavailable: ", u_errorName(err));
  }
  return ForEachRun(text, [&](std::string_view run, bool valid) -> Status {
    if (!valid) {
      out->append(run);
      return OkStatus();
    }
    const icu::StringPiece piece(run.data(), static_cast<int32_t>(run.size()));
    UErrorCode e = U_ZERO_ERROR;
    if (nfc->isNormalizedUTF8(piece, e) && U_SUCCESS(e)) {
      out->append(run);
      return OkStatus();
    }
    e = U_ZERO_ERROR;
    icu::StringByteSink<std::string> sink(out);
    nfc->normalizeUTF8(0, piece, sink, nullptr, e);
    if (U_FAILURE(e)) return InvalidArgumentError("NFC normalization failed: ", u_errorName(e));
    return OkStatus();
  });
}

StatusOr<PreTokenizer> PreTokenizer::Create(const PreTokenizerConfig& config,
                                            std::string_view source) {
  PreTokenizer p;
  p.config_ = config;
  p.source_ = std::string(source);
  for (const std::string& pattern : config.split_regexes) {
    LOOM_ASSIGN_OR_RETURN(Regex r, Regex::Compile(pattern, source));
    p.regexes_.push_back(std::move(r));
  }
  if (config.byte_level_regex) {
    LOOM_ASSIGN_OR_RETURN(Regex r, Regex::Compile(kGpt2Regex, source));
    p.regexes_.push_back(std::move(r));
  }
  return p;
}

Status PreTokenizer::Run(std::string_view text, std::string* buffer,
                         std::vector<std::string_view>* words) const {
  buffer->clear();
  words->clear();
  if (config_.add_prefix_space && !text.empty() && text[0] != ' ') buffer->push_back(' ');
  if (config_.nfc) {
    LOOM_RETURN_IF_ERROR(AppendNfc(text, buffer));
  } else {
    buffer->append(text);
  }
  // Valid runs go through every regex in turn; invalid bytes are words of their own.
  std::vector<std::string_view> current;
  std::vector<std::string_view> next;
  return ForEachRun(*buffer, [&](std::string_view run, bool valid) -> Status {
    if (!valid || regexes_.empty()) {
      words->push_back(run);
      return OkStatus();
    }
    current.assign(1, run);
    for (const Regex& regex : regexes_) {
      next.clear();
      for (std::string_view piece : current) {
        Status s = regex.Split(piece, &next);
        if (!s.ok()) return s.WithContext(source_);
      }
      current.swap(next);
    }
    words->insert(words->end(), current.begin(), current.end());
    return OkStatus();
  });
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_cp_.fill(-1);
  char32_t shifted = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const char32_t cp = printable ? static_cast<char32_t>(b) : shifted++;
    AppendUtf8(cp, &chars_[static_cast<size_t>(b)]);
    byte_of_cp_[cp] = static_cast<int16_t>(b);
  }
}

void ByteLevelAlphabet::Encode(std::string_view text, std::string* out) const {
  for (char c : text) out->append(chars_[static_cast<uint8_t>(c)]);
}

bool ByteLevelAlphabet::Decode(std::string_view piece, std::string* out) const {
  const size_t mark = out->size();
  for (size_t pos = 0; pos < piece.size();) {
    const size_t len = Utf8CharLength(piece, pos);
    const char32_t cp = len == 0 ? 0xFFFFFFFF : DecodeUtf8Char(piece, pos, len);
    if (len == 0 || cp >= byte_of_cp_.size() || byte_of_cp_[cp] < 0) {
      out->resize(mark);
      return false;
    }
    out->push_back(static_cast<char>(byte_of_cp_[cp]));
    pos += len;
  }
  return true;
}

}  // namespace loom::text
