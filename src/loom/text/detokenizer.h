// UTF-8-safe streaming detokenizer: fed token ids one at a time (as they are sampled), it returns
// the text that is complete so far.  A character whose bytes arrive in several tokens (byte
// fallback: "<0xE4>" "<0xB8>" "<0xAD>") is held back until its last byte arrives; bytes proven
// not to form UTF-8 become U+FFFD (one per maximal invalid subpart, as the Unicode standard and
// WHATWG decoders do); Finish() flushes whatever is still held.  Output is always valid UTF-8.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "loom/text/tokenizer.h"

namespace loom::text {

struct DetokenizerOptions {
  // llama2.c output rule.  run.c prints every piece through safe_printf(), which skips a piece
  // that is exactly one byte and is neither printable nor whitespace in the C locale
  // (isprint/isspace): control characters vanish, and so does every lone byte >= 0x80, so a
  // multi-byte character generated as byte tokens prints nothing at all.  Reproducing run.c's
  // text (the golden files) needs this; leave it off for normal output, where byte-fallback
  // characters must come through.
  bool llama2c_safe_printf = false;
};

class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, DetokenizerOptions options = {});

  // Appends token `id` to the stream and returns the text it completes (possibly empty).  The
  // view is valid until the next call on this object.  No allocation once the internal buffer has
  // grown to the longest piece.
  std::string_view Push(int32_t id);

  // Ends the stream: an incomplete trailing character becomes U+FFFD.  Returns that text and
  // resets for a new stream (the next token is treated as the first).
  std::string_view Finish();

  // Drops held bytes and starts a new stream.
  void Reset();

  // The last token pushed, -1 at the start of a stream.
  int32_t prev_id() const { return prev_id_; }

 private:
  void Feed(uint8_t byte);
  void EmitReplacement();

  const Tokenizer& tokenizer_;
  DetokenizerOptions options_;
  int32_t prev_id_ = -1;
  std::string out_;  // text returned by the last call; reused
  // The character being assembled: its bytes so far, how many continuation bytes it still needs,
  // and the range allowed for the next one (narrower after E0, ED, F0, F4).
  char pending_[4] = {};
  int pending_len_ = 0;
  int need_ = 0;
  uint8_t lower_ = 0x80;
  uint8_t upper_ = 0xBF;
};

// Whether run.c's safe_printf() would print a piece (see DetokenizerOptions).
bool Llama2cWouldPrint(std::string_view piece);

// Decodes a whole sequence at once through a StreamingDetokenizer (Finish() included).
std::string DetokenizeAll(const Tokenizer& tokenizer, std::span<const int32_t> ids,
                          DetokenizerOptions options = {});

}  // namespace loom::text
