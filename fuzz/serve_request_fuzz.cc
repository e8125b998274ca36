// Fuzzes what `loom serve` parses from clients, the way its server reads it: request bytes through
// net's RequestReader (the parser of net::HttpServer, with small limits so that the limit paths
// are reached), then each complete request's path and body through what the routes do with them
// (percent-decoding, the JSON object, the OpenAI request validators).  Input layout: byte 0
// selects the entry (even: raw HTTP bytes, odd: a JSON body alone); the rest is the bytes.
// (net_request_fuzz drives the reader alone, with bytes arriving in pieces.)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "loom/net/request_reader.h"
#include "loom/net/url.h"
#include "loom/serve/openai_request.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant failed: %s\n", what);
    std::abort();
  }
}

void CheckBody(std::string_view bytes) {
  nlohmann::json body;
  if (loom::serve::ParseJsonObject(bytes, &body)) return;
  loom::serve::ChatParams chat;
  if (auto e = loom::serve::ParseChatRequest(body, &chat)) {
    Check(e->status == 400 && !e->message.empty(), "chat error shape");
  }
  loom::serve::CompletionParams completion;
  if (auto e = loom::serve::ParseCompletionRequest(body, &completion)) {
    Check(e->status == 400 && !e->message.empty(), "completion error shape");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 1) {
    CheckBody(bytes);
    return 0;
  }
  using loom::net::internal::RequestReader;
  constexpr int64_t kMaxBody = 1000;
  RequestReader reader({/*max_header_bytes=*/512, kMaxBody});
  std::string pending(bytes);
  for (int requests = 0; requests < 64; ++requests) {
    RequestReader::State state;
    do {
      pending.erase(0, reader.Feed(pending));
      state = reader.state();
    } while (state == RequestReader::State::kHeader);
    if (state == RequestReader::State::kError) {
      Check(reader.error_status() >= 400 && reader.error_status() < 500, "error status");
      Check(!reader.error_message().empty(), "error message");
      return 0;
    }
    if (state != RequestReader::State::kComplete) return 0;  // the rest is an incomplete request
    const loom::net::Request r = reader.TakeRequest("1.2.3.4:5", 0);
    Check(!r.path.empty() && r.path[0] == '/', "path starts with /");
    Check(static_cast<int64_t>(r.body.size()) <= kMaxBody, "body within the limit");
    (void)loom::net::PercentDecode(r.path);
    CheckBody(r.body);
    reader.Reset();
  }
  return 0;
}
