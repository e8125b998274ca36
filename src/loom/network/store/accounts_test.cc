// Operators (store.h, "Operators") on both engines: migration 6 gives existing tokens and nodes
// nobody, a token's account becomes its node's, nodes are listed and reassigned by account, and a
// node's earnings come from the ledger and sum to its pending and available balances.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/network/store/schema.h"
#include "loom/network/store/sql.h"
#include "loom/network/store/store.h"
#include "loom/network/store/store_test_fixture.h"

namespace loom::network::store {
namespace {

class AccountsTest : public StoreTest {};

INSTANTIATE_TEST_SUITE_P(Engines, AccountsTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& info) { return info.param; });

NodeRecord Node(std::string id, int64_t account_id) {
  NodeRecord n;
  n.node_id = std::move(id);
  n.name = "machine " + n.node_id;
  n.public_key = "pk-" + n.node_id;
  n.enrolled_ms = 10;
  n.last_seen_ms = 10;
  n.account_id = account_id;
  return n;
}

TEST_P(AccountsTest, MigrationSixIsTheOperatorsAndLeavesEarlierRowsToNobody) {
  ASSERT_GE(Migrations().size(), 6u);
  EXPECT_TRUE(Contains(Migrations()[4].description, "node sessions"));
  EXPECT_TRUE(Contains(Migrations()[5].description, "operator accounts"));
  // A database at version 5 with a token and a node, as a hub before this build left it.
  TempDir dir;
  std::string url;
  if (GetParam() == "sqlite") {
    url = dir.path() + "/old.db";
  } else {
    LOOM_REQUIRE_POSTGRES(server);
    const std::string name = StrCat("t_old_", ++Postgres().databases);
    LOOM_ASSERT_OK(server->CreateDatabase(name));
    url = server->Url(name);
  }
  {
    LOOM_ASSERT_OK_AND_ASSIGN(auto conn, GetParam() == "sqlite" ? OpenSqliteConnection(url)
                                                                : OpenPostgresConnection(url));
    const std::vector<Migration> five(Migrations().begin(), Migrations().begin() + 5);
    LOOM_ASSERT_OK(Migrate(*conn, five));
    LOOM_ASSERT_OK_AND_ASSIGN(int64_t version, ReadSchemaVersion(*conn));
    ASSERT_EQ(version, 5);
    LOOM_ASSERT_OK(ExecPlain(*conn,
                             "INSERT INTO enroll_tokens (token_hash, created_ms, expires_ms) "
                             "VALUES ('old-tok', 1, 1000)"));
    LOOM_ASSERT_OK(ExecPlain(*conn,
                             "INSERT INTO nodes (node_id, name, public_key, enrolled_ms, "
                             "last_seen_ms) VALUES ('node-old', 'old', 'pk', 1, 1)"));
  }
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t version, store->SchemaVersion());
  EXPECT_EQ(version, static_cast<int64_t>(Migrations().size()));
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<NodeRecord> old, store->FindNode("node-old"));
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->account_id, 0);
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t token_account, store->EnrollTokenAccount("old-tok"));
  EXPECT_EQ(token_account, 0);
  // ...and such a node can be given to an account afterwards.
  LOOM_ASSERT_OK_AND_ASSIGN(Account carol, store->CreateAccount("carol", 2));
  LOOM_ASSERT_OK(store->AssignNode("node-old", carol.id));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<NodeRecord> owned, store->NodesOfAccount(carol.id));
  ASSERT_EQ(owned.size(), 1u);
  EXPECT_EQ(owned[0].node_id, "node-old");
}

TEST_P(AccountsTest, ATokenNamesTheAccountItsNodeBelongsTo) {
  LOOM_ASSERT_OK_AND_ASSIGN(Account alice, store_->CreateAccount("alice", 1));
  LOOM_ASSERT_OK(store_->AddEnrollToken("tok-a", 1000, 1, alice.id));
  LOOM_ASSERT_OK(store_->AddEnrollToken("tok-none", 1000, 1, 0));
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t a, store_->EnrollTokenAccount("tok-a"));
  EXPECT_EQ(a, alice.id);
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t none, store_->EnrollTokenAccount("tok-none"));
  EXPECT_EQ(none, 0);
  EXPECT_EQ(store_->EnrollTokenAccount("tok-unknown").status().code(), StatusCode::kNotFound);
  const Status missing = store_->AddEnrollToken("tok-x", 1000, 1, alice.id + 100);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.ToString();
  // The account stays with the token once it is used.
  LOOM_ASSERT_OK_AND_ASSIGN(bool used, store_->UseEnrollToken("tok-a", "node-a", 2));
  EXPECT_TRUE(used);
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t after, store_->EnrollTokenAccount("tok-a"));
  EXPECT_EQ(after, alice.id);
}

TEST_P(AccountsTest, NodesAreListedByTheirAccountAndReassigned) {
  LOOM_ASSERT_OK_AND_ASSIGN(Account alice, store_->CreateAccount("alice", 1));
  LOOM_ASSERT_OK_AND_ASSIGN(Account bob, store_->CreateAccount("bob", 1));
  LOOM_ASSERT_OK(store_->AddNode(Node("node-b", alice.id)));
  LOOM_ASSERT_OK(store_->AddNode(Node("node-a", alice.id)));
  LOOM_ASSERT_OK(store_->AddNode(Node("node-c", bob.id)));
  LOOM_ASSERT_OK(store_->AddNode(Node("node-d", 0)));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<NodeRecord> of_alice, store_->NodesOfAccount(alice.id));
  ASSERT_EQ(of_alice.size(), 2u);
  EXPECT_EQ(of_alice[0].node_id, "node-a");
  EXPECT_EQ(of_alice[1].node_id, "node-b");
  EXPECT_EQ(of_alice[0].account_id, alice.id);
  EXPECT_EQ(of_alice[0].public_key, "pk-node-a");
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<NodeRecord> of_bob, store_->NodesOfAccount(bob.id));
  ASSERT_EQ(of_bob.size(), 1u);
  EXPECT_EQ(of_bob[0].node_id, "node-c");

  LOOM_ASSERT_OK(store_->AssignNode("node-d", bob.id));
  LOOM_ASSERT_OK(store_->AssignNode("node-b", 0));
  EXPECT_EQ(store_->AssignNode("node-z", bob.id).code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->AssignNode("node-a", bob.id + 100).code(), StatusCode::kNotFound);
  Reopen();
  LOOM_ASSERT_OK_AND_ASSIGN(of_alice, store_->NodesOfAccount(alice.id));
  ASSERT_EQ(of_alice.size(), 1u);
  EXPECT_EQ(of_alice[0].node_id, "node-a");
  LOOM_ASSERT_OK_AND_ASSIGN(of_bob, store_->NodesOfAccount(bob.id));
  ASSERT_EQ(of_bob.size(), 2u);
  EXPECT_EQ(of_bob[1].node_id, "node-d");
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<NodeRecord> b, store_->FindNode("node-b"));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->account_id, 0);

  LOOM_ASSERT_OK_AND_ASSIGN(Account found, store_->FindAccountById(bob.id));
  EXPECT_EQ(found.name, "bob");
  EXPECT_EQ(store_->FindAccountById(bob.id + 100).status().code(), StatusCode::kNotFound);
}

// A paid job: reserved, one attempt of `tokens` tokens on `node`, settled at 90% to the node.
void PaidJob(Store& store, const std::string& job_id, const std::string& attempt_id,
             const std::string& node, int64_t tokens, int64_t charge, int64_t at_ms) {
  JobRecord job = Job(job_id, at_ms);
  job.account_id = 1;
  const LedgerTx reserve{.kind = "reserve",
                         .ref = job_id,
                         .at_ms = at_ms,
                         .lines = {{"consumer:1", -charge, ""}, {"held:1", charge, ""}}};
  LOOM_ASSERT_OK(store.CreateJob(job, &reserve));
  AttemptRecord a = Attempt(attempt_id, job_id, 1);
  a.node_id = node;
  LOOM_ASSERT_OK(store.AddAttempt(a));
  LOOM_ASSERT_OK(
      store.FinishAttempt(attempt_id, AttemptState::kCompleted, at_ms, at_ms + 1, tokens, ""));
  const int64_t pay = charge * 9 / 10;
  const LedgerTx settle{.kind = "settle",
                        .ref = job_id,
                        .at_ms = at_ms + 2,
                        .lines = {{"held:1", -charge, ""},
                                  {"pending:" + node, pay, attempt_id},
                                  {"fee", charge - pay, ""}}};
  LOOM_ASSERT_OK(store.FinishJob(job_id, JobState::kCompleted, at_ms + 2, 3, tokens, "length", "",
                                 &settle));
}

TEST_P(AccountsTest, EarningsComeFromTheLedgerAndSumToTheBalances) {
  LOOM_ASSERT_OK(store_->Post({.kind = "grant",
                               .ref = "g1",
                               .at_ms = 1,
                               .lines = {{"issued", -10'000'000, ""}, {"consumer:1", 10'000'000, ""}}}));
  PaidJob(*store_, "job-1", "att-1", "node-a", 7, 1'000'000, 100);
  PaidJob(*store_, "job-2", "att-2", "node-a", 11, 2'000'000, 200);
  PaidJob(*store_, "job-3", "att-3", "node-b", 5, 500'000, 300);  // another node's
  // A reserved slot's period, paid straight to available.
  LOOM_ASSERT_OK(store_->Post({.kind = "grant",
                               .ref = "slot:4:17",
                               .at_ms = 400,
                               .memo = "availability of reserved slot 4 (m): 3/3 probes answered",
                               .lines = {{"issued", -250'000, ""}, {"available:node-a", 250'000, ""}}}));
  // job-1's credit becomes available (a release: moved, not earned), job-2's is voided.
  LOOM_ASSERT_OK_AND_ASSIGN(Store::Released released, store_->ReleasePending(150, 500, 0, 100));
  EXPECT_EQ(released.count, 1);
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t voided,
                            store_->VoidAttempt("att-2", "consumer:1", "failed a check", 600));
  EXPECT_EQ(voided, 1'800'000);

  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Store::NodeEarning> e, store_->NodeEarnings("node-a", 50));
  ASSERT_EQ(e.size(), 4u);  // void, slot grant, settle job-2, settle job-1 (newest first)
  EXPECT_EQ(e[0].kind, "void");
  EXPECT_EQ(e[0].attempt_id, "att-2");
  EXPECT_EQ(e[0].amount, -1'800'000);
  EXPECT_EQ(e[1].kind, "grant");
  EXPECT_EQ(e[1].ref, "slot:4:17");
  EXPECT_EQ(e[1].book, "available:node-a");
  EXPECT_TRUE(Contains(e[1].memo, "3/3 probes answered"));
  EXPECT_EQ(e[2].kind, "settle");
  EXPECT_EQ(e[2].ref, "job-2");
  EXPECT_EQ(e[2].attempt_id, "att-2");
  EXPECT_EQ(e[2].tokens, 11);
  EXPECT_EQ(e[2].model, "qwen3-0.6b");
  EXPECT_EQ(e[2].amount, 1'800'000);
  EXPECT_EQ(e[3].attempt_id, "att-1");
  EXPECT_EQ(e[3].tokens, 7);
  EXPECT_EQ(e[3].at_ms, 102);
  EXPECT_GT(e[0].tx_id, e[1].tx_id);

  int64_t sum = 0;
  for (const Store::NodeEarning& x : e) sum += x.amount;
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t pending, store_->Balance("pending:node-a"));
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t available, store_->Balance("available:node-a"));
  EXPECT_EQ(sum, pending + available);
  EXPECT_EQ(available, 900'000 + 250'000);

  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Store::NodeEarning> latest,
                            store_->NodeEarnings("node-a", 2));
  ASSERT_EQ(latest.size(), 2u);
  EXPECT_EQ(latest[1].ref, "slot:4:17");
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Store::NodeEarning> b, store_->NodeEarnings("node-b", 50));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].tokens, 5);
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Store::NodeEarning> none,
                            store_->NodeEarnings("node-z", 50));
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(store_->NodeEarnings("node-a", 0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::network::store
