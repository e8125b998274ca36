#include "loom/network/store/sql_store.h"

#include <algorithm>

#include "loom/network/store/schema.h"

namespace loom::network::store {
namespace {

// Column lists shared by the SELECTs and the decoders below, which read them in this order.
#define LOOM_ACCOUNT_COLUMNS "id, name, created_ms"
#define LOOM_KEY_COLUMNS "id, account_id, prefix, created_ms, revoked"
#define LOOM_JOB_COLUMNS                                                                 \
  "job_id, account_id, model, endpoint, state, created_ms, finished_ms, prompt_tokens, " \
  "completion_tokens, finish_reason, error"
#define LOOM_ATTEMPT_COLUMNS                                                              \
  "attempt_id, job_id, node_id, number, state, started_ms, first_token_ms, finished_ms, " \
  "tokens, error"

using Row = std::vector<std::string>;

StatusOr<Account> DecodeAccount(const Row& row) {
  RowReader r(row);
  Account a{r.Int(0), r.Text(1), r.Int(2)};
  if (!r.status().ok()) return r.status();
  return a;
}

StatusOr<ApiKeyRecord> DecodeKey(const Row& row) {
  RowReader r(row);
  ApiKeyRecord k{r.Int(0), r.Int(1), r.Text(2), r.Int(3), r.Int(4) != 0};
  if (!r.status().ok()) return r.status();
  return k;
}

StatusOr<JobRecord> DecodeJob(const Row& row) {
  RowReader r(row);
  JobRecord j;
  j.job_id = r.Text(0);
  j.account_id = r.Int(1);
  j.model = r.Text(2);
  j.endpoint = r.Text(3);
  const std::string state = r.Text(4);
  j.created_ms = r.Int(5);
  j.finished_ms = r.Int(6);
  j.prompt_tokens = r.Int(7);
  j.completion_tokens = r.Int(8);
  j.finish_reason = r.Text(9);
  j.error = r.Text(10);
  if (!r.status().ok()) return r.status();
  const std::optional<JobState> parsed = ParseJobState(state);
  if (!parsed) return DataLossError("job ", Quoted(j.job_id), " has unknown state ", Quoted(state));
  j.state = *parsed;
  return j;
}

StatusOr<AttemptRecord> DecodeAttempt(const Row& row) {
  RowReader r(row);
  AttemptRecord a;
  a.attempt_id = r.Text(0);
  a.job_id = r.Text(1);
  a.node_id = r.Text(2);
  const int64_t number = r.Int(3);
  const std::string state = r.Text(4);
  a.started_ms = r.Int(5);
  a.first_token_ms = r.Int(6);
  a.finished_ms = r.Int(7);
  a.tokens = r.Int(8);
  a.error = r.Text(9);
  if (!r.status().ok()) return r.status();
  if (number < INT32_MIN || number > INT32_MAX) {
    return DataLossError("attempt ", Quoted(a.attempt_id), " has number ", number,
                         " beyond 32 bits");
  }
  a.number = static_cast<int32_t>(number);
  const std::optional<AttemptState> parsed = ParseAttemptState(state);
  if (!parsed)
    return DataLossError("attempt ", Quoted(a.attempt_id), " has unknown state ", Quoted(state));
  a.state = *parsed;
  return a;
}

template <class T, class Decode>
StatusOr<std::optional<T>> DecodeOptional(std::string_view op, const SqlResult& result,
                                          Decode decode) {
  if (result.rows.empty()) return std::optional<T>();
  auto item = decode(result.rows[0]);
  if (!item.ok()) return item.status().WithContext(StrCat("store: ", op));
  return std::optional<T>(std::move(item).value());
}

}  // namespace

StatusOr<NodeRecord> DecodeNode(const std::vector<std::string>& row) {
  RowReader r(row);
  NodeRecord n{r.Text(0), r.Text(1), r.Text(2), r.Int(3), r.Int(4), r.Int(5)};
  if (!r.status().ok()) return r.status();
  return n;
}

std::string_view SqlStore::Kind() const {
  return conn_->dialect() == Dialect::kSqlite ? "sqlite" : "postgresql";
}

StatusOr<SqlResult> SqlStore::Run(std::string_view op, std::string_view sql,
                                  std::initializer_list<SqlParam> params) {
  return Run(op, sql, std::span<const SqlParam>(params.begin(), params.size()));
}

StatusOr<SqlResult> SqlStore::Run(std::string_view op, std::string_view sql,
                                  std::span<const SqlParam> params) {
  for (const SqlParam& p : params) {
    if (const auto* text = std::get_if<std::string_view>(&p)) {
      Status checked = CheckText(*text);
      if (!checked.ok()) return checked.WithContext(StrCat("store: ", op));
    }
  }
  auto result = conn_->Exec(sql, params);
  if (!result.ok()) return result.status().WithContext(StrCat("store: ", op));
  return result;
}

// ---- accounts and keys ----

StatusOr<Account> SqlStore::CreateAccount(std::string_view name, int64_t now_ms) {
  const std::string op = StrCat("create account ", Quoted(name));
  if (name.empty()) return InvalidArgumentError("store: ", op, ": the name is empty");
  // DO NOTHING + RETURNING tells a duplicate from success without parsing engine errors.
  LOOM_ASSIGN_OR_RETURN(SqlResult r, Run(op,
                                         "INSERT INTO accounts (name, created_ms) VALUES ($1, $2) "
                                         "ON CONFLICT (name) DO NOTHING RETURNING id",
                                         {name, now_ms}));
  if (r.rows.empty()) {
    return FailedPreconditionError("store: ", op, ": account ", Quoted(name), " already exists");
  }
  RowReader row(r.rows[0]);
  Account account{row.Int(0), std::string(name), now_ms};
  if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
  return account;
}

StatusOr<Account> SqlStore::FindAccount(std::string_view name) {
  const std::string op = StrCat("find account ", Quoted(name));
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op, "SELECT " LOOM_ACCOUNT_COLUMNS " FROM accounts WHERE name = $1", {name}));
  LOOM_ASSIGN_OR_RETURN(std::optional<Account> account,
                        DecodeOptional<Account>(op, r, DecodeAccount));
  if (!account) return NotFoundError("store: ", op, ": no such account");
  return std::move(*account);
}

StatusOr<std::vector<Account>> SqlStore::ListAccounts() {
  constexpr std::string_view op = "list accounts";
  LOOM_ASSIGN_OR_RETURN(SqlResult r,
                        Run(op, "SELECT " LOOM_ACCOUNT_COLUMNS " FROM accounts ORDER BY id", {}));
  return DecodeAll<Account>(op, r, DecodeAccount);
}

StatusOr<ApiKeyRecord> SqlStore::AddApiKey(int64_t account_id, std::string_view key_hash,
                                           std::string_view prefix, int64_t now_ms) {
  const std::string op = StrCat("add API key ", Quoted(prefix), " to account ", account_id);
  if (key_hash.empty() || prefix.empty()) {
    return InvalidArgumentError("store: ", op, ": the key hash and prefix must not be empty");
  }
  auto r = Run(op,
               "INSERT INTO api_keys (account_id, key_hash, prefix, created_ms) "
               "VALUES ($1, $2, $3, $4) RETURNING id",
               {account_id, key_hash, prefix, now_ms});
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kNotFound) {  // the foreign key to accounts
      return NotFoundError("store: ", op, ": account ", account_id, " does not exist");
    }
    return r.status();
  }
  if (r->rows.empty()) return InternalError("store: ", op, ": INSERT returned no id");
  RowReader row(r->rows[0]);
  ApiKeyRecord key{row.Int(0), account_id, std::string(prefix), now_ms, false};
  if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
  return key;
}

StatusOr<std::optional<int64_t>> SqlStore::AccountForKey(std::string_view key_hash) {
  // The hash is left out of the message: logs need not carry even a hashed credential.
  constexpr std::string_view op = "look up API key by hash";
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op, "SELECT account_id FROM api_keys WHERE key_hash = $1 AND revoked = 0", {key_hash}));
  if (r.rows.empty()) return std::optional<int64_t>();
  RowReader row(r.rows[0]);
  const int64_t id = row.Int(0);
  if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
  return std::optional<int64_t>(id);
}

Status SqlStore::RevokeApiKey(std::string_view prefix) {
  const std::string op = StrCat("revoke API key ", Quoted(prefix));
  LOOM_ASSIGN_OR_RETURN(SqlResult r,
                        Run(op, "UPDATE api_keys SET revoked = 1 WHERE prefix = $1", {prefix}));
  if (r.affected == 0) return NotFoundError("store: ", op, ": no key has this prefix");
  return OkStatus();
}

StatusOr<std::vector<ApiKeyRecord>> SqlStore::ListApiKeys(int64_t account_id) {
  const std::string op = StrCat("list API keys of account ", account_id);
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op, "SELECT " LOOM_KEY_COLUMNS " FROM api_keys WHERE account_id = $1 ORDER BY id",
          {account_id}));
  return DecodeAll<ApiKeyRecord>(op, r, DecodeKey);
}

// ---- enrolment and nodes ----

Status SqlStore::AddEnrollToken(std::string_view token_hash, int64_t expires_ms, int64_t now_ms,
                                int64_t account_id) {
  constexpr std::string_view op = "add enrolment token";
  if (token_hash.empty()) return InvalidArgumentError("store: ", op, ": the token hash is empty");
  if (account_id != 0) LOOM_RETURN_IF_ERROR(FindAccountById(account_id).status());
  LOOM_ASSIGN_OR_RETURN(SqlResult r,
                        Run(op,
                            "INSERT INTO enroll_tokens (token_hash, created_ms, expires_ms, "
                            "account_id) VALUES ($1, $2, $3, $4) "
                            "ON CONFLICT (token_hash) DO NOTHING",
                            {token_hash, now_ms, expires_ms, account_id}));
  if (r.affected == 0) {
    return FailedPreconditionError("store: ", op, ": a token with this hash already exists");
  }
  return OkStatus();
}

StatusOr<bool> SqlStore::UseEnrollToken(std::string_view token_hash, std::string_view node_id,
                                        int64_t now_ms) {
  const std::string op = StrCat("use enrolment token for node ", Quoted(node_id));
  // One conditional UPDATE is the atomic check-and-mark: of two hubs racing for a token, only
  // one sees a changed row.
  LOOM_ASSIGN_OR_RETURN(SqlResult r,
                        Run(op,
                            "UPDATE enroll_tokens SET used = 1, used_ms = $3, used_by = $2 "
                            "WHERE token_hash = $1 AND used = 0 AND expires_ms > $3",
                            {token_hash, node_id, now_ms}));
  return r.affected == 1;
}

Status SqlStore::AddNode(const NodeRecord& node) {
  const std::string op = StrCat("add node ", Quoted(node.node_id));
  if (node.node_id.empty()) return InvalidArgumentError("store: ", op, ": the node id is empty");
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op,
          "INSERT INTO nodes (" LOOM_NODE_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6) "
          "ON CONFLICT (node_id) DO NOTHING",
          {node.node_id, node.name, node.public_key, node.enrolled_ms, node.last_seen_ms,
           node.account_id}));
  if (r.affected == 0) {
    return FailedPreconditionError("store: ", op, ": node ", Quoted(node.node_id),
                                   " already exists");
  }
  return OkStatus();
}

StatusOr<std::optional<NodeRecord>> SqlStore::FindNode(std::string_view node_id) {
  const std::string op = StrCat("find node ", Quoted(node_id));
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op, "SELECT " LOOM_NODE_COLUMNS " FROM nodes WHERE node_id = $1", {node_id}));
  return DecodeOptional<NodeRecord>(op, r, DecodeNode);
}

StatusOr<std::vector<NodeRecord>> SqlStore::ListNodes() {
  constexpr std::string_view op = "list nodes";
  LOOM_ASSIGN_OR_RETURN(SqlResult r,
                        Run(op, "SELECT " LOOM_NODE_COLUMNS " FROM nodes ORDER BY node_id", {}));
  return DecodeAll<NodeRecord>(op, r, DecodeNode);
}

Status SqlStore::TouchNode(std::string_view node_id, int64_t last_seen_ms) {
  const std::string op = StrCat("touch node ", Quoted(node_id));
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op, "UPDATE nodes SET last_seen_ms = $2 WHERE node_id = $1", {node_id, last_seen_ms}));
  if (r.affected == 0) return NotFoundError("store: ", op, ": no such node");
  return OkStatus();
}

// ---- node sessions and the world page's history ----

Status SqlStore::OpenNodeSession(std::string_view node_id, int64_t now_ms) {
  const std::string op = StrCat("open session of node ", Quoted(node_id));
  Transaction tx(*conn_);
  Status begun = tx.Begin();
  if (!begun.ok()) return begun.WithContext(StrCat("store: ", op));
  LOOM_RETURN_IF_ERROR(Run(op,
                           "UPDATE node_sessions SET open = 0, until_ms = $2 "
                           "WHERE node_id = $1 AND open = 1",
                           {node_id, now_ms})
                           .status());
  LOOM_RETURN_IF_ERROR(Run(op,
                           "INSERT INTO node_sessions (node_id, connected_ms, until_ms, open) "
                           "VALUES ($1, $2, $2, 1)",
                           {node_id, now_ms})
                           .status());
  return tx.Commit().WithContext(StrCat("store: ", op));
}

Status SqlStore::CloseNodeSession(std::string_view node_id, int64_t now_ms) {
  return Run(StrCat("close session of node ", Quoted(node_id)),
             "UPDATE node_sessions SET open = 0, until_ms = $2 WHERE node_id = $1 AND open = 1",
             {node_id, now_ms})
      .status();
}

Status SqlStore::ExtendNodeSessions(int64_t now_ms) {
  return Run("extend node sessions", "UPDATE node_sessions SET until_ms = $1 WHERE open = 1",
             {now_ms})
      .status();
}

StatusOr<int64_t> SqlStore::CloseStaleNodeSessions() {
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run("close stale node sessions", "UPDATE node_sessions SET open = 0 WHERE open = 1", {}));
  return r.affected;
}

StatusOr<std::vector<Store::NodeActivity>> SqlStore::NodeActivitySince(int64_t since_ms,
                                                                       int64_t now_ms) {
  constexpr std::string_view op = "node activity";
  // Each session's overlap with [since, now]; an open one lasts until now.  (CASE rather than
  // LEAST/GREATEST or MIN/MAX of two values: the engines spell those differently.)
  LOOM_ASSIGN_OR_RETURN(
      SqlResult sessions,
      Run(op,
          "SELECT node_id, CAST(SUM("
          " (CASE WHEN open = 1 OR until_ms > $2 THEN $2 ELSE until_ms END) -"
          " (CASE WHEN connected_ms < $1 THEN $1 ELSE connected_ms END)) AS BIGINT) "
          "FROM node_sessions WHERE (open = 1 OR until_ms > $1) AND connected_ms < $2 "
          "GROUP BY node_id ORDER BY node_id",
          {since_ms, now_ms}));
  LOOM_ASSIGN_OR_RETURN(
      SqlResult tokens,
      Run(op,
          "SELECT node_id, CAST(SUM(tokens) AS BIGINT) FROM attempts "
          "WHERE finished_ms >= $1 AND finished_ms <= $2 AND state != 'running' "
          "GROUP BY node_id ORDER BY node_id",
          {since_ms, now_ms}));
  // Merge the two lists, both ordered by node_id.
  std::vector<NodeActivity> out;
  size_t i = 0, j = 0;
  while (i < sessions.rows.size() || j < tokens.rows.size()) {
    RowReader a(i < sessions.rows.size() ? sessions.rows[i] : tokens.rows[j]);
    RowReader b(j < tokens.rows.size() ? tokens.rows[j] : sessions.rows[i]);
    const std::string na = a.Text(0), nb = b.Text(0);
    NodeActivity n;
    if (j >= tokens.rows.size() || (i < sessions.rows.size() && na < nb)) {
      n = {na, std::max<int64_t>(0, a.Int(1)), 0};
      ++i;
    } else if (i >= sessions.rows.size() || nb < na) {
      n = {nb, 0, b.Int(1)};
      ++j;
    } else {
      n = {na, std::max<int64_t>(0, a.Int(1)), b.Int(1)};
      ++i, ++j;
    }
    if (!a.status().ok()) return a.status().WithContext(StrCat("store: ", op));
    if (!b.status().ok()) return b.status().WithContext(StrCat("store: ", op));
    out.push_back(std::move(n));
  }
  return out;
}

StatusOr<int64_t> SqlStore::TokensSince(int64_t since_ms) {
  constexpr std::string_view op = "tokens since";
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op, "SELECT CAST(COALESCE(SUM(tokens), 0) AS BIGINT) FROM attempts "
          "WHERE finished_ms >= $1 AND state != 'running'",
          {since_ms}));
  if (r.rows.size() != 1) return DataLossError("store: ", op, ": no row");
  RowReader row(r.rows[0]);
  const int64_t n = row.Int(0);
  if (!row.status().ok()) return row.status().WithContext(StrCat("store: ", op));
  return n;
}

StatusOr<std::vector<Store::ModelCount>> SqlStore::RequestsSince(int64_t since_ms) {
  constexpr std::string_view op = "requests since";
  LOOM_ASSIGN_OR_RETURN(SqlResult r,
                        Run(op,
                            "SELECT model, COUNT(*) FROM jobs WHERE created_ms >= $1 "
                            "GROUP BY model ORDER BY model",
                            {since_ms}));
  std::vector<ModelCount> out;
  for (const Row& row : r.rows) {
    RowReader rr(row);
    ModelCount m{rr.Text(0), rr.Int(1)};
    if (!rr.status().ok()) return rr.status().WithContext(StrCat("store: ", op));
    out.push_back(std::move(m));
  }
  return out;
}

// ---- jobs and attempts ----

Status SqlStore::CreateJob(const JobRecord& job, const LedgerTx* reserve,
                           const AttemptRecord* first) {
  if (reserve == nullptr && first == nullptr) return InsertJob(job);
  const std::string op = StrCat("create job ", Quoted(job.job_id), " with its ",
                                reserve ? "reservation" : "", reserve && first ? " and " : "",
                                first ? "first attempt" : "");
  if (reserve != nullptr && (reserve->kind != "reserve" || reserve->ref != job.job_id)) {
    return InvalidArgumentError("store: ", op, ": the transaction is not this job's reservation");
  }
  if (first != nullptr && first->job_id != job.job_id) {
    return InvalidArgumentError("store: ", op, ": the attempt is of job ", Quoted(first->job_id));
  }
  Transaction tx(*conn_);
  Status begun = tx.Begin();
  if (!begun.ok()) return begun.WithContext(StrCat("store: ", op));
  LOOM_RETURN_IF_ERROR(InsertJob(job));
  if (reserve != nullptr) LOOM_RETURN_IF_ERROR(PostIn(*reserve).status());
  if (first != nullptr) LOOM_RETURN_IF_ERROR(AddAttempt(*first));
  return tx.Commit().WithContext(StrCat("store: ", op));
}

Status SqlStore::InsertJob(const JobRecord& job) {
  const std::string op = StrCat("create job ", Quoted(job.job_id));
  if (job.job_id.empty()) return InvalidArgumentError("store: ", op, ": the job id is empty");
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op,
          "INSERT INTO jobs (" LOOM_JOB_COLUMNS ") "
          "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (job_id) DO NOTHING",
          {job.job_id, job.account_id, job.model, job.endpoint, JobStateName(job.state),
           job.created_ms, job.finished_ms, job.prompt_tokens, job.completion_tokens,
           job.finish_reason, job.error}));
  if (r.affected == 0) {
    return FailedPreconditionError("store: ", op, ": job ", Quoted(job.job_id), " already exists");
  }
  return OkStatus();
}

Status SqlStore::FinishJob(std::string_view job_id, JobState state, int64_t finished_ms,
                           int64_t prompt_tokens, int64_t completion_tokens,
                           std::string_view finish_reason, std::string_view error,
                           const LedgerTx* settle, const AttemptEnd* last) {
  if (settle == nullptr && last == nullptr) {
    return UpdateJobEnd(job_id, state, finished_ms, prompt_tokens, completion_tokens,
                        finish_reason, error);
  }
  const std::string op = StrCat("finish job ", Quoted(job_id), " with ",
                                last ? "its last attempt" : "", settle && last ? " and " : "",
                                settle ? "its settlement" : "");
  if (settle != nullptr && (settle->kind != "settle" || settle->ref != job_id)) {
    return InvalidArgumentError("store: ", op, ": the transaction is not this job's settlement");
  }
  Transaction tx(*conn_);
  Status begun = tx.Begin();
  if (!begun.ok()) return begun.WithContext(StrCat("store: ", op));
  if (last != nullptr) {
    LOOM_RETURN_IF_ERROR(FinishAttempt(last->attempt_id, last->state, last->first_token_ms,
                                       last->finished_ms, last->tokens, last->error));
  }
  LOOM_RETURN_IF_ERROR(UpdateJobEnd(job_id, state, finished_ms, prompt_tokens, completion_tokens,
                                    finish_reason, error));
  if (settle != nullptr) LOOM_RETURN_IF_ERROR(PostIn(*settle).status());
  return tx.Commit().WithContext(StrCat("store: ", op));
}

Status SqlStore::UpdateJobEnd(std::string_view job_id, JobState state, int64_t finished_ms,
                              int64_t prompt_tokens, int64_t completion_tokens,
                              std::string_view finish_reason, std::string_view error) {
  const std::string op = StrCat("finish job ", Quoted(job_id), " as ", JobStateName(state));
  if (state == JobState::kRunning) {
    return InvalidArgumentError("store: ", op, ": a finished job cannot be running");
  }
  // Only a running job changes, so a late duplicate cannot overwrite the recorded outcome.
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r, Run(op,
                       "UPDATE jobs SET state = $2, finished_ms = $3, prompt_tokens = $4, "
                       "completion_tokens = $5, finish_reason = $6, error = $7 "
                       "WHERE job_id = $1 AND state = 'running'",
                       {job_id, JobStateName(state), finished_ms, prompt_tokens, completion_tokens,
                        finish_reason, error}));
  if (r.affected == 1) return OkStatus();
  LOOM_ASSIGN_OR_RETURN(SqlResult found,
                        Run(op, "SELECT state FROM jobs WHERE job_id = $1", {job_id}));
  if (found.rows.empty()) return NotFoundError("store: ", op, ": no such job");
  return FailedPreconditionError("store: ", op, ": the job already finished as ",
                                 found.rows[0].empty() ? "" : found.rows[0][0]);
}

Status SqlStore::AddAttempt(const AttemptRecord& a) {
  const std::string op = StrCat("add attempt ", Quoted(a.attempt_id), " of job ", Quoted(a.job_id));
  if (a.attempt_id.empty()) {
    return InvalidArgumentError("store: ", op, ": the attempt id is empty");
  }
  auto r = Run(op,
               "INSERT INTO attempts (" LOOM_ATTEMPT_COLUMNS
               ") "
               "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
               {a.attempt_id, a.job_id, a.node_id, int64_t{a.number}, AttemptStateName(a.state),
                a.started_ms, a.first_token_ms, a.finished_ms, a.tokens, a.error});
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kNotFound) {  // the foreign key to jobs
      return NotFoundError("store: ", op, ": job ", Quoted(a.job_id), " does not exist");
    }
    return r.status();
  }
  return OkStatus();
}

Status SqlStore::FinishAttempt(std::string_view attempt_id, AttemptState state,
                               int64_t first_token_ms, int64_t finished_ms, int64_t tokens,
                               std::string_view error) {
  const std::string op =
      StrCat("finish attempt ", Quoted(attempt_id), " as ", AttemptStateName(state));
  if (state == AttemptState::kRunning) {
    return InvalidArgumentError("store: ", op, ": a finished attempt cannot be running");
  }
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op,
          "UPDATE attempts SET state = $2, first_token_ms = $3, finished_ms = $4, tokens = $5, "
          "error = $6 WHERE attempt_id = $1 AND state = 'running'",
          {attempt_id, AttemptStateName(state), first_token_ms, finished_ms, tokens, error}));
  if (r.affected == 1) return OkStatus();
  LOOM_ASSIGN_OR_RETURN(SqlResult found,
                        Run(op, "SELECT state FROM attempts WHERE attempt_id = $1", {attempt_id}));
  if (found.rows.empty()) return NotFoundError("store: ", op, ": no such attempt");
  return FailedPreconditionError("store: ", op, ": the attempt already finished as ",
                                 found.rows[0].empty() ? "" : found.rows[0][0]);
}

StatusOr<std::optional<JobRecord>> SqlStore::FindJob(std::string_view job_id) {
  const std::string op = StrCat("find job ", Quoted(job_id));
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r, Run(op, "SELECT " LOOM_JOB_COLUMNS " FROM jobs WHERE job_id = $1", {job_id}));
  return DecodeOptional<JobRecord>(op, r, DecodeJob);
}

StatusOr<std::vector<JobRecord>> SqlStore::ListJobs(int64_t limit, std::optional<JobState> state) {
  const std::string op =
      StrCat("list ", limit, " jobs", state ? StrCat(" in state ", JobStateName(*state)) : "");
  if (limit <= 0) return InvalidArgumentError("store: ", op, ": the limit must be positive");
  StatusOr<SqlResult> r = state ? Run(op,
                                      "SELECT " LOOM_JOB_COLUMNS
                                      " FROM jobs WHERE state = $1 "
                                      "ORDER BY created_ms DESC, job_id DESC LIMIT $2",
                                      {JobStateName(*state), limit})
                                : Run(op,
                                      "SELECT " LOOM_JOB_COLUMNS
                                      " FROM jobs "
                                      "ORDER BY created_ms DESC, job_id DESC LIMIT $1",
                                      {limit});
  if (!r.ok()) return r.status();
  return DecodeAll<JobRecord>(op, *r, DecodeJob);
}

StatusOr<std::vector<AttemptRecord>> SqlStore::AttemptsOf(std::string_view job_id) {
  const std::string op = StrCat("list attempts of job ", Quoted(job_id));
  LOOM_ASSIGN_OR_RETURN(
      SqlResult r,
      Run(op, "SELECT " LOOM_ATTEMPT_COLUMNS " FROM attempts WHERE job_id = $1 ORDER BY number",
          {job_id}));
  return DecodeAll<AttemptRecord>(op, r, DecodeAttempt);
}

StatusOr<int64_t> SqlStore::FailUnfinishedJobs(std::string_view error, int64_t now_ms) {
  constexpr std::string_view op = "fail unfinished jobs";
  // One transaction: a crash half-way must not leave failed jobs with running attempts.
  Transaction tx(*conn_);
  Status begun = tx.Begin();
  if (!begun.ok()) return begun.WithContext(StrCat("store: ", op));
  LOOM_RETURN_IF_ERROR(ReturnHoldsOfRunningJobs(error, now_ms));
  LOOM_ASSIGN_OR_RETURN(SqlResult attempts,
                        Run(op,
                            "UPDATE attempts SET state = 'failed', finished_ms = $2, error = $1 "
                            "WHERE state = 'running'",
                            {error, now_ms}));
  LOOM_ASSIGN_OR_RETURN(SqlResult jobs,
                        Run(op,
                            "UPDATE jobs SET state = 'failed', finished_ms = $2, error = $1 "
                            "WHERE state = 'running'",
                            {error, now_ms}));
  Status committed = tx.Commit();
  if (!committed.ok()) return committed.WithContext(StrCat("store: ", op));
  return jobs.affected;
}

StatusOr<int64_t> SqlStore::SchemaVersion() {
  auto version = ReadSchemaVersion(*conn_);
  if (!version.ok()) return version.status().WithContext("store");
  return version;
}

StatusOr<std::unique_ptr<Store>> OpenSqlStore(std::unique_ptr<SqlConnection> conn) {
  LOOM_RETURN_IF_ERROR(Migrate(*conn, Migrations()));
  return std::unique_ptr<Store>(std::make_unique<SqlStore>(std::move(conn)));
}

}  // namespace loom::network::store
