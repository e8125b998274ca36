// Fuzzes the node<->hub frame parser (bytes from a WebSocket peer): any input either parses into a
// frame or fails with a Status, never a crash or an exception.  An accepted frame must serialize
// and parse back to an equal frame, and serializing that again must give the same text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "loom/network/protocol/frames.h"

using namespace loom::network::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  loom::StatusOr<Frame> frame = ParseFrame(text);
  if (!frame.ok()) {
    if (frame.status().message().empty()) __builtin_trap();  // every rejection says why
    return 0;
  }
  const std::string out = SerializeFrame(*frame);
  loom::StatusOr<Frame> again = ParseFrame(out);
  if (!again.ok() || !(*again == *frame)) __builtin_trap();
  if (SerializeFrame(*again) != out) __builtin_trap();
  if (FrameTypeName(*again) != FrameTypeName(*frame)) __builtin_trap();
  return 0;
}
