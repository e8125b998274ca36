#include "loom/text/detokenizer.h"

namespace loom::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

bool Llama2cWouldPrint(std::string_view piece) {
  if (piece.empty()) return false;
  if (piece.size() > 1) return true;
  const uint8_t b = static_cast<uint8_t>(piece[0]);
  // isprint() and isspace() in the "C" locale, spelled out so no locale can change them.
  const bool printable = b >= 0x20 && b <= 0x7E;
  const bool space = b == ' ' || (b >= 0x09 && b <= 0x0D);
  return printable || space;
}

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, DetokenizerOptions options)
    : tokenizer_(tokenizer), options_(options) {
  out_.reserve(256);
}

void StreamingDetokenizer::EmitReplacement() {
  out_.append(kReplacement);
  pending_len_ = 0;
  need_ = 0;
  lower_ = 0x80;
  upper_ = 0xBF;
}

void StreamingDetokenizer::Feed(uint8_t b) {
  if (need_ > 0) {
    if (b >= lower_ && b <= upper_) {
      pending_[pending_len_++] = static_cast<char>(b);
      lower_ = 0x80;
      upper_ = 0xBF;
      if (--need_ == 0) {
        out_.append(pending_, static_cast<size_t>(pending_len_));
        pending_len_ = 0;
      }
      return;
    }
    // The held bytes can no longer become a character: they are one maximal invalid subpart.
    // `b` itself starts afresh.
    EmitReplacement();
  }
  if (b < 0x80) {
    out_.push_back(static_cast<char>(b));
    return;
  }
  // Lead bytes and the range their first continuation byte must lie in (Unicode table 3-7):
  // this rejects overlong forms, surrogates and code points above U+10FFFF as early as possible.
  if (b >= 0xC2 && b <= 0xDF) {
    need_ = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need_ = 2;
    if (b == 0xE0) lower_ = 0xA0;
    if (b == 0xED) upper_ = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need_ = 3;
    if (b == 0xF0) lower_ = 0x90;
    if (b == 0xF4) upper_ = 0x8F;
  } else {
    out_.append(kReplacement);  // stray continuation byte, C0, C1 or F5..FF
    return;
  }
  pending_[0] = static_cast<char>(b);
  pending_len_ = 1;
}

std::string_view StreamingDetokenizer::Push(int32_t id) {
  out_.clear();
  const std::string_view piece = tokenizer_.DecodePiece(prev_id_, id);
  prev_id_ = id;
  if (options_.llama2c_safe_printf && !Llama2cWouldPrint(piece)) return out_;
  for (char c : piece) Feed(static_cast<uint8_t>(c));
  return out_;
}

std::string_view StreamingDetokenizer::Finish() {
  out_.clear();
  if (need_ > 0) EmitReplacement();
  prev_id_ = -1;
  return out_;
}

void StreamingDetokenizer::Reset() {
  out_.clear();
  pending_len_ = 0;
  need_ = 0;
  lower_ = 0x80;
  upper_ = 0xBF;
  prev_id_ = -1;
}

std::string DetokenizeAll(const Tokenizer& tokenizer, std::span<const int32_t> ids,
                          DetokenizerOptions options) {
  StreamingDetokenizer detok(tokenizer, options);
  std::string text;
  for (int32_t id : ids) text.append(detok.Push(id));
  text.append(detok.Finish());
  return text;
}

}  // namespace loom::text
