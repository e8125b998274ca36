#include "loom/network/store/postgres/postgres_store.h"

#include <libpq-fe.h>

#include <charconv>
#include <vector>

#include "loom/network/store/sql_store.h"

namespace loom::network::store {
namespace {

// Type oids from PostgreSQL's catalog (pg_type.dat), which libpq-fe.h does not define.  Typed
// parameters spare the server from guessing, e.g. for LIMIT $1 or a parameter used twice.
constexpr Oid kInt8Oid = 20;
constexpr Oid kTextOid = 25;

// Key of the advisory lock that serializes migrations across hubs ("loomschm" in ASCII).
constexpr int64_t kMigrationLockKey = 0x6c6f6f6d7363686d;

constexpr int kMinServerVersion = 100000;  // identity columns need PostgreSQL 10

struct ConnCloser {
  void operator()(PGconn* conn) const { PQfinish(conn); }
};
struct ResultClearer {
  void operator()(PGresult* result) const { PQclear(result); }
};
struct ConninfoFreer {
  void operator()(PQconninfoOption* options) const { PQconninfoFree(options); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnCloser>;
using ResultPtr = std::unique_ptr<PGresult, ResultClearer>;
using ConninfoPtr = std::unique_ptr<PQconninfoOption, ConninfoFreer>;

// libpq's messages end in a newline and may span lines; messages here are one line.
std::string OneLine(const char* text) {
  std::string out = text != nullptr ? text : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  for (char& c : out) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  return out;
}

StatusCode CodeForSqlState(std::string_view state) {
  if (state == "23505") return StatusCode::kFailedPrecondition;  // unique_violation
  if (state == "23503") return StatusCode::kNotFound;            // foreign_key_violation
  const std::string_view cls = state.substr(0, 2);
  if (cls == "23" || cls == "22") return StatusCode::kInvalidArgument;  // constraint, bad data
  // Connection exceptions, server shutting down, serialization failures and deadlocks: all
  // worth retrying later.
  if (cls == "08" || cls == "57" || cls == "40") return StatusCode::kUnavailable;
  if (cls == "53") return StatusCode::kResourceExhausted;  // disk full, out of memory
  return StatusCode::kInternal;
}

void IgnoreNotice(void*, const char*) {}

class PostgresConnection final : public SqlConnection {
 public:
  PostgresConnection(ConnPtr conn, std::string server)
      : conn_(std::move(conn)), server_(std::move(server)) {}

  Dialect dialect() const override { return Dialect::kPostgres; }

  StatusOr<SqlResult> Exec(std::string_view sql, std::span<const SqlParam> params) override {
    const std::string sql_z(sql);
    // libpq takes NUL-terminated text values; texts are sized first so c_str() pointers stay.
    std::vector<std::string> texts(params.size());
    std::vector<const char*> values(params.size());
    std::vector<Oid> types(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      if (const auto* number = std::get_if<int64_t>(&params[i])) {
        texts[i] = std::to_string(*number);
        types[i] = kInt8Oid;
      } else {
        texts[i] = std::string(std::get<std::string_view>(params[i]));
        types[i] = kTextOid;
      }
      values[i] = texts[i].c_str();
    }
    ResultPtr res(PQexecParams(conn_.get(), sql_z.c_str(), static_cast<int>(params.size()),
                               types.data(), values.data(), /*paramLengths=*/nullptr,
                               /*paramFormats=*/nullptr, /*resultFormat=text*/ 0));
    if (res == nullptr) return ConnectionError();
    const ExecStatusType status = PQresultStatus(res.get());
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) return ResultError(res.get());

    SqlResult result;
    const int rows = PQntuples(res.get());
    const int columns = PQnfields(res.get());
    result.rows.resize(rows);
    for (int r = 0; r < rows; ++r) {
      result.rows[r].reserve(columns);
      for (int c = 0; c < columns; ++c) {
        result.rows[r].emplace_back(PQgetvalue(res.get(), r, c),
                                    static_cast<size_t>(PQgetlength(res.get(), r, c)));
      }
    }
    const std::string_view tuples = PQcmdTuples(res.get());  // "" for statements that are not DML
    if (!tuples.empty()) {
      std::from_chars(tuples.data(), tuples.data() + tuples.size(), result.affected);
    }
    return result;
  }

  Status BeginWrite() override {
    auto r = ExecPlain(*this, "BEGIN");
    return r.ok() ? OkStatus() : r.status().WithContext("begin");
  }

  Status LockForMigration() override {
    // Released by the transaction's end, commit or rollback, so no unlock path can be missed.
    const SqlParam key[] = {kMigrationLockKey};
    auto r = Exec("SELECT pg_advisory_xact_lock($1)", key);
    return r.ok() ? OkStatus() : r.status().WithContext("take the migration lock");
  }

 private:
  Status ConnectionError() {
    const std::string text = OneLine(PQerrorMessage(conn_.get()));
    if (PQstatus(conn_.get()) == CONNECTION_BAD) {
      return UnavailableError("postgresql: lost the connection to ", server_, ": ", text);
    }
    return ResourceExhaustedError("postgresql: no result (", text, ")");
  }

  Status ResultError(const PGresult* res) {
    if (PQstatus(conn_.get()) == CONNECTION_BAD) return ConnectionError();
    const char* state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char* primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    const char* detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
    std::string text = StrCat(
        "postgresql: ", primary != nullptr ? OneLine(primary) : OneLine(PQresultErrorMessage(res)));
    if (detail != nullptr) text += StrCat(" (", OneLine(detail), ")");
    if (state != nullptr) text += StrCat(" [SQLSTATE ", state, "]");
    return Status(state != nullptr ? CodeForSqlState(state) : StatusCode::kInternal, text);
  }

  ConnPtr conn_;
  std::string server_;  // DescribePostgresServer, for messages
};

}  // namespace

std::string DescribePostgresServer(std::string_view url) {
  const std::string url_z(url);
  char* error = nullptr;
  ConninfoPtr options(PQconninfoParse(url_z.c_str(), &error));
  if (options == nullptr) {
    PQfreemem(error);
    return "an unparsable connection URL";
  }
  std::string host, port, dbname, user;
  for (const PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const std::string_view key = o->keyword;
    if (key == "host") host = o->val;
    if (key == "port") port = o->val;
    if (key == "dbname") dbname = o->val;
    if (key == "user") user = o->val;
  }
  return StrCat("server '", host.empty() ? "(default socket)" : host, ":",
                port.empty() ? "5432" : port, "', database '",
                dbname.empty() ? "(default)" : dbname, "', user '",
                user.empty() ? "(default)" : user, "'");
}

StatusOr<std::unique_ptr<SqlConnection>> OpenPostgresConnection(std::string_view url) {
  const std::string server = DescribePostgresServer(url);
  const std::string op = StrCat("store: connect to PostgreSQL ", server);
  const std::string url_z(url);
  char* parse_error = nullptr;
  ConninfoPtr parsed(PQconninfoParse(url_z.c_str(), &parse_error));
  if (parsed == nullptr) {
    const std::string why = parse_error != nullptr ? OneLine(parse_error) : "out of memory";
    PQfreemem(parse_error);
    return InvalidArgumentError("store: open PostgreSQL: bad connection URL: ", why);
  }
  // Keywords are applied in order and the URL is expanded where dbname stands: it may override
  // the timeout and application name, but not the encoding, which CheckText's promise needs.
  const char* const keywords[] = {"connect_timeout", "fallback_application_name", "dbname",
                                  "client_encoding", nullptr};
  const char* const values[] = {"10", "loom-hub", url_z.c_str(), "UTF8", nullptr};
  ConnPtr conn(PQconnectdbParams(keywords, values, /*expand_dbname=*/1));
  if (conn == nullptr) return ResourceExhaustedError(op, ": out of memory");
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    return UnavailableError(op, ": ", OneLine(PQerrorMessage(conn.get())));
  }
  if (PQserverVersion(conn.get()) < kMinServerVersion) {
    return FailedPreconditionError(op, ": server version ", PQserverVersion(conn.get()),
                                   " is older than PostgreSQL 10");
  }
  // The server's NOTICEs ("relation already exists, skipping") would go to stderr; none of them
  // is an error, and errors come back as results.
  PQsetNoticeProcessor(conn.get(), IgnoreNotice, nullptr);
  return std::unique_ptr<SqlConnection>(
      std::make_unique<PostgresConnection>(std::move(conn), server));
}

StatusOr<std::unique_ptr<Store>> OpenPostgresStore(std::string_view url) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<SqlConnection> conn, OpenPostgresConnection(url));
  auto store = OpenSqlStore(std::move(conn));
  if (!store.ok()) {
    return store.status().WithContext(
        StrCat("store: open PostgreSQL ", DescribePostgresServer(url)));
  }
  return store;
}

}  // namespace loom::network::store
