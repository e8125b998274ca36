// Fuzzes the server's request parsing path (RequestReader, with small limits so that the limit
// paths are reached) the way a session drives it: bytes arrive in pieces, each Feed sees what was
// not consumed before, complete requests are taken and the reader reset for the next one.
// Input layout: byte 0 sets the piece size (1..256); the rest is the bytes.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "loom/net/request_reader.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant failed: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using loom::net::internal::RequestReader;
  const size_t piece = static_cast<size_t>(data[0]) + 1;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr int64_t kMaxHeader = 512;
  constexpr int64_t kMaxBody = 1000;
  RequestReader reader({kMaxHeader, kMaxBody});
  std::string pending;
  size_t offset = 0;
  int requests = 0;
  while (offset < bytes.size() || !pending.empty()) {
    const size_t n = std::min(piece, bytes.size() - offset);
    pending.append(bytes.substr(offset, n));
    offset += n;
    bool progressed = n > 0;
    for (;;) {
      const size_t before = pending.size();
      const size_t used = reader.Feed(pending);
      Check(used <= before, "consumed within the input");
      pending.erase(0, used);
      progressed = progressed || used > 0;
      const RequestReader::State state = reader.state();
      if (state == RequestReader::State::kError) {
        const int status = reader.error_status();
        Check(status == 400 || status == 413 || status == 431, "error status");
        Check(!reader.error_message().empty(), "error message");
        return 0;
      }
      if (state == RequestReader::State::kHeader) {
        (void)reader.keep_alive();
        (void)reader.expects_continue();
        (void)reader.websocket_upgrade();
        continue;
      }
      if (state == RequestReader::State::kComplete) {
        const loom::net::Request r = reader.TakeRequest("1.2.3.4:5", 0);
        Check(!r.path.empty() && r.path[0] == '/', "path starts with /");
        Check(r.target.size() == r.path.size() + (r.query.empty() ? 0 : r.query.size() + 1) ||
                  r.target == r.path + "?",
              "target is path?query");
        Check(static_cast<int64_t>(r.body.size()) <= kMaxBody, "body within the limit");
        Check(r.version == 10 || r.version == 11, "HTTP/1.x");
        for (const auto& [name, value] : r.headers) {
          for (char c : name) Check(!(c >= 'A' && c <= 'Z'), "header names lower-cased");
        }
        reader.Reset();
        ++requests;
        progressed = true;
        continue;
      }
      break;  // kNeedMore
    }
    Check(static_cast<int64_t>(pending.size()) <= kMaxHeader + 256 + kMaxBody,
          "unconsumed bytes stay bounded");
    if (offset >= bytes.size() && !progressed) break;  // the rest is an incomplete request
  }
  return 0;
}
