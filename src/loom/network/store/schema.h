// The store's schema as numbered migrations.  Migration N (1-based, its index + 1) is a list of
// statements applied in one transaction together with its row in `schema_version`; a database
// records the migrations it has, so opening it again applies only newer ones.  Never edit a
// migration that has shipped: add the next one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"
#include "loom/network/store/sql.h"

namespace loom::network::store {

struct Migration {
  std::string_view description;
  // SQL shared by both engines, except that "{id}" stands for an auto-numbered BIGINT primary
  // key, which the engines spell differently, and that a statement that starts with "{sqlite}" or
  // "{postgresql}" runs on that engine only.
  std::vector<std::string_view> statements;
};

// This build's migrations, in order; SchemaVersion() of an up-to-date store is their count.
std::span<const Migration> Migrations();

// `statement` in `dialect`'s spelling ("" for a statement of the other engine only).
std::string StatementFor(std::string_view statement, Dialect dialect);

// The last migration `conn`'s database has (0 for a new database).
StatusOr<int64_t> ReadSchemaVersion(SqlConnection& conn);

// Applies the migrations `conn`'s database lacks, each in its own transaction.  A database whose
// version is beyond `migrations` (written by a newer hub) is kFailedPrecondition; a failed
// migration rolls back whole and names itself.
Status Migrate(SqlConnection& conn, std::span<const Migration> migrations);

}  // namespace loom::network::store
