// The ledger (store.h, "Ledger") on both engines: double entry, no overdraft, each job reserved
// and settled once and atomically with the job's own rows, holds given back at a restart,
// releases after the window, and CheckLedger finding what tampering breaks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/network/store/store.h"
#include "loom/network/store/store_test_fixture.h"

namespace loom::network::store {
namespace {

class LedgerTest : public StoreTest {};

INSTANTIATE_TEST_SUITE_P(Engines, LedgerTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& info) { return info.param; });

LedgerTx Grant(std::string ref, int64_t account, int64_t amount) {
  return {.kind = "grant",
          .ref = std::move(ref),
          .at_ms = 1,
          .memo = "test grant",
          .lines = {{"issued", -amount, ""}, {"consumer:" + std::to_string(account), amount, ""}}};
}

LedgerTx Reserve(const std::string& job, int64_t account, int64_t amount) {
  const std::string a = std::to_string(account);
  return {.kind = "reserve",
          .ref = job,
          .at_ms = 2,
          .lines = {{"consumer:" + a, -amount, ""}, {"held:" + a, amount, ""}}};
}

// Charges `charge` of `reserved`: 90% to the attempt's node, the rest to the fee.
LedgerTx Settle(const std::string& job, int64_t account, int64_t reserved, int64_t charge,
                const std::string& attempt, const std::string& node, int64_t at_ms = 3) {
  const std::string a = std::to_string(account);
  const int64_t pay = charge * 9 / 10;
  return {.kind = "settle",
          .ref = job,
          .at_ms = at_ms,
          .lines = {{"held:" + a, -reserved, ""},
                    {"consumer:" + a, reserved - charge, ""},
                    {"pending:" + node, pay, attempt},
                    {"fee", charge - pay, ""}}};
}

std::vector<std::string> Problems(Store& store) {
  auto p = store.CheckLedger();
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : std::vector<std::string>{"CheckLedger failed"};
}

TEST_P(LedgerTest, GrantsMoveCreditsFromIssuedAndKeepBalances) {
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t id, store_->Post(Grant("g1", 7, 5'000'000)));
  EXPECT_GT(id, 0);
  LOOM_ASSERT_OK(store_->Post(Grant("g2", 7, 1'000'000)));
  EXPECT_EQ(*store_->Balance("consumer:7"), 6'000'000);
  EXPECT_EQ(*store_->Balance("issued"), -6'000'000);
  EXPECT_EQ(*store_->Balance("consumer:8"), 0);
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<LedgerTx> history, store_->BookHistory("consumer:7", 10));
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].ref, "g2");  // newest first
  EXPECT_EQ(history[1].ref, "g1");
  ASSERT_EQ(history[1].lines.size(), 2u);
  EXPECT_EQ(history[1].lines[1].book, "consumer:7");
  EXPECT_EQ(history[1].lines[1].amount, 5'000'000);
  EXPECT_EQ(history[1].memo, "test grant");
  EXPECT_TRUE(Problems(*store_).empty());
}

TEST_P(LedgerTest, MalformedTransactionsAreRefusedAndWriteNothing) {
  LedgerTx unbalanced = Grant("g", 1, 10);
  unbalanced.lines[0].amount = -9;
  EXPECT_EQ(store_->Post(unbalanced).status().code(), StatusCode::kInvalidArgument);
  LedgerTx unknown_book = Grant("g", 1, 10);
  unknown_book.lines[1].book = "wallet:1";
  EXPECT_EQ(store_->Post(unknown_book).status().code(), StatusCode::kInvalidArgument);
  LedgerTx bad_owner = Grant("g", 1, 10);
  bad_owner.lines[1].book = "consumer:alice";
  EXPECT_EQ(store_->Post(bad_owner).status().code(), StatusCode::kInvalidArgument);
  LedgerTx unknown_kind = Grant("g", 1, 10);
  unknown_kind.kind = "gift";
  EXPECT_EQ(store_->Post(unknown_kind).status().code(), StatusCode::kInvalidArgument);
  LedgerTx empty = Grant("g", 1, 10);
  empty.lines.clear();
  EXPECT_EQ(store_->Post(empty).status().code(), StatusCode::kInvalidArgument);
  LedgerTx huge = Grant("g", 1, kMaxLedgerAmount + 1);
  EXPECT_EQ(store_->Post(huge).status().code(), StatusCode::kInvalidArgument);
  LedgerTx twice = Settle("job", 1, 100, 100, "att-1", "node-a");
  twice.lines.push_back({"pending:node-b", 1, "att-1"});
  twice.lines.push_back({"fee", -1, ""});
  EXPECT_EQ(store_->Post(twice).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*store_->Balance("consumer:1"), 0);
  EXPECT_EQ(*store_->Balance("issued"), 0);
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<LedgerTx> history, store_->BookHistory("issued", 10));
  EXPECT_TRUE(history.empty());
}

TEST_P(LedgerTest, NoBookButIssuedGoesBelowZeroAndARefusalLeavesNoTrace) {
  LOOM_ASSERT_OK(store_->Post(Grant("g", 3, 100)));
  auto over = store_->Post(Reserve("job-1", 3, 101));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(over.status().message(), "'consumer:3' holds 100"))
      << over.status().ToString();
  EXPECT_EQ(*store_->Balance("consumer:3"), 100);
  EXPECT_EQ(*store_->Balance("held:3"), 0);
  // The refused reservation's (kind, ref) was not taken either.
  LOOM_ASSERT_OK(store_->Post(Reserve("job-1", 3, 100)));
  EXPECT_EQ(*store_->Balance("consumer:3"), 0);
  EXPECT_EQ(*store_->Balance("held:3"), 100);
}

TEST_P(LedgerTest, EachKindAndRefIsPostedOnce) {
  LOOM_ASSERT_OK(store_->Post(Grant("g", 1, 10)));
  EXPECT_EQ(store_->Post(Grant("g", 1, 10)).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(*store_->Balance("consumer:1"), 10);
}

TEST_P(LedgerTest, AJobAndItsReservationAreWrittenTogether) {
  LOOM_ASSERT_OK(store_->Post(Grant("g", 1, 1000)));
  const LedgerTx too_much = Reserve("job-1", 1, 5000);
  EXPECT_EQ(store_->CreateJob(Job("job-1", 10), &too_much).code(), StatusCode::kResourceExhausted);
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> none, store_->FindJob("job-1"));
  EXPECT_FALSE(none.has_value());

  const LedgerTx reserve = Reserve("job-1", 1, 800);
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-1", 10), &reserve));
  EXPECT_EQ(*store_->Balance("held:1"), 800);
  // A duplicate job id reserves nothing more.
  const LedgerTx again = Reserve("job-1", 1, 100);
  EXPECT_EQ(store_->CreateJob(Job("job-1", 11), &again).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(*store_->Balance("consumer:1"), 200);
  // The reservation must be this job's.
  const LedgerTx other = Reserve("job-9", 1, 1);
  EXPECT_EQ(store_->CreateJob(Job("job-2", 12), &other).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Problems(*store_).empty());
}

TEST_P(LedgerTest, SettlementPaysTheAttemptAndRefundsTheRestOnce) {
  LOOM_ASSERT_OK(store_->Post(Grant("g", 1, 1000)));
  const LedgerTx reserve = Reserve("job-1", 1, 600);
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-1", 10), &reserve));
  const LedgerTx settle = Settle("job-1", 1, 600, 250, "job-1-1", "node-a");
  LOOM_ASSERT_OK(store_->FinishJob("job-1", JobState::kCompleted, 20, 5, 20, "stop", "", &settle));
  EXPECT_EQ(*store_->Balance("consumer:1"), 750);
  EXPECT_EQ(*store_->Balance("held:1"), 0);
  EXPECT_EQ(*store_->Balance("pending:node-a"), 225);
  EXPECT_EQ(*store_->Balance("fee"), 25);
  // A job finishes once: a second settlement is refused with its job row.
  const LedgerTx late = Settle("job-1", 1, 600, 600, "job-1-2", "node-b");
  EXPECT_EQ(store_->FinishJob("job-1", JobState::kFailed, 30, 0, 0, "", "x", &late).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(*store_->Balance("pending:node-b"), 0);
  EXPECT_TRUE(Problems(*store_).empty());
}

// The hub's two commits a request: the job, its reservation and first attempt; then the
// attempt's end, the job's end and the settlement.  Each is all or nothing.
TEST_P(LedgerTest, AJobStartsAndEndsWithItsAttemptInOneTransactionEach) {
  LOOM_ASSERT_OK(store_->Post(Grant("g", 1, 1000)));
  const AttemptRecord first = Attempt("job-1-1", "job-1", 1);
  const LedgerTx too_much = Reserve("job-1", 1, 5000);
  EXPECT_EQ(store_->CreateJob(Job("job-1", 10), &too_much, &first).code(),
            StatusCode::kResourceExhausted);
  EXPECT_FALSE(store_->FindJob("job-1")->has_value());
  EXPECT_TRUE(store_->AttemptsOf("job-1")->empty());
  const AttemptRecord foreign = Attempt("job-9-1", "job-9", 1);
  const LedgerTx reserve = Reserve("job-1", 1, 600);
  EXPECT_EQ(store_->CreateJob(Job("job-1", 10), &reserve, &foreign).code(),
            StatusCode::kInvalidArgument);
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-1", 10), &reserve, &first));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> running, store_->AttemptsOf("job-1"));
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].state, AttemptState::kRunning);
  EXPECT_EQ(*store_->Balance("held:1"), 600);

  const Store::AttemptEnd end{.attempt_id = "job-1-1", .state = AttemptState::kCompleted,
                              .first_token_ms = 12, .finished_ms = 20, .tokens = 20};
  // A settlement that is not this job's refuses the whole end: the attempt stays running.
  const LedgerTx wrong = Settle("job-2", 1, 600, 250, "job-1-1", "node-a");
  EXPECT_EQ(store_->FinishJob("job-1", JobState::kCompleted, 20, 5, 20, "stop", "", &wrong, &end)
                .code(),
            StatusCode::kInvalidArgument);
  const LedgerTx overdrawn = Settle("job-1", 1, 900, 250, "job-1-1", "node-a");
  EXPECT_FALSE(
      store_->FinishJob("job-1", JobState::kCompleted, 20, 5, 20, "stop", "", &overdrawn, &end)
          .ok());
  EXPECT_EQ((*store_->AttemptsOf("job-1"))[0].state, AttemptState::kRunning);
  EXPECT_EQ((*store_->FindJob("job-1"))->state, JobState::kRunning);

  const LedgerTx settle = Settle("job-1", 1, 600, 250, "job-1-1", "node-a");
  LOOM_ASSERT_OK(
      store_->FinishJob("job-1", JobState::kCompleted, 20, 5, 20, "stop", "", &settle, &end));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> done, store_->AttemptsOf("job-1"));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].state, AttemptState::kCompleted);
  EXPECT_EQ(done[0].tokens, 20);
  EXPECT_EQ(done[0].first_token_ms, 12);
  EXPECT_EQ((*store_->FindJob("job-1"))->state, JobState::kCompleted);
  EXPECT_EQ(*store_->Balance("pending:node-a"), 225);
  EXPECT_EQ(*store_->Balance("held:1"), 0);
  // Without a settlement (a free model) the attempt's end still rides with the job's.
  const AttemptRecord free_first = Attempt("job-3-1", "job-3", 1);
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-3", 30), nullptr, &free_first));
  const Store::AttemptEnd free_end{.attempt_id = "job-3-1", .state = AttemptState::kFailed,
                                   .finished_ms = 31, .error = "node lost"};
  LOOM_ASSERT_OK(
      store_->FinishJob("job-3", JobState::kFailed, 31, 0, 0, "", "x", nullptr, &free_end));
  EXPECT_EQ((*store_->AttemptsOf("job-3"))[0].state, AttemptState::kFailed);
  EXPECT_EQ((*store_->AttemptsOf("job-3"))[0].error, "node lost");
  EXPECT_TRUE(Problems(*store_).empty());
}

TEST_P(LedgerTest, ARestartGivesTheHoldsOfUnfinishedJobsBack) {
  LOOM_ASSERT_OK(store_->Post(Grant("g", 1, 1000)));
  const LedgerTx r1 = Reserve("job-1", 1, 300), r2 = Reserve("job-2", 1, 200);
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-1", 10), &r1));
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-2", 11), &r2));
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-3", 12)));  // free: no reservation
  const LedgerTx s2 = Settle("job-2", 1, 200, 100, "job-2-1", "node-a");
  LOOM_ASSERT_OK(store_->FinishJob("job-2", JobState::kCompleted, 20, 1, 1, "stop", "", &s2));
  Reopen();  // as a restarted hub
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t failed, store_->FailUnfinishedJobs("the hub restarted", 30));
  EXPECT_EQ(failed, 2);
  EXPECT_EQ(*store_->Balance("held:1"), 0);
  EXPECT_EQ(*store_->Balance("consumer:1"), 900);
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<LedgerTx> history, store_->BookHistory("held:1", 10));
  ASSERT_EQ(history.size(), 4u);
  EXPECT_EQ(history[0].kind, "settle");
  EXPECT_EQ(history[0].ref, "job-1");
  EXPECT_EQ(history[0].memo, "the hub restarted");
  EXPECT_TRUE(Problems(*store_).empty());
}

TEST_P(LedgerTest, PendingCreditsBecomeAvailableAfterTheWindowOnce) {
  LOOM_ASSERT_OK(store_->Post(Grant("g", 1, 1000)));
  for (int i = 1; i <= 2; ++i) {
    const std::string job = "job-" + std::to_string(i);
    const LedgerTx r = Reserve(job, 1, 100);
    LOOM_ASSERT_OK(store_->CreateJob(Job(job, 10), &r));
    const LedgerTx s = Settle(job, 1, 100, 100, job + "-1", "node-a", /*at_ms=*/100 * i);
    LOOM_ASSERT_OK(store_->FinishJob(job, JobState::kCompleted, 20, 1, 1, "stop", "", &s));
  }
  LOOM_ASSERT_OK_AND_ASSIGN(Store::Released first, store_->ReleasePending(150, 1000, 0, 100));
  EXPECT_EQ(first.count, 1);  // only job-1's was settled by then
  EXPECT_GT(first.through_tx, 0);
  EXPECT_EQ(*store_->Balance("pending:node-a"), 90);
  EXPECT_EQ(*store_->Balance("available:node-a"), 90);
  LOOM_ASSERT_OK_AND_ASSIGN(Store::Released later,
                            store_->ReleasePending(1000, 1001, first.through_tx, 100));
  EXPECT_EQ(later.count, 1);
  EXPECT_GT(later.through_tx, first.through_tx);
  LOOM_ASSERT_OK_AND_ASSIGN(Store::Released none,
                            store_->ReleasePending(1000, 1002, later.through_tx, 100));
  EXPECT_EQ(none.count, 0);
  // Starting over finds nothing left to release either.
  LOOM_ASSERT_OK_AND_ASSIGN(Store::Released again, store_->ReleasePending(1000, 1003, 0, 1));
  EXPECT_EQ(again.count, 0);
  EXPECT_EQ(*store_->Balance("pending:node-a"), 0);
  EXPECT_EQ(*store_->Balance("available:node-a"), 180);
  EXPECT_TRUE(Problems(*store_).empty());
}

TEST_P(LedgerTest, CheckFindsWhatTamperingBreaks) {
  LOOM_ASSERT_OK(store_->Post(Grant("g", 1, 1000)));
  const LedgerTx r = Reserve("job-1", 1, 100);
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-1", 10), &r));
  const LedgerTx s = Settle("job-1", 1, 100, 50, "job-1-1", "node-a");
  LOOM_ASSERT_OK(store_->FinishJob("job-1", JobState::kCompleted, 20, 1, 1, "stop", "", &s));
  ASSERT_TRUE(Problems(*store_).empty());
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SqlConnection> conn, Connect());
  // A balance edited by hand, a line edited by hand (its transaction no longer sums to zero), a
  // job finished behind the ledger's back while it still holds credits.
  LOOM_ASSERT_OK(ExecPlain(*conn,
                           "UPDATE ledger_balances SET balance = balance + 5 "
                           "WHERE book = 'fee'"));
  LOOM_ASSERT_OK(ExecPlain(*conn,
                           "UPDATE ledger_lines SET amount = amount + 1 "
                           "WHERE book = 'pending:node-a'"));
  const LedgerTx r2 = Reserve("job-2", 1, 10);
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-2", 30), &r2));
  LOOM_ASSERT_OK(store_->FinishJob("job-2", JobState::kFailed, 31, 0, 0, "", "x"));
  const std::vector<std::string> problems = Problems(*store_);
  auto has = [&](std::string_view part) {
    for (const std::string& p : problems) {
      if (Contains(p, part)) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("book fee has balance 10 but its lines sum to 5"))
      << ::testing::PrintToString(problems);
  EXPECT_TRUE(has("sums to 1, not 0")) << ::testing::PrintToString(problems);
  EXPECT_TRUE(has("book pending:node-a has balance 45 but its lines sum to 46"))
      << ::testing::PrintToString(problems);
  EXPECT_TRUE(has("job job-2 is not running but holds 10")) << ::testing::PrintToString(problems);
  EXPECT_EQ(problems.size(), 4u) << ::testing::PrintToString(problems);
}

TEST_P(LedgerTest, ASettlementBeyondItsReservationIsReported) {
  LOOM_ASSERT_OK(store_->Post(Grant("g", 1, 1000)));
  const LedgerTx r = Reserve("job-1", 1, 100);
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-1", 10), &r));
  const LedgerTx s = Settle("job-1", 1, 100, 150, "job-1-1", "node-a");
  LOOM_ASSERT_OK(store_->FinishJob("job-1", JobState::kCompleted, 20, 1, 1, "stop", "", &s));
  const std::vector<std::string> problems = Problems(*store_);
  ASSERT_EQ(problems.size(), 1u) << ::testing::PrintToString(problems);
  EXPECT_TRUE(Contains(problems[0], "job job-1 was charged 50 micro-credits beyond"));
}

}  // namespace
}  // namespace loom::network::store
