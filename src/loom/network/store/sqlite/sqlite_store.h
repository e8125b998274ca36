// The store in a SQLite file: the hub's default, embedded, no server to run.
#pragma once

#include <memory>
#include <string_view>

#include "loom/base/status.h"
#include "loom/network/store/sql.h"
#include "loom/network/store/store.h"

namespace loom::network::store {

// Opens (creating if missing) the database file at `path`, whose directory must exist, in WAL
// mode with foreign keys on.  Other processes may open the same file at the same time (an admin
// tool beside the hub): SQLite's locks keep it consistent and each waits up to a few seconds
// for the other's write.  No migration runs here.
StatusOr<std::unique_ptr<SqlConnection>> OpenSqliteConnection(std::string_view path);

// OpenSqliteConnection, then the pending migrations.
StatusOr<std::unique_ptr<Store>> OpenSqliteStore(std::string_view path);

}  // namespace loom::network::store
