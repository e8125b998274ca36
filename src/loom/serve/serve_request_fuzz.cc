// Fuzzes what `loom serve` parses from clients: the HTTP request head (with small limits, so that
// the limit paths are reached), and the JSON body through the OpenAI request validators.  Input
// layout: byte 0 selects the target (even: HTTP head, odd: JSON body); the rest is the bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "loom/serve/http_message.h"
#include "loom/serve/openai_request.h"

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
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    loom::serve::HttpLimits limits;
    limits.max_head_bytes = 512;
    limits.max_headers = 8;
    limits.max_body_bytes = 1000;
    loom::serve::HttpRequest req;
    const loom::serve::HeadParse r = loom::serve::ParseRequestHead(bytes, limits, &req);
    if (r.kind == loom::serve::HeadParse::kComplete) {
      Check(r.head_bytes <= bytes.size(), "head within the buffer");
      Check(!req.path.empty() && req.path[0] == '/', "path starts with /");
      Check(req.content_length >= 0 && req.content_length <= limits.max_body_bytes,
            "content length within the limit");
      Check(static_cast<int64_t>(req.headers.size()) <= limits.max_headers, "header count");
      (void)loom::serve::PercentDecode(req.path);
    } else if (r.kind == loom::serve::HeadParse::kError) {
      Check(r.status >= 400 && r.status < 600, "error status");
      Check(!r.message.empty(), "error message");
    }
    return 0;
  }
  nlohmann::json body;
  if (loom::serve::ParseJsonObject(bytes, &body)) return 0;
  loom::serve::ChatParams chat;
  if (auto e = loom::serve::ParseChatRequest(body, &chat)) {
    Check(e->status == 400 && !e->message.empty(), "chat error shape");
  }
  loom::serve::CompletionParams completion;
  if (auto e = loom::serve::ParseCompletionRequest(body, &completion)) {
    Check(e->status == 400 && !e->message.empty(), "completion error shape");
  }
  return 0;
}
