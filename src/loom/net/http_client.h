// HTTP/1.1 client requests (http or https): streaming on the caller's io_context, or one-shot and
// blocking for command-line tools.  Each request uses a connection of its own ("Connection:
// close").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "loom/base/status.h"
#include "loom/net/url.h"

namespace boost::asio::ssl {
class context;
}

namespace loom::net {

class ClientCall {
 public:
  virtual ~ClientCall() = default;
  // Aborts the request; on_done then gets kCancelled (later, on the loop thread; never inside
  // Cancel), unless it already ran.  Safe to call from the request's own callbacks.
  virtual void Cancel() = 0;
};

struct ClientRequest {
  std::string method = "GET";
  Url url;  // http:// or https://
  std::vector<std::pair<std::string, std::string>> headers;  // Host, Content-Length and
                                                             // Connection are set by the client
  std::string body;
  double timeout_s = 30;       // from the start to the response head (resolve, connect, TLS,
                               // write, head)
  double idle_timeout_s = 0;   // after the head: longest wait for more body, 0 = none
};

// Starts a request on `io`: on_head(status, headers) once (names lower-cased), on_data(piece) for
// each piece of the body as it arrives (chunked, Content-Length or until close), on_done(Status)
// exactly once at the end: OK after the whole body, otherwise an error naming the stage
// (resolve, connect, tls handshake, write request, read response head, read response body),
// kDeadlineExceeded for a timeout, kCancelled after Cancel().  Callbacks run on io's thread,
// never inside this call, and are released after on_done.  `tls` is required for https.  The
// call keeps itself alive while it runs; the returned pointer is only needed to Cancel().
std::shared_ptr<ClientCall> StartRequest(
    boost::asio::io_context& io, ClientRequest request,
    std::shared_ptr<boost::asio::ssl::context> tls,
    std::function<void(int status, const std::vector<std::pair<std::string, std::string>>& headers)>
        on_head,
    std::function<void(std::string_view data)> on_data, std::function<void(Status)> on_done);

struct ClientResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
};

// One request, blocking, on an io_context of its own (for CLI commands; do not call on a loop
// thread).  A null `tls` for https uses MakeClientTls("") (the system's CAs).  idle_timeout_s 0
// means timeout_s here, so that a stalled server cannot hang the caller.  Bodies over 256 MiB
// are refused.
StatusOr<ClientResponse> Fetch(const ClientRequest& request,
                               std::shared_ptr<boost::asio::ssl::context> tls);

}  // namespace loom::net
