// The Store written once in SQL over a SqlConnection; the SQLite and PostgreSQL stores are this
// class over their own connection.
#pragma once

#include <initializer_list>
#include <memory>
#include <span>

#include "loom/network/store/sql.h"
#include "loom/network/store/store.h"

namespace loom::network::store {

// The columns of a node row, in the order DecodeNode reads them (sql_store.cc, sql_accounts.cc).
#define LOOM_NODE_COLUMNS "node_id, name, public_key, enrolled_ms, last_seen_ms, account_id"
StatusOr<NodeRecord> DecodeNode(const std::vector<std::string>& row);

class SqlStore final : public Store {
 public:
  explicit SqlStore(std::unique_ptr<SqlConnection> conn) : conn_(std::move(conn)) {}

  std::string_view Kind() const override;
  StatusOr<Account> CreateAccount(std::string_view name, int64_t now_ms) override;
  StatusOr<Account> FindAccount(std::string_view name) override;
  StatusOr<std::vector<Account>> ListAccounts() override;
  StatusOr<ApiKeyRecord> AddApiKey(int64_t account_id, std::string_view key_hash,
                                   std::string_view prefix, int64_t now_ms) override;
  StatusOr<std::optional<int64_t>> AccountForKey(std::string_view key_hash) override;
  Status RevokeApiKey(std::string_view prefix) override;
  StatusOr<std::vector<ApiKeyRecord>> ListApiKeys(int64_t account_id) override;
  Status AddEnrollToken(std::string_view token_hash, int64_t expires_ms, int64_t now_ms,
                        int64_t account_id) override;
  StatusOr<int64_t> EnrollTokenAccount(std::string_view token_hash) override;
  StatusOr<bool> UseEnrollToken(std::string_view token_hash, std::string_view node_id,
                                int64_t now_ms) override;
  Status AddNode(const NodeRecord& node) override;
  StatusOr<std::optional<NodeRecord>> FindNode(std::string_view node_id) override;
  StatusOr<std::vector<NodeRecord>> ListNodes() override;
  Status TouchNode(std::string_view node_id, int64_t last_seen_ms) override;
  StatusOr<std::vector<NodeRecord>> NodesOfAccount(int64_t account_id) override;
  Status AssignNode(std::string_view node_id, int64_t account_id) override;
  StatusOr<Account> FindAccountById(int64_t account_id) override;
  StatusOr<std::vector<NodeEarning>> NodeEarnings(std::string_view node_id,
                                                  int64_t limit) override;
  Status OpenNodeSession(std::string_view node_id, int64_t now_ms) override;
  Status CloseNodeSession(std::string_view node_id, int64_t now_ms) override;
  Status ExtendNodeSessions(int64_t now_ms) override;
  StatusOr<int64_t> CloseStaleNodeSessions() override;
  StatusOr<std::vector<NodeActivity>> NodeActivitySince(int64_t since_ms, int64_t now_ms) override;
  StatusOr<int64_t> TokensSince(int64_t since_ms) override;
  StatusOr<std::vector<ModelCount>> RequestsSince(int64_t since_ms) override;
  Status CreateJob(const JobRecord& job, const LedgerTx* reserve,
                   const AttemptRecord* first) override;
  Status FinishJob(std::string_view job_id, JobState state, int64_t finished_ms,
                   int64_t prompt_tokens, int64_t completion_tokens, std::string_view finish_reason,
                   std::string_view error, const LedgerTx* settle,
                   const AttemptEnd* last) override;
  Status AddAttempt(const AttemptRecord& attempt) override;
  Status FinishAttempt(std::string_view attempt_id, AttemptState state, int64_t first_token_ms,
                       int64_t finished_ms, int64_t tokens, std::string_view error) override;
  StatusOr<std::optional<JobRecord>> FindJob(std::string_view job_id) override;
  StatusOr<std::vector<JobRecord>> ListJobs(int64_t limit, std::optional<JobState> state) override;
  StatusOr<std::vector<AttemptRecord>> AttemptsOf(std::string_view job_id) override;
  StatusOr<int64_t> FailUnfinishedJobs(std::string_view error, int64_t now_ms) override;
  StatusOr<int64_t> Post(const LedgerTx& tx) override;
  StatusOr<int64_t> Balance(std::string_view book) override;
  StatusOr<std::vector<LedgerTx>> BookHistory(std::string_view book, int64_t limit) override;
  StatusOr<Released> ReleasePending(int64_t settled_by_ms, int64_t now_ms, int64_t after_tx,
                                    int64_t limit) override;
  StatusOr<int64_t> VoidAttempt(std::string_view attempt_id, std::string_view to_book,
                                std::string_view memo, int64_t now_ms) override;
  StatusOr<int64_t> ForfeitPending(std::string_view node_id, std::string_view memo,
                                   int64_t now_ms) override;
  StatusOr<std::vector<std::string>> CheckLedger() override;
  StatusOr<SlotRecord> OfferSlot(const SlotRecord& offer) override;
  Status RecordProbe(int64_t slot_id, int64_t day, bool answered) override;
  StatusOr<std::vector<SlotDay>> SlotDays(int64_t slot_id, int64_t from_day) override;
  Status LoseSlot(int64_t slot_id, int64_t now_ms, std::string_view reason) override;
  StatusOr<std::vector<SlotRecord>> ListSlots() override;
  StatusOr<std::optional<NodeReputation>> FindReputation(std::string_view node_id) override;
  StatusOr<std::vector<NodeReputation>> ListReputations() override;
  Status PutReputation(const NodeReputation& reputation) override;
  StatusOr<std::string> Setting(std::string_view name, std::string_view initial) override;
  StatusOr<int64_t> SchemaVersion() override;

 private:
  // sql_ledger.cc: writes `tx` inside the caller's open write transaction.
  StatusOr<int64_t> PostIn(const LedgerTx& tx);
  // What attempt `attempt_id` still has in `book` (the sum of its lines there).
  StatusOr<int64_t> PendingOf(std::string_view attempt_id, std::string_view book);
  // Inside FailUnfinishedJobs: a settlement charging nothing for each running job's reservation.
  Status ReturnHoldsOfRunningJobs(std::string_view why, int64_t now_ms);
  // The rows of a job's (or any) CreateJob / FinishJob without a transaction of their own.
  Status InsertJob(const JobRecord& job);
  Status UpdateJobEnd(std::string_view job_id, JobState state, int64_t finished_ms,
                      int64_t prompt_tokens, int64_t completion_tokens,
                      std::string_view finish_reason, std::string_view error);

  // Runs `sql` after checking its text parameters; errors read "store: <op>: <cause>".
  StatusOr<SqlResult> Run(std::string_view op, std::string_view sql,
                          std::initializer_list<SqlParam> params);
  StatusOr<SqlResult> Run(std::string_view op, std::string_view sql,
                          std::span<const SqlParam> params);

  std::unique_ptr<SqlConnection> conn_;
};

// Brings `conn`'s database up to date (schema.h), then wraps it.
StatusOr<std::unique_ptr<Store>> OpenSqlStore(std::unique_ptr<SqlConnection> conn);

}  // namespace loom::network::store
