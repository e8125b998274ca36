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
  int64_t account_id = 0;  // the operator account that owns it (0: none)
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

// What the hub has learned of a node by checking its work (network/verify, docs/network.md
// "Verification").  A node without a row has never been checked: all zero.
struct NodeReputation {
  std::string node_id;
  int64_t jobs = 0;  // attempts of its that streamed tokens
  int64_t checks_passed = 0;
  int64_t checks_failed = 0;
  int64_t streak = 0;           // checks passed since the last failure
  int64_t window_start_ms = 0;  // the failure window: when its first failure was
  int64_t window_failures = 0;  // ...and the failures since
  std::string last_result;      // "", "passed" or "failed"
  int64_t last_check_ms = 0;
  bool untrusted = false;  // gets no work; its pending credit is forfeited
  int64_t untrusted_ms = 0;
  int64_t served_tokens = 0;  // prompt and completion tokens of its attempts
  int64_t check_tokens = 0;   // tokens other nodes spent checking its work
  bool operator==(const NodeReputation&) const = default;
};

// ---- Ledger: double-entry, append-only, integer micro-credits (1 credit = 1,000,000) ----
// A book is an account of the ledger, named by kind and owner:
//   "consumer:<account id>"  credits a consumer can spend          (never below 0)
//   "held:<account id>"      reserved for its running requests      (never below 0)
//   "pending:<node id>"      an operator's earnings in verification (never below 0)
//   "available:<node id>"    ...after the verification window       (never below 0)
//   "fee"                    the network's share                    (never below 0)
//   "issued"                 where granted credits come from        (its negative is all issued)
// A transaction's lines sum to zero.  Kinds and their refs: "grant" (a grant id), "reserve" and
// "settle" (a job id; each at most once per job), "release" (an attempt id: its pending credit
// made available, at most once), "void" (an attempt id: a failed check takes its pending credit
// back, at most once) and "forfeit" (a node id and time: an untrusted node's pending credit goes
// to the fee).  Books keep a running balance, written with the lines.
struct LedgerLine {
  std::string book;
  int64_t amount = 0;      // signed: what the line adds to the book
  std::string attempt_id;  // the attempt this line pays (settle, release), else ""
};

struct LedgerTx {
  int64_t id = 0;  // assigned by Post
  std::string kind;
  std::string ref;
  int64_t at_ms = 0;
  std::string memo;  // for people
  std::vector<LedgerLine> lines;
};

inline constexpr int64_t kMaxLedgerAmount = int64_t{1} << 53;  // per line, either sign
inline constexpr size_t kMaxLedgerLines = 1024;                 // per transaction

// kInvalidArgument unless `tx` is well formed: a known kind, a non-empty ref, 1..kMaxLedgerLines
// lines of known books with amounts within kMaxLedgerAmount summing to zero, and each attempt
// credited to a pending book at most once.  (The stores call it; it is here for tests.)
Status ValidateLedgerTx(const LedgerTx& tx);

// ---- Reserved slots ----
// A node's commitment to keep one model loaded through a daily window (protocol::SlotOffer).  The
// hub probes it and keeps, per UTC day, how many probes it sent and how many were answered; a slot
// whose availability falls below the network's bar is lost, and stays lost (the node serves as
// spare time; a new reservation needs the operator to offer another model or the admin to clear it).
enum class SlotState { kActive, kLost };
std::string_view SlotStateName(SlotState s);  // "active", "lost"
std::optional<SlotState> ParseSlotState(std::string_view name);

struct SlotRecord {
  int64_t id = 0;  // assigned by OfferSlot
  std::string node_id;
  std::string model;
  int32_t begin_minute = 0, end_minute = 1440;  // UTC, [begin, end), wrapping midnight
  SlotState state = SlotState::kActive;
  int64_t created_ms = 0;
  int64_t lost_ms = 0;      // when it was lost (0: active)
  std::string lost_reason;  // why, for the operator
};

struct SlotDay {
  int64_t day = 0;  // days since the Unix epoch (UTC)
  int64_t probes = 0, answered = 0;
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
  // marks the token used by node_id and returns true; false when unknown, used or expired.  A
  // token may name the operator account (account_id, 0: none) that the node it enrols belongs to
  // (EnrollTokenAccount; an unknown account: kNotFound).
  virtual Status AddEnrollToken(std::string_view token_hash, int64_t expires_ms, int64_t now_ms,
                                int64_t account_id) = 0;  // existing hash: kFailedPrecondition
  virtual StatusOr<bool> UseEnrollToken(std::string_view token_hash, std::string_view node_id,
                                        int64_t now_ms) = 0;

  // The account a token names (0: none); an unknown token: kNotFound.
  virtual StatusOr<int64_t> EnrollTokenAccount(std::string_view token_hash) = 0;

  // Nodes.  ListNodes is ordered by node_id.
  virtual Status AddNode(const NodeRecord& node) = 0;  // existing node_id: kFailedPrecondition
  virtual StatusOr<std::optional<NodeRecord>> FindNode(std::string_view node_id) = 0;
  virtual StatusOr<std::vector<NodeRecord>> ListNodes() = 0;
  virtual Status TouchNode(std::string_view node_id, int64_t last_seen_ms) = 0;  // kNotFound

  // Operators (sql_accounts.cc).  NodesOfAccount lists the nodes an account owns, by node_id.
  // AssignNode makes `account_id` own the node (0: nobody); an unknown node or account: kNotFound.
  virtual StatusOr<std::vector<NodeRecord>> NodesOfAccount(int64_t account_id) = 0;
  virtual Status AssignNode(std::string_view node_id, int64_t account_id) = 0;
  virtual StatusOr<Account> FindAccountById(int64_t account_id) = 0;  // kNotFound
  // What a node's operator earned and lost, from the ledger: every line of its pending and
  // available books but the releases between them (which move credit, not earn it), newest
  // first, at most `limit` (> 0).  Over all of them the amounts sum to the two books' balances.
  struct NodeEarning {
    int64_t tx_id = 0;
    std::string kind;        // "settle" (an attempt's share), "grant" (a slot's period), "void",
                             // "forfeit"
    std::string ref;         // the transaction's: a job id, "slot:<id>:<period>", ...
    std::string attempt_id;  // settle and void: the attempt paid or taken back
    std::string model;       // settle and void: the job's model ("" when its job is unknown)
    int64_t tokens = 0;      // settle and void: the tokens that attempt streamed
    int64_t amount = 0;      // signed micro-credits
    std::string book;        // "pending:<node>" or "available:<node>"
    int64_t at_ms = 0;
    std::string memo;
  };
  virtual StatusOr<std::vector<NodeEarning>> NodeEarnings(std::string_view node_id,
                                                          int64_t limit) = 0;

  // Node sessions: one per connection of a node (its register to its close), for the world
  // page's reliability.  OpenNodeSession closes any session of the node still open first (at
  // now_ms); CloseNodeSession ends the node's open one (none: OK).  ExtendNodeSessions moves
  // every open session's end to now_ms; CloseStaleNodeSessions (at hub start) ends the sessions an
  // earlier run left open where they were last extended, and returns how many.
  virtual Status OpenNodeSession(std::string_view node_id, int64_t now_ms) = 0;
  virtual Status CloseNodeSession(std::string_view node_id, int64_t now_ms) = 0;
  virtual Status ExtendNodeSessions(int64_t now_ms) = 0;
  virtual StatusOr<int64_t> CloseStaleNodeSessions() = 0;
  // Per node with any, ordered by node_id: the time connected within [since_ms, now_ms] (open
  // sessions count up to now_ms) and the tokens of its attempts that finished in that window.
  struct NodeActivity {
    std::string node_id;
    int64_t connected_ms = 0;
    int64_t tokens = 0;
  };
  virtual StatusOr<std::vector<NodeActivity>> NodeActivitySince(int64_t since_ms,
                                                                int64_t now_ms) = 0;
  // The tokens of every attempt finished at or after since_ms; the requests (jobs, benchmarks
  // are none) created at or after since_ms per model, ordered by model.
  virtual StatusOr<int64_t> TokensSince(int64_t since_ms) = 0;
  struct ModelCount {
    std::string model;
    int64_t count = 0;
  };
  virtual StatusOr<std::vector<ModelCount>> RequestsSince(int64_t since_ms) = 0;

  // Jobs and attempts.  A job or attempt is finished once: finishing an unknown one is
  // kNotFound, finishing one that is no longer running kFailedPrecondition, and finishing to a
  // running state kInvalidArgument.  (job_id, number) is unique among attempts.
  // With `reserve` (a "reserve" transaction for this job) and/or `first` (its first attempt,
  // placed at once) they are written with the job in one transaction, or nothing is; a book the
  // reservation would take below zero: kResourceExhausted.  Duplicate id: kFailedPrecondition.
  // (One commit per request start and end: commits are what settlement throughput costs.)
  virtual Status CreateJob(const JobRecord& job, const LedgerTx* reserve = nullptr,
                           const AttemptRecord* first = nullptr) = 0;
  // With `settle` and/or `last` (the end of its running attempt, as FinishAttempt takes it),
  // the job's end is written with them in one transaction, or nothing is.
  struct AttemptEnd {
    std::string attempt_id;
    AttemptState state = AttemptState::kCompleted;
    int64_t first_token_ms = 0, finished_ms = 0, tokens = 0;
    std::string error;
  };
  virtual Status FinishJob(std::string_view job_id, JobState state, int64_t finished_ms,
                           int64_t prompt_tokens, int64_t completion_tokens,
                           std::string_view finish_reason, std::string_view error,
                           const LedgerTx* settle = nullptr, const AttemptEnd* last = nullptr) = 0;
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

  // At hub start: every running job and attempt ends as failed with `error` at now_ms, and the
  // hold of each such job goes back to its consumer (a "settle" that charges nothing), in one
  // transaction; returns the number of jobs so ended.
  virtual StatusOr<int64_t> FailUnfinishedJobs(std::string_view error, int64_t now_ms) = 0;

  // Ledger.  Post writes one transaction (ValidateLedgerTx; a book taken below zero:
  // kResourceExhausted; a second one of the same kind and ref: kFailedPrecondition) and returns
  // its id.  Balance of a book never written to: 0.
  virtual StatusOr<int64_t> Post(const LedgerTx& tx) = 0;
  virtual StatusOr<int64_t> Balance(std::string_view book) = 0;
  // The latest `limit` transactions that touch `book`, newest first, each with all its lines.
  virtual StatusOr<std::vector<LedgerTx>> BookHistory(std::string_view book, int64_t limit) = 0;
  // Makes the pending credit of every attempt settled at or before `settled_by_ms` available (a
  // "release" each), looking at the settlements after transaction `after_tx` in order and at most
  // `limit` lines of them, in one transaction.  Returns how many it released and the id through
  // which every settlement has been handled (pass it as `after_tx` next time; 0 starts over, and
  // nothing is ever released twice).
  struct Released {
    int64_t count = 0;
    int64_t through_tx = 0;
  };
  virtual StatusOr<Released> ReleasePending(int64_t settled_by_ms, int64_t now_ms,
                                            int64_t after_tx, int64_t limit) = 0;
  // Takes back what attempt `attempt_id` still has pending (its settlement's credit, unless it
  // was released, voided or forfeited already) into `to_book`, as a "void" transaction; returns
  // the amount (0: nothing pending, nothing written).
  virtual StatusOr<int64_t> VoidAttempt(std::string_view attempt_id, std::string_view to_book,
                                        std::string_view memo, int64_t now_ms) = 0;
  // Moves every attempt credit still pending for `node_id` to the fee, in one "forfeit"; returns
  // the amount (0: nothing pending, nothing written).
  virtual StatusOr<int64_t> ForfeitPending(std::string_view node_id, std::string_view memo,
                                           int64_t now_ms) = 0;
  // Every broken invariant, one sentence each (empty: the ledger is sound): a transaction that
  // does not sum to zero or has no lines, a balance that differs from the sum of its book's
  // lines, an attempt paid twice or taken back (released, voided, forfeited) beyond its credit, a
  // finished job whose hold was not given back exactly, a settlement that charged more than its
  // reservation, a void or forfeit that takes from anything but an attempt's pending credit or
  // pays anything but a consumer or the fee, an untrusted node that still has pending credit.
  virtual StatusOr<std::vector<std::string>> CheckLedger() = 0;

  // Slots.  OfferSlot returns the stored slot of (node_id, model): a new one (active, created at
  // offer.created_ms), or the existing one with an active slot's window updated to the offer's
  // (a lost one stays lost).  RecordProbe adds one probe, answered or not, to the slot's day
  // (unknown slot: kNotFound).  SlotDays lists the days >= from_day, oldest first.  LoseSlot marks
  // an active slot lost (once; losing a lost slot again is OK and keeps the first reason).
  // ListSlots is ordered by id.
  virtual StatusOr<SlotRecord> OfferSlot(const SlotRecord& offer) = 0;
  virtual Status RecordProbe(int64_t slot_id, int64_t day, bool answered) = 0;
  virtual StatusOr<std::vector<SlotDay>> SlotDays(int64_t slot_id, int64_t from_day) = 0;
  virtual Status LoseSlot(int64_t slot_id, int64_t now_ms, std::string_view reason) = 0;
  virtual StatusOr<std::vector<SlotRecord>> ListSlots() = 0;

  // Reputations (NodeReputation).  PutReputation writes the whole row (insert or replace);
  // ListReputations is ordered by node_id.
  virtual StatusOr<std::optional<NodeReputation>> FindReputation(std::string_view node_id) = 0;
  virtual StatusOr<std::vector<NodeReputation>> ListReputations() = 0;
  virtual Status PutReputation(const NodeReputation& reputation) = 0;

  // A hub setting: the stored value of `name`, storing `initial` first if it has none (so two
  // hubs on one database agree on it).
  virtual StatusOr<std::string> Setting(std::string_view name, std::string_view initial) = 0;

  // The number of the last migration applied (schema.h).
  virtual StatusOr<int64_t> SchemaVersion() = 0;
};

// "postgresql://..." or "postgres://..." (a libpq connection URI) opens PostgreSQL; anything else
// is a SQLite file path, created if missing (its directory must exist).  Both run pending
// migrations before returning.
StatusOr<std::unique_ptr<Store>> OpenStore(std::string_view url);

}  // namespace loom::network::store
