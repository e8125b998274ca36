// The store in a PostgreSQL database, for a network that outgrows one machine or wants a standby
// hub.  The database must exist; its tables are created by the migrations.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "loom/base/status.h"
#include "loom/network/store/sql.h"
#include "loom/network/store/store.h"

namespace loom::network::store {

// Connects with a libpq connection URI or keyword string ("postgresql://user@host:5432/db",
// "postgresql:///db?host=/run/dir&port=5433").  An unreachable server is kUnavailable, with a
// message naming the server, database and user (never the password).  No migration runs here.
StatusOr<std::unique_ptr<SqlConnection>> OpenPostgresConnection(std::string_view url);

// OpenPostgresConnection, then the pending migrations.
StatusOr<std::unique_ptr<Store>> OpenPostgresStore(std::string_view url);

// "server '/run/dir:5433', database 'db', user 'loom'" for messages, from the URL's parts.
std::string DescribePostgresServer(std::string_view url);

}  // namespace loom::network::store
