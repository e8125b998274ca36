// Fuzzes the comm wire parsers: message headers and the three handshake messages.  The first byte
// picks the parser; the rest is the message.  Accepted messages must re-encode to the same bytes.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "loom/comm/wire.h"

using namespace loom::comm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const uint8_t> in(data + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      MessageHeader h;
      if (DecodeHeader(in, &h).ok()) {
        std::array<uint8_t, kHeaderBytes> out{};
        EncodeHeader(h, out);
        if (std::memcmp(out.data(), in.data(), kHeaderBytes) != 0) __builtin_trap();
      }
      break;
    }
    case 1: {
      ServerHello m;
      if (DecodeServerHello(in, &m).ok()) {
        std::array<uint8_t, kServerHelloBytes> out{};
        EncodeServerHello(m, out);
        if (std::memcmp(out.data(), in.data(), out.size()) != 0) __builtin_trap();
      }
      break;
    }
    case 2: {
      ClientHello m;
      if (DecodeClientHello(in, &m).ok()) {
        std::array<uint8_t, kClientHelloBytes> out{};
        EncodeClientHello(m, out);
        if (std::memcmp(out.data(), in.data(), out.size()) != 0) __builtin_trap();
      }
      break;
    }
    case 3: {
      HelloReply m;
      if (DecodeHelloReply(in, &m).ok()) {
        std::array<uint8_t, kHelloReplyBytes> out{};
        EncodeHelloReply(m, out);
        if (std::memcmp(out.data(), in.data(), out.size()) != 0) __builtin_trap();
      }
      break;
    }
  }
  return 0;
}
