// TLS contexts, the plain and TLS transports, and dialling.
#include "loom/net/transport.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <fstream>

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "loom/net/tls.h"

namespace loom::net {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using internal::ErrorCode;

namespace {

Status CheckReadable(const std::string& path, std::string_view what) {
  if (path.empty()) return InvalidArgumentError("tls: no ", what, " file given");
  std::ifstream file(path);
  if (!file) return NotFoundError("tls: cannot open the ", what, " file '", path, "'");
  return OkStatus();
}

std::shared_ptr<ssl::context> NewContext(ssl::context::method method) {
  auto ctx = std::make_shared<ssl::context>(method);
  ErrorCode ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                       ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                   ec);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  return ctx;
}

}  // namespace

StatusOr<std::shared_ptr<ssl::context>> MakeServerTls(const std::string& cert_file,
                                                      const std::string& key_file) {
  LOOM_RETURN_IF_ERROR(CheckReadable(cert_file, "certificate"));
  LOOM_RETURN_IF_ERROR(CheckReadable(key_file, "private key"));
  auto ctx = NewContext(ssl::context::tls_server);
  ErrorCode ec;
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    ERR_clear_error();
    return InvalidArgumentError("tls: cannot load a PEM certificate chain from '", cert_file,
                                "': ", ec.message());
  }
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec && ec.category() == asio::error::get_ssl_category() &&
      ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH) {
    ERR_clear_error();
    return InvalidArgumentError("tls: the private key in '", key_file,
                                "' does not match the certificate in '", cert_file, "'");
  }
  if (ec) {
    ERR_clear_error();
    return InvalidArgumentError("tls: cannot load a PEM private key from '", key_file,
                                "': ", ec.message());
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    ERR_clear_error();
    return InvalidArgumentError("tls: the private key in '", key_file,
                                "' does not match the certificate in '", cert_file, "'");
  }
  return ctx;
}

StatusOr<std::shared_ptr<ssl::context>> MakeClientTls(const std::string& ca_file) {
  auto ctx = NewContext(ssl::context::tls_client);
  ErrorCode ec;
  ctx->set_verify_mode(ssl::verify_peer, ec);
  if (ca_file.empty()) {
    ctx->set_default_verify_paths(ec);
    if (ec) {
      ERR_clear_error();
      return UnavailableError("tls: cannot load the system's CA certificates: ", ec.message());
    }
  } else {
    LOOM_RETURN_IF_ERROR(CheckReadable(ca_file, "CA certificate"));
    ctx->load_verify_file(ca_file, ec);
    if (ec) {
      ERR_clear_error();
      return InvalidArgumentError("tls: cannot load PEM CA certificates from '", ca_file,
                                  "': ", ec.message());
    }
  }
  return ctx;
}

namespace internal {

std::string EndpointString(const tcp::endpoint& endpoint) {
  const auto address = endpoint.address();
  if (address.is_v6()) {
    const auto v6 = address.to_v6();
    if (v6.is_v4_mapped()) {
      return asio::ip::make_address_v4(asio::ip::v4_mapped, v6).to_string() + ":" +
             std::to_string(endpoint.port());
    }
    return "[" + address.to_string() + "]:" + std::to_string(endpoint.port());
  }
  return address.to_string() + ":" + std::to_string(endpoint.port());
}

std::string RemoteString(const tcp::socket& socket) {
  ErrorCode ec;
  const auto endpoint = socket.remote_endpoint(ec);
  return ec ? std::string() : EndpointString(endpoint);
}

namespace {

class PlainTransport final : public Transport {
 public:
  explicit PlainTransport(tcp::socket socket) : socket_(std::move(socket)) {}
  bool tls() const override { return false; }
  tcp::socket& socket() override { return socket_; }
  void AsyncHandshake(bool, DoneHandler done) override {
    asio::post(socket_.get_executor(), [done = std::move(done)] { done(ErrorCode()); });
  }
  void AsyncReadSome(asio::mutable_buffer buffer, IoHandler done) override {
    socket_.async_read_some(buffer, std::move(done));
  }
  void AsyncWrite(std::vector<asio::const_buffer> buffers, IoHandler done) override {
    asio::async_write(socket_, std::move(buffers), std::move(done));
  }

  tcp::socket socket_;
};

class TlsTransport final : public Transport {
 public:
  TlsTransport(tcp::socket socket, std::shared_ptr<ssl::context> context)
      : context_(std::move(context)),
        stream_(std::make_unique<TlsStream>(std::move(socket), *context_)) {}
  bool tls() const override { return true; }
  tcp::socket& socket() override { return stream_->next_layer(); }
  void AsyncHandshake(bool server, DoneHandler done) override {
    stream_->async_handshake(server ? ssl::stream_base::server : ssl::stream_base::client,
                             std::move(done));
  }
  void AsyncReadSome(asio::mutable_buffer buffer, IoHandler done) override {
    stream_->async_read_some(buffer, std::move(done));
  }
  void AsyncWrite(std::vector<asio::const_buffer> buffers, IoHandler done) override {
    asio::async_write(*stream_, std::move(buffers), std::move(done));
  }
  std::string VerifyError() const override {
    const long result = SSL_get_verify_result(stream_->native_handle());
    return result == X509_V_OK ? std::string() : X509_verify_cert_error_string(result);
  }

  // Client side: SNI (names only, as RFC 6066 asks) and the name or address to verify.
  void SetPeerName(const std::string& host) {
    SSL* ssl = stream_->native_handle();
    ErrorCode ec;
    asio::ip::make_address(host, ec);
    if (!ec) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl, host.c_str());
      SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      SSL_set1_host(ssl, host.c_str());
    }
    stream_->set_verify_mode(ssl::verify_peer, ec);
  }

  std::shared_ptr<ssl::context> context_;
  std::unique_ptr<TlsStream> stream_;
};

}  // namespace

std::unique_ptr<Transport> MakePlainTransport(tcp::socket socket) {
  return std::make_unique<PlainTransport>(std::move(socket));
}

std::unique_ptr<Transport> MakeServerTlsTransport(tcp::socket socket,
                                                  std::shared_ptr<ssl::context> tls) {
  return std::make_unique<TlsTransport>(std::move(socket), std::move(tls));
}

ReleasedStream::ReleasedStream() = default;
ReleasedStream::ReleasedStream(ReleasedStream&&) noexcept = default;
ReleasedStream::~ReleasedStream() = default;

ReleasedStream ReleaseStream(std::unique_ptr<Transport> transport) {
  ReleasedStream out;
  if (transport->tls()) {
    auto& t = static_cast<TlsTransport&>(*transport);
    out.tls = std::move(t.stream_);
    out.context = std::move(t.context_);
  } else {
    out.plain.emplace(std::move(static_cast<PlainTransport&>(*transport).socket_));
  }
  return out;
}

namespace {

class ConnectorImpl final : public Connector, public std::enable_shared_from_this<ConnectorImpl> {
 public:
  ConnectorImpl(asio::io_context& io, std::string host, int port,
                std::shared_ptr<ssl::context> tls, ConnectDone done)
      : host_(std::move(host)),
        port_(port),
        tls_(std::move(tls)),
        done_(std::move(done)),
        resolver_(io),
        socket_(io),
        timer_(io) {}

  void Start(double timeout_s) {
    timeout_s_ = timeout_s;
    if (timeout_s > 0) {
      timer_.expires_after(Seconds(timeout_s));
      timer_.async_wait([self = shared_from_this()](const ErrorCode& ec) {
        if (ec || self->finished_) return;
        self->timed_out_ = true;
        self->Abort();
      });
    }
    ErrorCode ec;
    const auto address = asio::ip::make_address(host_, ec);
    if (!ec) {
      ConnectTo(std::vector<tcp::endpoint>{tcp::endpoint(address, static_cast<uint16_t>(port_))});
      return;
    }
    stage_ = "resolve";
    resolver_.async_resolve(
        host_, std::to_string(port_),
        [self = shared_from_this()](const ErrorCode& ec, tcp::resolver::results_type results) {
          if (self->Interrupted()) return;
          if (ec) {
            self->Fail(UnavailableError("resolve '", self->host_, "': ", ec.message()));
            return;
          }
          std::vector<tcp::endpoint> endpoints;
          for (const auto& entry : results) endpoints.push_back(entry.endpoint());
          self->ConnectTo(std::move(endpoints));
        });
  }

  void Cancel() override {
    if (finished_) return;
    cancelled_ = true;
    Abort();
  }

 private:
  std::string Peer() const {
    const bool v6 = host_.find(':') != std::string::npos;
    return (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
  }

  void ConnectTo(std::vector<tcp::endpoint> endpoints) {
    stage_ = "connect";
    asio::async_connect(socket_, endpoints,
                        [self = shared_from_this()](const ErrorCode& ec, const tcp::endpoint&) {
                          if (self->Interrupted()) return;
                          if (ec) {
                            self->Fail(UnavailableError("connect to ", self->Peer(), ": ",
                                                        ec.message()));
                            return;
                          }
                          self->Connected();
                        });
  }

  void Connected() {
    ErrorCode ec;
    socket_.set_option(tcp::no_delay(true), ec);
    if (!tls_) {
      Finish(MakePlainTransport(std::move(socket_)));
      return;
    }
    stage_ = "tls handshake";
    auto tls = std::make_unique<TlsTransport>(std::move(socket_), tls_);
    tls->SetPeerName(host_);
    tls_transport_ = std::move(tls);
    tls_transport_->AsyncHandshake(false, [self = shared_from_this()](const ErrorCode& ec) {
      if (self->Interrupted()) return;
      if (ec) {
        std::string why = ec.message();
        const std::string verify = self->tls_transport_->VerifyError();
        if (!verify.empty()) why += " (" + verify + ")";
        self->Fail(UnavailableError("tls handshake with ", self->Peer(), ": ", why));
        return;
      }
      self->Finish(std::unique_ptr<Transport>(std::move(self->tls_transport_)));
    });
  }

  // Whether a timeout or Cancel() ended the dial; if so, reports it.
  bool Interrupted() {
    if (finished_) return true;
    if (cancelled_) {
      Fail(CancelledError("dialling ", Peer(), " cancelled"));
      return true;
    }
    if (timed_out_) {
      Fail(DeadlineExceededError("timed out after ", timeout_s_, " s (", stage_, ") dialling ",
                                 Peer()));
      return true;
    }
    return false;
  }

  void Abort() {
    resolver_.cancel();
    ErrorCode ec;
    socket_.close(ec);
    if (tls_transport_) tls_transport_->Close();
  }

  void Fail(Status status) { Finish(std::move(status)); }

  void Finish(StatusOr<std::unique_ptr<Transport>> result) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    auto done = std::move(done_);
    done_ = nullptr;
    done(std::move(result));
  }

  const std::string host_;
  const int port_;
  const std::shared_ptr<ssl::context> tls_;
  ConnectDone done_;
  tcp::resolver resolver_;
  tcp::socket socket_;
  std::unique_ptr<TlsTransport> tls_transport_;
  asio::steady_timer timer_;
  double timeout_s_ = 0;
  const char* stage_ = "connect";
  bool finished_ = false;
  bool cancelled_ = false;
  bool timed_out_ = false;
};

}  // namespace

std::shared_ptr<Connector> Connect(asio::io_context& io, std::string host, int port,
                                   std::shared_ptr<ssl::context> tls, double timeout_s,
                                   ConnectDone done) {
  auto connector =
      std::make_shared<ConnectorImpl>(io, std::move(host), port, std::move(tls), std::move(done));
  connector->Start(timeout_s);
  return connector;
}

}  // namespace internal
}  // namespace loom::net
