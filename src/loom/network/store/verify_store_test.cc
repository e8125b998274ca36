// Verification in the store (store.h, "Reputations" and the "void" and "forfeit" transactions) on
// both engines: a failed check takes back exactly one attempt's pending credit, an untrusted
// node's pending credit is forfeited whole, nothing is taken back twice or after its release,
// CheckLedger finds a void or forfeit that breaks the rules, reputations and settings round-trip,
// and a database of migration 2 keeps its ledger through migration 3.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/network/store/schema.h"
#include "loom/network/store/store.h"
#include "loom/network/store/store_test_fixture.h"

namespace loom::network::store {
namespace {

class VerifyStoreTest : public StoreTest {};

INSTANTIATE_TEST_SUITE_P(Engines, VerifyStoreTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& info) { return info.param; });

// Consumer 1 is granted 1000 and pays 100 for each job, 90 of it to `node` for attempt
// "<job>-1", settled at `at_ms`.
void PaidJob(Store& store, const std::string& job, const std::string& node, int64_t at_ms = 3) {
  const LedgerTx r{.kind = "reserve",
                   .ref = job,
                   .at_ms = 2,
                   .memo = "",
                   .lines = {{"consumer:1", -100, ""}, {"held:1", 100, ""}}};
  LOOM_ASSERT_OK(store.CreateJob(Job(job, 1), &r));
  const LedgerTx s{
      .kind = "settle",
      .ref = job,
      .at_ms = at_ms,
      .memo = "",
      .lines = {{"held:1", -100, ""}, {"pending:" + node, 90, job + "-1"}, {"fee", 10, ""}}};
  LOOM_ASSERT_OK(store.FinishJob(job, JobState::kCompleted, at_ms, 1, 1, "stop", "", &s));
}

void Grant(Store& store) {
  LOOM_ASSERT_OK(store.Post({.kind = "grant",
                             .ref = "g",
                             .at_ms = 1,
                             .memo = "",
                             .lines = {{"issued", -1000, ""}, {"consumer:1", 1000, ""}}}));
}

std::vector<std::string> Problems(Store& store) {
  auto p = store.CheckLedger();
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : std::vector<std::string>{"CheckLedger failed"};
}

TEST_P(VerifyStoreTest, AVoidTakesBackOneAttemptsPendingCreditOnce) {
  Grant(*store_);
  PaidJob(*store_, "job-1", "node-a");
  PaidJob(*store_, "job-2", "node-a");
  EXPECT_EQ(*store_->Balance("pending:node-a"), 180);
  EXPECT_EQ(*store_->Balance("consumer:1"), 800);
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t voided,
                            store_->VoidAttempt("job-1-1", "consumer:1", "check failed", 10));
  EXPECT_EQ(voided, 90);
  EXPECT_EQ(*store_->Balance("pending:node-a"), 90);
  EXPECT_EQ(*store_->Balance("consumer:1"), 890);  // the operator's share goes back
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t again, store_->VoidAttempt("job-1-1", "consumer:1", "", 11));
  EXPECT_EQ(again, 0);
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t unknown, store_->VoidAttempt("no-such", "fee", "", 11));
  EXPECT_EQ(unknown, 0);
  EXPECT_EQ(store_->VoidAttempt("job-2-1", "available:node-a", "", 12).status().code(),
            StatusCode::kInvalidArgument);
  // The window passes: only the attempt that was not voided is released.
  LOOM_ASSERT_OK_AND_ASSIGN(Store::Released released, store_->ReleasePending(100, 100, 0, 100));
  EXPECT_EQ(released.count, 1);
  EXPECT_EQ(*store_->Balance("available:node-a"), 90);
  EXPECT_EQ(*store_->Balance("pending:node-a"), 0);
  // ...and once released, it can no longer be voided.
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t late, store_->VoidAttempt("job-2-1", "consumer:1", "", 101));
  EXPECT_EQ(late, 0);
  EXPECT_EQ(*store_->Balance("available:node-a"), 90);
  EXPECT_TRUE(Problems(*store_).empty()) << ::testing::PrintToString(Problems(*store_));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<LedgerTx> history, store_->BookHistory("consumer:1", 1));
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].kind, "void");
  EXPECT_EQ(history[0].ref, "job-1-1");
  EXPECT_EQ(history[0].memo, "check failed");
}

TEST_P(VerifyStoreTest, AForfeitTakesEverythingPendingToTheFee) {
  Grant(*store_);
  PaidJob(*store_, "job-1", "node-a");
  PaidJob(*store_, "job-2", "node-a");
  PaidJob(*store_, "job-3", "node-a");
  PaidJob(*store_, "job-4", "node-b");
  LOOM_ASSERT_OK(store_->VoidAttempt("job-1-1", "consumer:1", "", 5).status());
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t fee, store_->Balance("fee"));
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t forfeited, store_->ForfeitPending("node-a", "untrusted", 6));
  EXPECT_EQ(forfeited, 180);  // job-2 and job-3; job-1 was voided already
  EXPECT_EQ(*store_->Balance("pending:node-a"), 0);
  EXPECT_EQ(*store_->Balance("pending:node-b"), 90);
  EXPECT_EQ(*store_->Balance("fee"), fee + 180);
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t nothing, store_->ForfeitPending("node-a", "", 7));
  EXPECT_EQ(nothing, 0);
  // A forfeited attempt is never released.
  LOOM_ASSERT_OK_AND_ASSIGN(Store::Released released, store_->ReleasePending(100, 100, 0, 100));
  EXPECT_EQ(released.count, 1);  // node-b's
  EXPECT_EQ(*store_->Balance("available:node-a"), 0);
  EXPECT_TRUE(Problems(*store_).empty()) << ::testing::PrintToString(Problems(*store_));
}

TEST_P(VerifyStoreTest, AnUntrustedNodeWithPendingCreditIsReported) {
  Grant(*store_);
  PaidJob(*store_, "job-1", "node-a");
  NodeReputation rep;
  rep.node_id = "node-a";
  rep.untrusted = true;
  LOOM_ASSERT_OK(store_->PutReputation(rep));
  std::vector<std::string> problems = Problems(*store_);
  ASSERT_EQ(problems.size(), 1u) << ::testing::PrintToString(problems);
  EXPECT_TRUE(Contains(problems[0], "node node-a is untrusted but still has 90"));
  LOOM_ASSERT_OK(store_->ForfeitPending("node-a", "untrusted", 9).status());
  EXPECT_TRUE(Problems(*store_).empty());
  // A settlement that reaches it later (an attempt that was running) is forfeited by a second.
  PaidJob(*store_, "job-2", "node-a");
  EXPECT_EQ(Problems(*store_).size(), 1u);
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t second, store_->ForfeitPending("node-a", "untrusted", 10));
  EXPECT_EQ(second, 90);
  EXPECT_TRUE(Problems(*store_).empty());
}

TEST_P(VerifyStoreTest, CheckFindsVoidsThatBreakTheRules) {
  Grant(*store_);
  PaidJob(*store_, "job-1", "node-a");
  // Posted by hand: a void that takes from the fee, one that pays an operator, one that takes an
  // attempt's credit a second time.
  LOOM_ASSERT_OK(store_->Post({.kind = "void",
                               .ref = "job-1-1",
                               .at_ms = 5,
                               .memo = "",
                               .lines = {{"fee", -5, "job-1-1"}, {"consumer:1", 5, ""}}}));
  LOOM_ASSERT_OK(
      store_->Post({.kind = "forfeit",
                    .ref = "node-a@1",
                    .at_ms = 5,
                    .memo = "",
                    .lines = {{"pending:node-a", -90, "job-1-1"}, {"available:node-a", 90, ""}}}));
  LOOM_ASSERT_OK(store_->Post({.kind = "forfeit",
                               .ref = "node-a@2",
                               .at_ms = 6,
                               .memo = "",
                               .lines = {{"consumer:1", -90, ""}, {"fee", 90, ""}}}));
  const std::vector<std::string> problems = Problems(*store_);
  auto has = [&](std::string_view part) {
    for (const std::string& p : problems) {
      if (Contains(p, part)) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("(void) takes from fee")) << ::testing::PrintToString(problems);
  EXPECT_TRUE(has("(forfeit) pays available:node-a")) << ::testing::PrintToString(problems);
  EXPECT_TRUE(has("(forfeit) takes from consumer:1")) << ::testing::PrintToString(problems);
  EXPECT_EQ(problems.size(), 3u) << ::testing::PrintToString(problems);
  // A second forfeit of the same attempt takes it back beyond its credit.
  LOOM_ASSERT_OK(store_->Post({.kind = "grant",
                               .ref = "g2",
                               .at_ms = 7,
                               .memo = "",
                               .lines = {{"issued", -90, ""}, {"pending:node-a", 90, ""}}}));
  LOOM_ASSERT_OK(store_->Post({.kind = "forfeit",
                               .ref = "node-a@3",
                               .at_ms = 7,
                               .memo = "",
                               .lines = {{"pending:node-a", -90, "job-1-1"}, {"fee", 90, ""}}}));
  EXPECT_TRUE(Contains(::testing::PrintToString(Problems(*store_)),
                       "attempt job-1-1 was released beyond its credit (-90)"))
      << ::testing::PrintToString(Problems(*store_));
}

TEST_P(VerifyStoreTest, ReputationsAndSettingsRoundTrip) {
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<NodeReputation> none, store_->FindReputation("n1"));
  EXPECT_FALSE(none.has_value());
  NodeReputation a;
  a.node_id = "n1";
  a.jobs = 12;
  a.checks_passed = 5;
  a.checks_failed = 1;
  a.streak = 4;
  a.window_start_ms = 100;
  a.window_failures = 1;
  a.last_result = "passed";
  a.last_check_ms = 200;
  a.served_tokens = 1234;
  a.check_tokens = 56;
  LOOM_ASSERT_OK(store_->PutReputation(a));
  NodeReputation b;
  b.node_id = "n0";
  b.untrusted = true;
  b.untrusted_ms = 300;
  b.last_result = "failed";
  LOOM_ASSERT_OK(store_->PutReputation(b));
  a.jobs = 13;
  a.streak = 5;
  LOOM_ASSERT_OK(store_->PutReputation(a));  // replaces
  Reopen();
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<NodeReputation> back, store_->FindReputation("n1"));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, a);
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<NodeReputation> all, store_->ListReputations());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], b);
  EXPECT_EQ(all[1], a);
  NodeReputation bad = a;
  bad.last_result = "maybe";
  EXPECT_EQ(store_->PutReputation(bad).code(), StatusCode::kInvalidArgument);

  LOOM_ASSERT_OK_AND_ASSIGN(std::string seed, store_->Setting("verify_seed", "first"));
  EXPECT_EQ(seed, "first");
  LOOM_ASSERT_OK_AND_ASSIGN(std::string kept, store_->Setting("verify_seed", "second"));
  EXPECT_EQ(kept, "first");
  Reopen();
  EXPECT_EQ(*store_->Setting("verify_seed", "third"), "first");
}

TEST_P(VerifyStoreTest, ALedgerOfMigrationTwoSurvivesMigrationThree) {
  // A second database, brought only to migration 2 and given a ledger there.
  std::string url;
  if (GetParam() == "sqlite") {
    url = dir_.path() + "/old.db";
  } else {
    LOOM_REQUIRE_POSTGRES(server);
    const std::string name = StrCat("t_", ++Postgres().databases);
    LOOM_ASSERT_OK(server->CreateDatabase(name));
    url = server->Url(name);
  }
  {
    LOOM_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<SqlConnection> conn,
        GetParam() == "sqlite" ? OpenSqliteConnection(url) : OpenPostgresConnection(url));
    LOOM_ASSERT_OK(Migrate(*conn, Migrations().first(2)));
    for (std::string_view sql :
         {"INSERT INTO ledger_tx (id, kind, ref, at_ms) VALUES (1, 'grant', 'g', 1)",
          "INSERT INTO ledger_lines (tx_id, book, amount) VALUES (1, 'issued', -100)",
          "INSERT INTO ledger_lines (tx_id, book, amount) VALUES (1, 'fee', 10)",
          "INSERT INTO ledger_lines (tx_id, book, amount, attempt_id)"
          " VALUES (1, 'pending:node-a', 90, 'job-1-1')",
          "INSERT INTO ledger_balances (book, balance) VALUES ('issued', -100)",
          "INSERT INTO ledger_balances (book, balance) VALUES ('fee', 10)",
          "INSERT INTO ledger_balances (book, balance) VALUES ('pending:node-a', 90)"}) {
      LOOM_ASSERT_OK(ExecPlain(*conn, sql));
    }
    // (PostgreSQL's identity column does not see explicit ids: move it past them.)
    if (GetParam() != "sqlite") {
      LOOM_ASSERT_OK(
          ExecPlain(*conn, "SELECT setval(pg_get_serial_sequence('ledger_tx', 'id'), 1)"));
    }
  }
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
  EXPECT_EQ(*store->SchemaVersion(), static_cast<int64_t>(Migrations().size()));
  EXPECT_TRUE(Problems(*store).empty()) << ::testing::PrintToString(Problems(*store));
  EXPECT_EQ(*store->Balance("pending:node-a"), 90);
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t voided, store->VoidAttempt("job-1-1", "fee", "", 3));
  EXPECT_EQ(voided, 90);
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<LedgerTx> history, store->BookHistory("fee", 10));
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].kind, "void");
  EXPECT_GT(history[0].id, 1);  // new ids follow the copied ones
  EXPECT_EQ(history[1].id, 1);
  EXPECT_TRUE(Problems(*store).empty()) << ::testing::PrintToString(Problems(*store));
  // The lines still refer to the transactions (SQLite rebuilt both tables).
  {
    LOOM_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<SqlConnection> conn,
        GetParam() == "sqlite" ? OpenSqliteConnection(url) : OpenPostgresConnection(url));
    EXPECT_EQ(
        ExecPlain(*conn, "INSERT INTO ledger_lines (tx_id, book, amount) VALUES (999, 'fee', 1)")
            .status()
            .code(),
        StatusCode::kNotFound);
  }
  // The old kinds' uniqueness holds in the rebuilt table.
  EXPECT_EQ(store
                ->Post({.kind = "grant",
                        .ref = "g",
                        .at_ms = 4,
                        .memo = "",
                        .lines = {{"issued", -1, ""}, {"fee", 1, ""}}})
                .status()
                .code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace loom::network::store
