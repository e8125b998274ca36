// The hub's durable state (accounts, API keys, enrolment tokens, nodes, jobs and their attempts)
// behind one interface, with a SQLite and a PostgreSQL implementation.
//
// Every mutating call commits before it returns: the hub acknowledges nothing that is not yet
// written.  The live fleet (heartbeats, load) stays in the hub's memory and is not stored here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/base/status.h"

namespace loom::network::store {

struct Account {
  int64_t id = 0;
  std::string name;
  int64_t created_ms = 0;  // Unix epoch milliseconds, like every *_ms below
};

struct ApiKeyRecord {
  int64_t id = 0;
  int64_t account_id = 0;
  std::string prefix;  // short display id of the key; the key itself is never stored
  int64_t created_ms = 0;
  bool revoked = false;
};

struct NodeRecord {
  std::string node_id;
  std::string name;
  std::string public_key;
  int64_t enrolled_ms = 0;
  int64_t last_seen_ms = 0;
};

// Stored as the text 'running', 'completed', 'failed' (and 'cancelled' for attempts).
enum class JobState { kRunning, kCompleted, kFailed };
enum class AttemptState { kRunning, kCompleted, kFailed, kCancelled };

std::string_view JobStateName(JobState state);
std::string_view AttemptStateName(AttemptState state);
// The inverse of the above; nullopt for any other text.
std::optional<JobState> ParseJobState(std::string_view name);
std::optional<AttemptState> ParseAttemptState(std::string_view name);

struct JobRecord {
  std::string job_id;
  int64_t account_id = 0;
  std::string model;
  std::string endpoint;
  JobState state = JobState::kRunning;
  int64_t created_ms = 0;
  int64_t finished_ms = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::string finish_reason;
  std::string error;
};

struct AttemptRecord {
  std::string attempt_id;
  std::string job_id;
  std::string node_id;
  int32_t number = 1;  // 1 for the first try of a job, 2 for its first retry, ...
  AttemptState state = AttemptState::kRunning;
  int64_t started_ms = 0;
  int64_t first_token_ms = 0;
  int64_t finished_ms = 0;
  int64_t tokens = 0;
  std::string error;
};

// Text arguments must be UTF-8 without NUL bytes (PostgreSQL cannot store NUL in text); anything
// else is kInvalidArgument, the same on both engines.
class Store {  // not thread-safe: the hub calls it from its one loop thread
 public:
  virtual ~Store() = default;
  virtual std::string_view Kind() const = 0;  // "sqlite" or "postgresql"

  // Accounts.  Names are unique and non-empty (CreateAccount of an existing name:
  // kFailedPrecondition "account 'x' already exists").  ListAccounts is ordered by id.
  virtual StatusOr<Account> CreateAccount(std::string_view name, int64_t now_ms) = 0;
  virtual StatusOr<Account> FindAccount(std::string_view name) = 0;  // kNotFound
  virtual StatusOr<std::vector<Account>> ListAccounts() = 0;

  // API keys are stored as a hash only (the caller passes sha256 hex); prefix is a short display
  // id (unique).  A hash or prefix already stored: kFailedPrecondition.  ListApiKeys (revoked
  // ones included) is ordered by id.
  virtual StatusOr<ApiKeyRecord> AddApiKey(int64_t account_id, std::string_view key_hash,
                                           std::string_view prefix,
                                           int64_t now_ms) = 0;  // unknown account: kNotFound
  // The account id of an unrevoked key, or nullopt.
  virtual StatusOr<std::optional<int64_t>> AccountForKey(std::string_view key_hash) = 0;
  virtual Status RevokeApiKey(std::string_view prefix) = 0;  // kNotFound; revoking twice is OK
  virtual StatusOr<std::vector<ApiKeyRecord>> ListApiKeys(int64_t account_id) = 0;

  // Enrolment tokens: single use, valid while now_ms < expires_ms.  UseEnrollToken atomically
  // marks the token used by node_id and returns true; false when unknown, used or expired.
  virtual Status AddEnrollToken(std::string_view token_hash, int64_t expires_ms,
                                int64_t now_ms) = 0;  // existing hash: kFailedPrecondition
  virtual StatusOr<bool> UseEnrollToken(std::string_view token_hash, std::string_view node_id,
                                        int64_t now_ms) = 0;

  // Nodes.  ListNodes is ordered by node_id.
  virtual Status AddNode(const NodeRecord& node) = 0;  // existing node_id: kFailedPrecondition
  virtual StatusOr<std::optional<NodeRecord>> FindNode(std::string_view node_id) = 0;
  virtual StatusOr<std::vector<NodeRecord>> ListNodes() = 0;
  virtual Status TouchNode(std::string_view node_id, int64_t last_seen_ms) = 0;  // kNotFound

  // Jobs and attempts.  A job or attempt is finished once: finishing an unknown one is
  // kNotFound, finishing one that is no longer running kFailedPrecondition, and finishing to a
  // running state kInvalidArgument.  (job_id, number) is unique among attempts.
  virtual Status CreateJob(const JobRecord& job) = 0;  // duplicate id: kFailedPrecondition
  virtual Status FinishJob(std::string_view job_id, JobState state, int64_t finished_ms,
                           int64_t prompt_tokens, int64_t completion_tokens,
                           std::string_view finish_reason, std::string_view error) = 0;
  // Unknown job: kNotFound (foreign key); duplicate attempt id or number: kFailedPrecondition.
  virtual Status AddAttempt(const AttemptRecord& attempt) = 0;
  virtual Status FinishAttempt(std::string_view attempt_id, AttemptState state,
                               int64_t first_token_ms, int64_t finished_ms, int64_t tokens,
                               std::string_view error) = 0;
  virtual StatusOr<std::optional<JobRecord>> FindJob(std::string_view job_id) = 0;
  // Newest first (created_ms, then job_id, descending); at most `limit` (> 0) jobs, only those
  // in `state` when given.
  virtual StatusOr<std::vector<JobRecord>> ListJobs(int64_t limit,
                                                    std::optional<JobState> state) = 0;
  virtual StatusOr<std::vector<AttemptRecord>> AttemptsOf(
      std::string_view job_id) = 0;  // by number

  // At hub start: every running job and attempt ends as failed with `error` at now_ms, in one
  // transaction; returns the number of jobs so ended.
  virtual StatusOr<int64_t> FailUnfinishedJobs(std::string_view error, int64_t now_ms) = 0;

  // The number of the last migration applied (schema.h).
  virtual StatusOr<int64_t> SchemaVersion() = 0;
};

// "postgresql://..." or "postgres://..." (a libpq connection URI) opens PostgreSQL; anything else
// is a SQLite file path, created if missing (its directory must exist).  Both run pending
// migrations before returning.
StatusOr<std::unique_ptr<Store>> OpenStore(std::string_view url);

}  // namespace loom::network::store
