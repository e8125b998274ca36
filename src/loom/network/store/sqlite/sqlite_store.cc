#include "loom/network/store/sqlite/sqlite_store.h"

#include <sqlite3.h>

#include <filesystem>
#include <string>
#include <unordered_map>

#include "loom/network/store/sql_store.h"

namespace loom::network::store {
namespace {

// How long a statement waits for another connection's write lock before failing kUnavailable.
constexpr int kBusyTimeoutMs = 5000;

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// The engine's error for result code `rc` (extended codes are on), classified for sql.h.
Status SqliteError(sqlite3* db, int rc) {
  const std::string text = StrCat(
      "sqlite: ", db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc), " (code ", rc, ")");
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) return Status(StatusCode::kNotFound, text);
      if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
        return Status(StatusCode::kFailedPrecondition, text);
      }
      return Status(StatusCode::kInvalidArgument, text);  // CHECK, NOT NULL
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      return Status(StatusCode::kUnavailable, text);
    case SQLITE_FULL:
      return Status(StatusCode::kResourceExhausted, text);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Status(StatusCode::kDataLoss, text);
    default:
      return Status(StatusCode::kInternal, text);
  }
}

// Resets a cached statement when a run ends, however it ends: a statement left mid-step keeps a
// read transaction open, which blocks WAL checkpoints and pins an old snapshot.
class ResetOnExit {
 public:
  explicit ResetOnExit(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;
  ~ResetOnExit() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);  // the bound text is the caller's, borrowed (SQLITE_STATIC)
  }

 private:
  sqlite3_stmt* stmt_;
};

class SqliteConnection final : public SqlConnection {
 public:
  explicit SqliteConnection(DbPtr db) : db_(std::move(db)) {}

  Dialect dialect() const override { return Dialect::kSqlite; }

  StatusOr<SqlResult> Exec(std::string_view sql, std::span<const SqlParam> params) override {
    LOOM_ASSIGN_OR_RETURN(sqlite3_stmt* const stmt, Prepare(sql));
    ResetOnExit reset(stmt);
    LOOM_RETURN_IF_ERROR(Bind(stmt, params));
    const sqlite3_int64 changes_before = sqlite3_total_changes64(db_.get());
    SqlResult result;
    for (;;) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return SqliteError(db_.get(), rc);
      const int columns = sqlite3_column_count(stmt);
      std::vector<std::string>& row = result.rows.emplace_back();
      row.reserve(columns);
      for (int c = 0; c < columns; ++c) {
        // Integers come back as their decimal text, as they do from PostgreSQL.
        const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
        const int bytes = sqlite3_column_bytes(stmt, c);
        row.emplace_back(text != nullptr ? std::string(text, bytes) : std::string());
      }
    }
    // sqlite3_changes64 keeps the count of the last INSERT/UPDATE/DELETE; it is this
    // statement's only if this statement changed something.
    if (sqlite3_total_changes64(db_.get()) != changes_before) {
      result.affected = sqlite3_changes64(db_.get());
    }
    return result;
  }

  Status BeginWrite() override {
    auto r = ExecPlain(*this, "BEGIN IMMEDIATE");
    return r.ok() ? OkStatus() : r.status().WithContext("begin");
  }

  // BEGIN IMMEDIATE already holds the database's one write lock, which excludes other migrators.
  Status LockForMigration() override { return OkStatus(); }

 private:
  // The compiled statement for `sql`, kept for the connection's life: the store runs the same
  // few dozen statements over and over.
  StatusOr<sqlite3_stmt*> Prepare(std::string_view sql) {
    std::string key(sql);
    if (auto it = statements_.find(key); it != statements_.end()) return it->second.get();
    sqlite3_stmt* raw = nullptr;
    const char* tail = nullptr;
    const int rc = sqlite3_prepare_v3(db_.get(), sql.data(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &raw, &tail);
    StmtPtr stmt(raw);
    if (rc != SQLITE_OK) {
      return SqliteError(db_.get(), rc).WithContext(StrCat("prepare \"", sql, "\""));
    }
    if (stmt == nullptr) return InternalError("sqlite: \"", sql, "\" holds no statement");
    for (const char* p = tail; p != nullptr && p < sql.data() + sql.size(); ++p) {
      if (*p != ' ' && *p != '\n' && *p != '\t' && *p != ';') {
        return InternalError("sqlite: \"", sql, "\" holds more than one statement");
      }
    }
    sqlite3_stmt* const out = stmt.get();
    statements_.emplace(std::move(key), std::move(stmt));
    return out;
  }

  Status Bind(sqlite3_stmt* stmt, std::span<const SqlParam> params) {
    const int wanted = sqlite3_bind_parameter_count(stmt);
    if (wanted != static_cast<int>(params.size())) {
      return InternalError("sqlite: \"", sqlite3_sql(stmt), "\" takes ", wanted,
                           " parameters, given ", params.size());
    }
    for (size_t i = 0; i < params.size(); ++i) {
      // Parameters are named $1, $2, ... for PostgreSQL; SQLite numbers named parameters in the
      // order they first appear, so find each by name.
      const std::string name = StrCat("$", i + 1);
      const int index = sqlite3_bind_parameter_index(stmt, name.c_str());
      if (index == 0) {
        return InternalError("sqlite: \"", sqlite3_sql(stmt), "\" has no parameter ", name);
      }
      int rc = SQLITE_OK;
      if (const auto* number = std::get_if<int64_t>(&params[i])) {
        rc = sqlite3_bind_int64(stmt, index, *number);
      } else {
        const std::string_view text = std::get<std::string_view>(params[i]);
        // A null pointer would bind SQL NULL; an empty string is "", not NULL.
        rc = sqlite3_bind_text64(stmt, index, text.data() != nullptr ? text.data() : "",
                                 text.size(), SQLITE_STATIC, SQLITE_UTF8);
      }
      if (rc != SQLITE_OK) return SqliteError(db_.get(), rc).WithContext(StrCat("bind ", name));
    }
    return OkStatus();
  }

  DbPtr db_;  // declared first so that it closes after every statement is finalized
  std::unordered_map<std::string, StmtPtr> statements_;
};

// Runs a PRAGMA and returns the first column of its first row ("" when it returns none).
StatusOr<std::string> Pragma(SqlConnection& conn, std::string_view sql) {
  LOOM_ASSIGN_OR_RETURN(SqlResult r, ExecPlain(conn, sql));
  if (r.rows.empty() || r.rows[0].empty()) return std::string();
  return r.rows[0][0];
}

}  // namespace

StatusOr<std::unique_ptr<SqlConnection>> OpenSqliteConnection(std::string_view path) {
  namespace fs = std::filesystem;
  const std::string op = StrCat("store: open sqlite '", path, "'");
  if (path.empty()) return InvalidArgumentError(op, ": the path is empty");
  const fs::path file(path);
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    return NotFoundError(op, ": directory '", dir.string(), "' does not exist");
  }
  if (!fs::is_directory(dir, ec)) {
    return InvalidArgumentError(op, ": '", dir.string(), "' is not a directory");
  }
  if (fs::is_directory(file, ec)) return InvalidArgumentError(op, ": the path is a directory");

  sqlite3* raw = nullptr;
  const std::string path_z(path);
  // No SQLITE_OPEN_URI: the path is a file name, never a "file:" URI with options.
  const int rc =
      sqlite3_open_v2(path_z.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  DbPtr db(raw);  // sqlite3_open_v2 hands out a handle to close even when it fails
  if (rc != SQLITE_OK) return SqliteError(db.get(), rc).WithContext(op);
  sqlite3_extended_result_codes(db.get(), 1);
  sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);
  auto conn = std::make_unique<SqliteConnection>(std::move(db));

  // WAL lets readers in other processes run beside the hub's writes, and with it
  // synchronous=NORMAL makes a commit durable across a crash of the process (the commit is in
  // the WAL file, in the OS's cache, when the call returns) but not across a power loss or an
  // OS crash, which may drop the last commits.  The hub promises the former; FULL would add an
  // fsync to every commit.
  auto mode = Pragma(*conn, "PRAGMA journal_mode = WAL");
  if (!mode.ok()) return mode.status().WithContext(StrCat(op, ": set WAL journal"));
  if (*mode != "wal") {
    return FailedPreconditionError(op, ": the file cannot use a WAL journal (journal mode is '",
                                   *mode, "'; is it on a network file system?)");
  }
  auto sync = Pragma(*conn, "PRAGMA synchronous = NORMAL");
  if (!sync.ok()) return sync.status().WithContext(StrCat(op, ": set synchronous"));
  // A checkpoint copies the WAL back into the database and syncs both, which takes the disk's
  // flush time on the hub's loop thread; at SQLite's default (every 1,000 pages, ~25 requests)
  // those syncs were a third of settlement's wall time.  Every 16,000 pages (a 64 MB WAL) they
  // are rare, and a page written by many requests is copied back once.
  auto checkpoint = Pragma(*conn, "PRAGMA wal_autocheckpoint = 16000");
  if (!checkpoint.ok()) return checkpoint.status().WithContext(StrCat(op, ": set checkpoints"));
  auto fk = Pragma(*conn, "PRAGMA foreign_keys = ON");
  if (!fk.ok()) return fk.status().WithContext(StrCat(op, ": enable foreign keys"));
  auto fk_on = Pragma(*conn, "PRAGMA foreign_keys");
  if (!fk_on.ok()) return fk_on.status().WithContext(StrCat(op, ": check foreign keys"));
  if (*fk_on != "1") {
    return FailedPreconditionError(op, ": this SQLite was built without foreign keys");
  }
  return std::unique_ptr<SqlConnection>(std::move(conn));
}

StatusOr<std::unique_ptr<Store>> OpenSqliteStore(std::string_view path) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<SqlConnection> conn, OpenSqliteConnection(path));
  auto store = OpenSqlStore(std::move(conn));
  if (!store.ok()) return store.status().WithContext(StrCat("store: open sqlite '", path, "'"));
  return store;
}

}  // namespace loom::network::store
