#include "loom/network/store/schema.h"

#include "loom/base/clock.h"

namespace loom::network::store {
namespace {

// Text states carry CHECK constraints so that a row no build can read is refused when written.
const std::vector<Migration> kMigrations = {
    {"accounts, API keys, enrolment tokens, nodes, jobs and attempts",
     {
         "CREATE TABLE accounts ("
         " id {id},"
         " name TEXT NOT NULL UNIQUE,"
         " created_ms BIGINT NOT NULL)",

         // The key itself is never stored, only its hash; prefix is what a person sees.
         "CREATE TABLE api_keys ("
         " id {id},"
         " account_id BIGINT NOT NULL REFERENCES accounts (id),"
         " key_hash TEXT NOT NULL UNIQUE,"
         " prefix TEXT NOT NULL UNIQUE,"
         " created_ms BIGINT NOT NULL,"
         " revoked INTEGER NOT NULL DEFAULT 0)",
         "CREATE INDEX api_keys_by_account ON api_keys (account_id)",

         // `used` is a flag of its own: used_ms may legitimately be 0 in tests and replays.
         "CREATE TABLE enroll_tokens ("
         " token_hash TEXT PRIMARY KEY,"
         " created_ms BIGINT NOT NULL,"
         " expires_ms BIGINT NOT NULL,"
         " used INTEGER NOT NULL DEFAULT 0,"
         " used_ms BIGINT NOT NULL DEFAULT 0,"
         " used_by TEXT NOT NULL DEFAULT '')",

         "CREATE TABLE nodes ("
         " node_id TEXT PRIMARY KEY,"
         " name TEXT NOT NULL,"
         " public_key TEXT NOT NULL,"
         " enrolled_ms BIGINT NOT NULL,"
         " last_seen_ms BIGINT NOT NULL)",

         // account_id is not a foreign key: a hub run without authentication records its jobs
         // under account 0.
         "CREATE TABLE jobs ("
         " job_id TEXT PRIMARY KEY,"
         " account_id BIGINT NOT NULL,"
         " model TEXT NOT NULL,"
         " endpoint TEXT NOT NULL,"
         " state TEXT NOT NULL CHECK (state IN ('running', 'completed', 'failed')),"
         " created_ms BIGINT NOT NULL,"
         " finished_ms BIGINT NOT NULL DEFAULT 0,"
         " prompt_tokens BIGINT NOT NULL DEFAULT 0,"
         " completion_tokens BIGINT NOT NULL DEFAULT 0,"
         " finish_reason TEXT NOT NULL DEFAULT '',"
         " error TEXT NOT NULL DEFAULT '')",
         // ListJobs with a state, and FailUnfinishedJobs; and ListJobs without one.
         "CREATE INDEX jobs_by_state_created ON jobs (state, created_ms)",
         "CREATE INDEX jobs_by_created ON jobs (created_ms)",

         // node_id is not a foreign key: an attempt's history outlives the node's enrolment.
         "CREATE TABLE attempts ("
         " attempt_id TEXT PRIMARY KEY,"
         " job_id TEXT NOT NULL REFERENCES jobs (job_id),"
         " node_id TEXT NOT NULL,"
         " number INTEGER NOT NULL,"
         " state TEXT NOT NULL"
         "  CHECK (state IN ('running', 'completed', 'failed', 'cancelled')),"
         " started_ms BIGINT NOT NULL,"
         " first_token_ms BIGINT NOT NULL DEFAULT 0,"
         " finished_ms BIGINT NOT NULL DEFAULT 0,"
         " tokens BIGINT NOT NULL DEFAULT 0,"
         " error TEXT NOT NULL DEFAULT '',"
         " UNIQUE (job_id, number))",
         // Only running attempts are looked up by state (at hub start), so index only those.
         "CREATE INDEX attempts_running ON attempts (job_id) WHERE state = 'running'",
     }},
    {"the ledger: transactions, their lines and each book's balance",
     {
         // (kind, ref) is unique: a job is reserved and settled once, an attempt released once.
         "CREATE TABLE ledger_tx ("
         " id {id},"
         " kind TEXT NOT NULL CHECK (kind IN ('grant', 'reserve', 'settle', 'release')),"
         " ref TEXT NOT NULL,"
         " at_ms BIGINT NOT NULL,"
         " memo TEXT NOT NULL DEFAULT '',"
         " UNIQUE (kind, ref))",
         "CREATE TABLE ledger_lines ("
         " id {id},"
         " tx_id BIGINT NOT NULL REFERENCES ledger_tx (id),"
         " book TEXT NOT NULL,"
         " amount BIGINT NOT NULL,"
         " attempt_id TEXT NOT NULL DEFAULT '')",
         "CREATE INDEX ledger_lines_by_book ON ledger_lines (book, tx_id)",
         "CREATE INDEX ledger_lines_by_tx ON ledger_lines (tx_id)",
         "CREATE INDEX ledger_lines_by_attempt ON ledger_lines (attempt_id) WHERE attempt_id != ''",
         // Written with the lines (sql_ledger.cc); `loom hub ledger check` compares them.
         "CREATE TABLE ledger_balances ("
         " book TEXT PRIMARY KEY,"
         " balance BIGINT NOT NULL)",
     }},
    {"verification: node reputations, hub settings, and the void and forfeit transactions",
     {
         // The ledger's kinds gain 'void' (a failed check takes back one attempt's pending
         // credit) and 'forfeit' (an untrusted node loses all of its pending credit).  SQLite
         // cannot alter a CHECK: both ledger tables are rebuilt with the same rows and ids, the
         // lines' copy referring to the transactions' copy, and the copies take the names (a
         // rename carries the reference along; dropping the originals breaks none).
         "{sqlite}CREATE TABLE ledger_tx_v3 ("
         " id {id},"
         " kind TEXT NOT NULL"
         "  CHECK (kind IN ('grant', 'reserve', 'settle', 'release', 'void', 'forfeit')),"
         " ref TEXT NOT NULL,"
         " at_ms BIGINT NOT NULL,"
         " memo TEXT NOT NULL DEFAULT '',"
         " UNIQUE (kind, ref))",
         "{sqlite}INSERT INTO ledger_tx_v3 (id, kind, ref, at_ms, memo)"
         " SELECT id, kind, ref, at_ms, memo FROM ledger_tx ORDER BY id",
         "{sqlite}CREATE TABLE ledger_lines_v3 ("
         " id {id},"
         " tx_id BIGINT NOT NULL REFERENCES ledger_tx_v3 (id),"
         " book TEXT NOT NULL,"
         " amount BIGINT NOT NULL,"
         " attempt_id TEXT NOT NULL DEFAULT '')",
         "{sqlite}INSERT INTO ledger_lines_v3 (id, tx_id, book, amount, attempt_id)"
         " SELECT id, tx_id, book, amount, attempt_id FROM ledger_lines ORDER BY id",
         "{sqlite}DROP TABLE ledger_lines",
         "{sqlite}DROP TABLE ledger_tx",
         "{sqlite}ALTER TABLE ledger_tx_v3 RENAME TO ledger_tx",
         "{sqlite}ALTER TABLE ledger_lines_v3 RENAME TO ledger_lines",
         "{sqlite}CREATE INDEX ledger_lines_by_book ON ledger_lines (book, tx_id)",
         "{sqlite}CREATE INDEX ledger_lines_by_tx ON ledger_lines (tx_id)",
         "{sqlite}CREATE INDEX ledger_lines_by_attempt ON ledger_lines (attempt_id)"
         " WHERE attempt_id != ''",
         "{postgresql}ALTER TABLE ledger_tx DROP CONSTRAINT ledger_tx_kind_check",
         "{postgresql}ALTER TABLE ledger_tx ADD CONSTRAINT ledger_tx_kind_check"
         " CHECK (kind IN ('grant', 'reserve', 'settle', 'release', 'void', 'forfeit'))",

         // One row per node the hub has checked or served with (verify.h, Reputation).
         "CREATE TABLE node_reputation ("
         " node_id TEXT PRIMARY KEY,"
         " jobs BIGINT NOT NULL DEFAULT 0,"
         " checks_passed BIGINT NOT NULL DEFAULT 0,"
         " checks_failed BIGINT NOT NULL DEFAULT 0,"
         " streak BIGINT NOT NULL DEFAULT 0,"
         " window_start_ms BIGINT NOT NULL DEFAULT 0,"
         " window_failures BIGINT NOT NULL DEFAULT 0,"
         " last_result TEXT NOT NULL DEFAULT ''"
         "  CHECK (last_result IN ('', 'passed', 'failed')),"
         " last_check_ms BIGINT NOT NULL DEFAULT 0,"
         " untrusted INTEGER NOT NULL DEFAULT 0,"
         " untrusted_ms BIGINT NOT NULL DEFAULT 0,"
         " served_tokens BIGINT NOT NULL DEFAULT 0,"
         " check_tokens BIGINT NOT NULL DEFAULT 0)",

         // Values the hub creates once and keeps (the verification seed).
         "CREATE TABLE hub_settings ("
         " name TEXT PRIMARY KEY,"
         " value TEXT NOT NULL)",
     }},
    {"reserved slots and their probes per day",
     {
         // One slot per (node, model); a lost slot stays lost.
         "CREATE TABLE slots ("
         " id {id},"
         " node_id TEXT NOT NULL,"
         " model TEXT NOT NULL,"
         " begin_minute INTEGER NOT NULL CHECK (begin_minute BETWEEN 0 AND 1439),"
         " end_minute INTEGER NOT NULL CHECK (end_minute BETWEEN 1 AND 1440),"
         " state TEXT NOT NULL CHECK (state IN ('active', 'lost')),"
         " created_ms BIGINT NOT NULL,"
         " lost_ms BIGINT NOT NULL DEFAULT 0,"
         " lost_reason TEXT NOT NULL DEFAULT '',"
         " UNIQUE (node_id, model))",
         // A row per slot and UTC day: 30 rows give a slot's rolling availability.
         "CREATE TABLE slot_days ("
         " slot_id BIGINT NOT NULL REFERENCES slots (id),"
         " day BIGINT NOT NULL,"
         " probes BIGINT NOT NULL,"
         " answered BIGINT NOT NULL,"
         " PRIMARY KEY (slot_id, day))",
     }},
    {"node sessions (connection history) and attempts by their end, for the world page",
     {
         // One row per connection of a node, from its register to its close.  `open` rows are
         // this hub run's live connections; until_ms of an open row is moved forward every minute
         // (ExtendNodeSessions), so that one left open by a hub that died ends near its death.
         "CREATE TABLE node_sessions ("
         " id {id},"
         " node_id TEXT NOT NULL,"
         " connected_ms BIGINT NOT NULL,"
         " until_ms BIGINT NOT NULL,"
         " open INTEGER NOT NULL DEFAULT 1)",
         "CREATE INDEX node_sessions_by_until ON node_sessions (until_ms)",
         "CREATE INDEX node_sessions_open ON node_sessions (node_id) WHERE open = 1",
         "CREATE INDEX attempts_by_finished ON attempts (finished_ms)",
     }},
    {"operator accounts: the account an enrolment token gives its node, and the node's",
     {
         // 0 is nobody (nodes enrolled before, or by a token without an account), so these are
         // not foreign keys; the store checks the account when it writes one.
         "ALTER TABLE enroll_tokens ADD COLUMN account_id BIGINT NOT NULL DEFAULT 0",
         "ALTER TABLE nodes ADD COLUMN account_id BIGINT NOT NULL DEFAULT 0",
         "CREATE INDEX nodes_by_account ON nodes (account_id)",
     }},
};

constexpr std::string_view kCreateVersionTable =
    "CREATE TABLE IF NOT EXISTS schema_version ("
    " version BIGINT PRIMARY KEY,"
    " description TEXT NOT NULL,"
    " applied_ms BIGINT NOT NULL)";

// Applies the next migration `conn`'s database lacks; sets *done when there is none.
Status MigrateOnce(SqlConnection& conn, std::span<const Migration> migrations, bool* done) {
  Transaction tx(conn);
  LOOM_RETURN_IF_ERROR(tx.Begin());
  LOOM_RETURN_IF_ERROR(conn.LockForMigration());
  auto created = ExecPlain(conn, kCreateVersionTable);
  if (!created.ok()) return created.status().WithContext("create schema_version");
  // Read under the lock: another hub may have migrated while this one waited for it.
  LOOM_ASSIGN_OR_RETURN(const int64_t version, ReadSchemaVersion(conn));
  const int64_t known = static_cast<int64_t>(migrations.size());
  if (version > known) {
    return FailedPreconditionError("the database has schema version ", version,
                                   " but this build knows only ", known,
                                   " migrations (was it written by a newer hub?)");
  }
  if (version == known) {
    *done = true;
    return tx.Commit();
  }
  const Migration& m = migrations[version];
  const int64_t number = version + 1;
  const std::string context = StrCat("migration ", number, " (", m.description, ")");
  for (size_t i = 0; i < m.statements.size(); ++i) {
    const std::string statement = StatementFor(m.statements[i], conn.dialect());
    if (statement.empty()) continue;  // the other engine's
    auto r = ExecPlain(conn, statement);
    if (!r.ok()) return r.status().WithContext(StrCat(context, ": statement ", i + 1));
  }
  const SqlParam params[] = {number, m.description, base::UnixMillis()};
  auto r = conn.Exec(
      "INSERT INTO schema_version (version, description, applied_ms) VALUES ($1, $2, $3)", params);
  if (!r.ok()) return r.status().WithContext(StrCat(context, ": record version"));
  Status committed = tx.Commit();
  return committed.WithContext(context);
}

}  // namespace

std::span<const Migration> Migrations() { return kMigrations; }

std::string StatementFor(std::string_view statement, Dialect dialect) {
  // AUTOINCREMENT makes SQLite, like a PostgreSQL identity column, never reuse the id of a
  // deleted row: an id that once named an account keeps naming only that account.
  const std::string_view id = dialect == Dialect::kSqlite
                                  ? "INTEGER PRIMARY KEY AUTOINCREMENT"
                                  : "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY";
  for (const auto& [prefix, only] :
       {std::pair<std::string_view, Dialect>{"{sqlite}", Dialect::kSqlite},
        {"{postgresql}", Dialect::kPostgres}}) {
    if (statement.substr(0, prefix.size()) != prefix) continue;
    if (dialect != only) return "";
    statement.remove_prefix(prefix.size());
  }
  constexpr std::string_view kToken = "{id}";
  std::string out(statement);
  for (size_t at = out.find(kToken); at != std::string::npos; at = out.find(kToken, at)) {
    out.replace(at, kToken.size(), id);
    at += id.size();
  }
  return out;
}

StatusOr<int64_t> ReadSchemaVersion(SqlConnection& conn) {
  auto r = ExecPlain(conn, "SELECT COALESCE(MAX(version), 0) FROM schema_version");
  if (!r.ok()) return r.status().WithContext("read schema version");
  if (r->rows.size() != 1) return DataLossError("read schema version: no row");
  RowReader row(r->rows[0]);
  const int64_t version = row.Int(0);
  if (!row.status().ok()) return row.status().WithContext("read schema version");
  return version;
}

Status Migrate(SqlConnection& conn, std::span<const Migration> migrations) {
  for (bool done = false; !done;) {
    LOOM_RETURN_IF_ERROR(MigrateOnce(conn, migrations, &done).WithContext("migrate"));
  }
  return OkStatus();
}

}  // namespace loom::network::store
