// TLS contexts for servers and clients (OpenSSL through Boost.Asio).  A context is shared by every
// connection made with it; keep the shared_ptr as long as connections may be made.
#pragma once

#include <memory>
#include <string>

#include "loom/base/status.h"

namespace boost::asio::ssl {
class context;
}

namespace loom::net {

// A server context from a PEM certificate chain (leaf first) and its PEM private key.  TLS 1.2 is
// the minimum.  Errors name the file that could not be used.
StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeServerTls(const std::string& cert_file,
                                                                   const std::string& key_file);

// A client context that verifies the peer's certificate against the system's default CA paths,
// or only against `ca_file` (PEM, one or more certificates) when it is not empty.  Each
// connection made with it also sets SNI and checks the certificate's name (or IP address)
// against the host dialled.  TLS 1.2 is the minimum.
StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeClientTls(const std::string& ca_file);

}  // namespace loom::net
