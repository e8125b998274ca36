// A throw-away PostgreSQL server for tests (compiled into test binaries only): a fresh cluster in
// a temporary directory, reachable only through a Unix socket in that directory, stopped and
// deleted when the object goes away.  Uses Debian's packaged server (/usr/lib/postgresql/N/bin).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::network::store {

// What a test prints when it skips for want of a server.
inline constexpr const char* kPostgresMissingMessage =
    "POSTGRESQL MISSING: install Debian's postgresql package; the PostgreSQL store tests were "
    "SKIPPED";

// $LOOM_POSTGRES_BIN when set (a server installed elsewhere), else the newest
// /usr/lib/postgresql/<version>/bin that holds initdb and pg_ctl; kNotFound if none.
StatusOr<std::string> FindPostgresBinDir();

class TempPostgres {
 public:
  // initdb + pg_ctl start (a few seconds).  kNotFound when the server is not installed; other
  // failures carry the tail of the server's log.  As root, the server runs as user postgres
  // (it refuses to run as root).
  static StatusOr<std::unique_ptr<TempPostgres>> Start();

  // Only Start() can make a Token; the constructor is public for std::make_unique.
  class Token {
    friend class TempPostgres;
    Token() = default;
  };
  TempPostgres(Token, std::string bin_dir, std::string dir, int port, bool as_postgres_user)
      : bin_dir_(std::move(bin_dir)),
        dir_(std::move(dir)),
        port_(port),
        as_postgres_user_(as_postgres_user) {}
  TempPostgres(const TempPostgres&) = delete;
  TempPostgres& operator=(const TempPostgres&) = delete;
  ~TempPostgres();  // pg_ctl stop, then the directory is deleted

  // A libpq URI for `database` as the cluster's superuser.
  std::string Url(std::string_view database) const;
  // CREATE DATABASE `name`; the name must be [a-z0-9_]+ (identifiers cannot be bound).
  Status CreateDatabase(std::string_view name);

  const std::string& dir() const { return dir_; }
  int port() const { return port_; }

 private:
  // Runs bin_dir/program with `args`, as user postgres when we are root; output to cmd.log.
  Status RunTool(std::string_view program, const std::vector<std::string>& args) const;
  void Stop();

  std::string bin_dir_;
  std::string dir_;  // holds data/, the socket, server.log and cmd.log
  int port_ = 0;     // only names the socket file: the server listens on no TCP port
  bool as_postgres_user_ = false;
  bool running_ = false;
};

}  // namespace loom::network::store
