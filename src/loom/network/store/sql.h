// The small SQL surface that both engines provide, so that the store's queries and migrations are
// written once (sql_store.cc, schema.cc) and each engine only runs statements.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "loom/base/status.h"

namespace loom::network::store {

enum class Dialect { kSqlite, kPostgres };

// A bound parameter.  Statements name them $1, $2, ... (PostgreSQL's syntax; SQLite binds them by
// name), so one statement text serves both engines and no value is ever spliced into SQL.
using SqlParam = std::variant<int64_t, std::string_view>;

struct SqlResult {
  int64_t affected = 0;                        // rows changed by INSERT / UPDATE / DELETE
  std::vector<std::vector<std::string>> rows;  // (row, column) as text; NULL reads as ""
};

class SqlConnection {
 public:
  virtual ~SqlConnection() = default;
  virtual Dialect dialect() const = 0;

  // Runs exactly one statement.  Errors carry the engine's own text, classified so that callers
  // can answer without parsing it: a unique or primary-key violation is kFailedPrecondition, a
  // foreign-key violation kNotFound, a lost server or a file locked too long kUnavailable.
  virtual StatusOr<SqlResult> Exec(std::string_view sql, std::span<const SqlParam> params) = 0;

  // Starts a transaction that will write.  SQLite takes the write lock at once (BEGIN IMMEDIATE):
  // a deferred transaction that upgrades from reading to writing fails with SQLITE_BUSY instead
  // of waiting on busy_timeout when another process wrote in between.
  virtual Status BeginWrite() = 0;

  // Inside a BeginWrite transaction: waits until no other process is migrating the same
  // database, so two hubs starting together apply each migration once.
  virtual Status LockForMigration() = 0;
};

// A write transaction that rolls back unless Commit() succeeded (on any early error return).
class Transaction {
 public:
  explicit Transaction(SqlConnection& conn) : conn_(conn) {}
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  Status Begin();
  Status Commit();

 private:
  SqlConnection& conn_;
  bool open_ = false;
};

// Runs a statement without parameters (BEGIN, COMMIT, DDL).
StatusOr<SqlResult> ExecPlain(SqlConnection& conn, std::string_view sql);

// kInvalidArgument unless `text` is UTF-8 without NUL bytes: what both engines store unchanged.
Status CheckText(std::string_view text);

// `text` in single quotes for an error message: control bytes and bytes that are not UTF-8
// written as \xNN, and cut after 80 bytes, so that any caller's value can be shown safely.
std::string Quoted(std::string_view text);

// Reads the columns of one result row, keeping the first problem instead of failing each call.
class RowReader {
 public:
  explicit RowReader(const std::vector<std::string>& row) : row_(row) {}
  int64_t Int(size_t column);
  std::string Text(size_t column);
  // kDataLoss naming the column when one was missing or not an integer.
  const Status& status() const { return status_; }

 private:
  const std::vector<std::string>& row_;
  Status status_;
};

// Decodes every row of `result` with `decode` (a row -> StatusOr<T>), naming `op` on failure.
template <class T, class Decode>
StatusOr<std::vector<T>> DecodeAll(std::string_view op, const SqlResult& result, Decode decode) {
  std::vector<T> out;
  out.reserve(result.rows.size());
  for (const auto& row : result.rows) {
    auto item = decode(row);
    if (!item.ok()) return item.status().WithContext(StrCat("store: ", op));
    out.push_back(std::move(item).value());
  }
  return out;
}

}  // namespace loom::network::store
