// Internal to loom_net (not for users): a byte stream over TCP or TLS behind one small interface,
// so that the HTTP server and client are written once, not once per stream type; dialling; and
// the registry of a server's live connections.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "loom/base/status.h"

namespace boost::asio::ssl {
class context;
}
namespace boost::beast {
template <class NextLayer>
class ssl_stream;
}

namespace loom::net::internal {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using ErrorCode = boost::system::error_code;
using IoHandler = std::function<void(const ErrorCode&, std::size_t)>;
using DoneHandler = std::function<void(const ErrorCode&)>;
using TlsStream = boost::beast::ssl_stream<tcp::socket>;

inline std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

// "1.2.3.4:80" or "[::1]:80"; "" when the socket has no peer.
std::string EndpointString(const tcp::endpoint& endpoint);
std::string RemoteString(const tcp::socket& socket);

// One connection's byte stream.  At most one read and one write may be pending at a time;
// handlers run on the socket's io_context.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual bool tls() const = 0;
  virtual tcp::socket& socket() = 0;
  // TLS handshake as server or client; plain: completes (later) with success.
  virtual void AsyncHandshake(bool server, DoneHandler done) = 0;
  virtual void AsyncReadSome(asio::mutable_buffer buffer, IoHandler done) = 0;
  // Writes all of `buffers` (which must stay valid until `done`).
  virtual void AsyncWrite(std::vector<asio::const_buffer> buffers, IoHandler done) = 0;
  // After a failed client handshake: why the peer's certificate was refused, "" if it was not.
  virtual std::string VerifyError() const { return ""; }

  // No more bytes will be sent (TCP FIN); reads go on.
  void ShutdownSend() {
    ErrorCode ec;
    socket().shutdown(tcp::socket::shutdown_send, ec);
  }
  // Closes the socket; pending operations complete with an error.  Idempotent.
  void Close() {
    ErrorCode ec;
    socket().close(ec);
  }
};

std::unique_ptr<Transport> MakePlainTransport(tcp::socket socket);
// A server-side TLS stream (no handshake yet).
std::unique_ptr<Transport> MakeServerTlsTransport(tcp::socket socket,
                                                  std::shared_ptr<asio::ssl::context> tls);

// What a WebSocket takes over from a Transport: exactly one of `plain` and `tls` is set; `context`
// is the TLS context that must outlive the stream.
struct ReleasedStream {
  ReleasedStream();
  ReleasedStream(ReleasedStream&&) noexcept;
  ~ReleasedStream();
  std::optional<tcp::socket> plain;
  std::unique_ptr<TlsStream> tls;
  std::shared_ptr<asio::ssl::context> context;
};
ReleasedStream ReleaseStream(std::unique_ptr<Transport> transport);

// Dialling: resolve (skipped for IP literals), connect, and for a non-null `tls` the client TLS
// handshake with SNI and certificate name verification for `host`.
class Connector {
 public:
  virtual ~Connector() = default;
  // `done` then gets kCancelled (unless it already ran).
  virtual void Cancel() = 0;
};
using ConnectDone = std::function<void(StatusOr<std::unique_ptr<Transport>>)>;
// `done` runs once, on io's thread, never inside this call; errors name the stage and the peer;
// after `timeout_s` (if > 0) it gets kDeadlineExceeded.
std::shared_ptr<Connector> Connect(asio::io_context& io, std::string host, int port,
                                   std::shared_ptr<asio::ssl::context> tls, double timeout_s,
                                   ConnectDone done);

// Something a server must be able to close when it stops.
class Tracked {
 public:
  virtual ~Tracked() = default;
  // Closes the connection now and runs its on-close callbacks with `reason`.
  virtual void Abort(std::string_view reason) = 0;
};

// A server's live connections (loop thread only; size() from any thread).
class Registry {
 public:
  uint64_t Add(std::weak_ptr<Tracked> connection) {
    const uint64_t id = next_id_++;
    live_.emplace(id, std::move(connection));
    size_.store(static_cast<int64_t>(live_.size()), std::memory_order_relaxed);
    return id;
  }
  void Remove(uint64_t id) {
    live_.erase(id);
    size_.store(static_cast<int64_t>(live_.size()), std::memory_order_relaxed);
  }
  int64_t size() const { return size_.load(std::memory_order_relaxed); }
  bool stopping() const { return stopping_; }
  // Aborts every connection; later ones are refused.
  void AbortAll(std::string_view reason) {
    stopping_ = true;
    std::vector<std::shared_ptr<Tracked>> all;
    for (auto& [id, weak] : live_) {
      if (auto c = weak.lock()) all.push_back(std::move(c));
    }
    live_.clear();
    size_.store(0, std::memory_order_relaxed);
    for (auto& c : all) c->Abort(reason);
  }

 private:
  std::unordered_map<uint64_t, std::weak_ptr<Tracked>> live_;
  std::atomic<int64_t> size_{0};
  uint64_t next_id_ = 1;
  bool stopping_ = false;
};

}  // namespace loom::net::internal
