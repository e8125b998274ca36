// One suite over both engines: every TEST_P runs against a fresh SQLite file and a fresh database
// on a temporary PostgreSQL server (started once per binary, on first use).
#include "loom/network/store/store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "loom/network/store/postgres/postgres_store.h"
#include "loom/network/store/postgres/temp_postgres.h"
#include "loom/network/store/schema.h"
#include "loom/network/store/store_test_fixture.h"
#include "loom/network/store/sql.h"
#include "loom/network/store/sqlite/sqlite_store.h"

namespace loom::network::store {
namespace {

namespace fs = std::filesystem;

[[maybe_unused]] ::testing::Environment* const kStopPostgres =
    ::testing::AddGlobalTestEnvironment(new StopPostgres);

INSTANTIATE_TEST_SUITE_P(Engines, StoreTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& info) { return info.param; });

TEST_P(StoreTest, KindNamesTheEngine) { EXPECT_EQ(store_->Kind(), GetParam()); }

TEST_P(StoreTest, AccountsAreCreatedFoundAndListed) {
  LOOM_ASSERT_OK_AND_ASSIGN(Account alice, store_->CreateAccount("alice", 1000));
  LOOM_ASSERT_OK_AND_ASSIGN(Account bob, store_->CreateAccount("bob", 2000));
  EXPECT_GT(alice.id, 0);
  EXPECT_NE(alice.id, bob.id);
  EXPECT_EQ(alice.name, "alice");
  EXPECT_EQ(alice.created_ms, 1000);

  LOOM_ASSERT_OK_AND_ASSIGN(Account found, store_->FindAccount("bob"));
  EXPECT_EQ(found.id, bob.id);
  EXPECT_EQ(found.created_ms, 2000);

  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Account> all, store_->ListAccounts());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "alice");
  EXPECT_EQ(all[1].name, "bob");
}

TEST_P(StoreTest, DuplicateAccountIsFailedPrecondition) {
  LOOM_ASSERT_OK(store_->CreateAccount("alice", 1));
  auto again = store_->CreateAccount("alice", 2);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(again.status().message(), "account 'alice' already exists"))
      << again.status().ToString();
  EXPECT_TRUE(Contains(again.status().message(), "store: create account"));
}

TEST_P(StoreTest, MissingAccountIsNotFound) {
  auto missing = store_->FindAccount("nobody");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), "'nobody'"));
  EXPECT_EQ(store_->CreateAccount("", 1).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, ApiKeysAreFoundByHashUntilRevoked) {
  LOOM_ASSERT_OK_AND_ASSIGN(Account alice, store_->CreateAccount("alice", 1));
  LOOM_ASSERT_OK_AND_ASSIGN(ApiKeyRecord key, store_->AddApiKey(alice.id, "hash-a", "lk_a", 5));
  LOOM_ASSERT_OK(store_->AddApiKey(alice.id, "hash-b", "lk_b", 6));
  EXPECT_GT(key.id, 0);
  EXPECT_EQ(key.account_id, alice.id);
  EXPECT_EQ(key.prefix, "lk_a");
  EXPECT_FALSE(key.revoked);

  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<int64_t> owner, store_->AccountForKey("hash-a"));
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(*owner, alice.id);
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<int64_t> nobody, store_->AccountForKey("hash-x"));
  EXPECT_FALSE(nobody.has_value());

  LOOM_ASSERT_OK(store_->RevokeApiKey("lk_a"));
  LOOM_ASSERT_OK(store_->RevokeApiKey("lk_a"));  // twice is fine
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<int64_t> revoked, store_->AccountForKey("hash-a"));
  EXPECT_FALSE(revoked.has_value());
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<int64_t> other, store_->AccountForKey("hash-b"));
  EXPECT_TRUE(other.has_value());

  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<ApiKeyRecord> keys, store_->ListApiKeys(alice.id));
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].prefix, "lk_a");
  EXPECT_TRUE(keys[0].revoked);
  EXPECT_EQ(keys[0].created_ms, 5);
  EXPECT_EQ(keys[1].prefix, "lk_b");
  EXPECT_FALSE(keys[1].revoked);
}

TEST_P(StoreTest, ApiKeyErrorsAreClassified) {
  auto unknown = store_->AddApiKey(42, "hash", "lk_1", 1);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound) << unknown.status().ToString();
  EXPECT_TRUE(Contains(unknown.status().message(), "account 42 does not exist"));

  LOOM_ASSERT_OK_AND_ASSIGN(Account alice, store_->CreateAccount("alice", 1));
  LOOM_ASSERT_OK(store_->AddApiKey(alice.id, "hash", "lk_1", 1));
  EXPECT_EQ(store_->AddApiKey(alice.id, "hash", "lk_2", 1).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->AddApiKey(alice.id, "hash2", "lk_1", 1).status().code(),
            StatusCode::kFailedPrecondition);

  const Status revoke = store_->RevokeApiKey("lk_none");
  EXPECT_EQ(revoke.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(revoke.message(), "'lk_none'"));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<ApiKeyRecord> none, store_->ListApiKeys(999));
  EXPECT_TRUE(none.empty());
}

TEST_P(StoreTest, EnrollTokenIsSingleUse) {
  LOOM_ASSERT_OK(store_->AddEnrollToken("tok", /*expires_ms=*/1000, /*now_ms=*/0, 0));
  LOOM_ASSERT_OK_AND_ASSIGN(bool first, store_->UseEnrollToken("tok", "node-1", 0));
  EXPECT_TRUE(first);  // now_ms 0 is a time like any other
  LOOM_ASSERT_OK_AND_ASSIGN(bool second, store_->UseEnrollToken("tok", "node-2", 1));
  EXPECT_FALSE(second);
  EXPECT_EQ(store_->AddEnrollToken("tok", 5000, 1, 0).code(), StatusCode::kFailedPrecondition);
}

TEST_P(StoreTest, EnrollTokenExpiresAndUnknownIsRefused) {
  LOOM_ASSERT_OK(store_->AddEnrollToken("tok", /*expires_ms=*/1000, /*now_ms=*/10, 0));
  LOOM_ASSERT_OK_AND_ASSIGN(bool at_expiry, store_->UseEnrollToken("tok", "node-1", 1000));
  EXPECT_FALSE(at_expiry);
  LOOM_ASSERT_OK_AND_ASSIGN(bool before, store_->UseEnrollToken("tok", "node-1", 999));
  EXPECT_TRUE(before);
  LOOM_ASSERT_OK_AND_ASSIGN(bool unknown, store_->UseEnrollToken("nope", "node-1", 1));
  EXPECT_FALSE(unknown);
}

TEST_P(StoreTest, NodesAreAddedFoundTouchedAndListed) {
  const NodeRecord b{"node-b", "bee", "pk-b", 10, 10};
  const NodeRecord a{"node-a", "ant", "pk-a", 20, 20};
  LOOM_ASSERT_OK(store_->AddNode(b));
  LOOM_ASSERT_OK(store_->AddNode(a));
  const Status dup = store_->AddNode(a);
  EXPECT_EQ(dup.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(dup.message(), "node 'node-a' already exists"));

  LOOM_ASSERT_OK(store_->TouchNode("node-b", 555));
  EXPECT_EQ(store_->TouchNode("node-z", 1).code(), StatusCode::kNotFound);

  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<NodeRecord> found, store_->FindNode("node-b"));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->name, "bee");
  EXPECT_EQ(found->public_key, "pk-b");
  EXPECT_EQ(found->enrolled_ms, 10);
  EXPECT_EQ(found->last_seen_ms, 555);
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<NodeRecord> missing, store_->FindNode("node-z"));
  EXPECT_FALSE(missing.has_value());

  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<NodeRecord> nodes, store_->ListNodes());
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].node_id, "node-a");
  EXPECT_EQ(nodes[1].node_id, "node-b");
}

TEST_P(StoreTest, NodeSessionsGiveTheTimeConnectedWithinAWindow) {
  // node-a: [100, 300] closed, then open from 500; node-b: [50, 120] closed; node-c: none.
  LOOM_ASSERT_OK(store_->OpenNodeSession("node-a", 100));
  LOOM_ASSERT_OK(store_->OpenNodeSession("node-b", 50));
  LOOM_ASSERT_OK(store_->CloseNodeSession("node-b", 120));
  LOOM_ASSERT_OK(store_->CloseNodeSession("node-b", 130));  // none open: nothing changes
  LOOM_ASSERT_OK(store_->CloseNodeSession("node-a", 300));
  LOOM_ASSERT_OK(store_->OpenNodeSession("node-a", 500));
  using Activity = Store::NodeActivity;
  auto same = [](const std::vector<Activity>& got, const std::vector<Activity>& want) {
    if (got.size() != want.size()) return false;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i].node_id != want[i].node_id || got[i].connected_ms != want[i].connected_ms ||
          got[i].tokens != want[i].tokens) {
        return false;
      }
    }
    return true;
  };
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Activity> all, store_->NodeActivitySince(0, 1000));
  EXPECT_TRUE(same(all, {{"node-a", 200 + 500, 0}, {"node-b", 70, 0}}));
  // The window cuts sessions at both ends; an open one lasts until now.
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Activity> cut, store_->NodeActivitySince(110, 600));
  EXPECT_TRUE(same(cut, {{"node-a", 190 + 100, 0}, {"node-b", 10, 0}}));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Activity> late, store_->NodeActivitySince(400, 1000));
  EXPECT_TRUE(same(late, {{"node-a", 500, 0}}));
  // Opening again closes the open one first.
  LOOM_ASSERT_OK(store_->OpenNodeSession("node-a", 700));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Activity> reopened, store_->NodeActivitySince(400, 1000));
  EXPECT_TRUE(same(reopened, {{"node-a", 200 + 300, 0}}));

  // A hub that died left node-a open, last extended at 800: at the next start it ends there.
  LOOM_ASSERT_OK(store_->ExtendNodeSessions(800));
  Reopen();
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t stale, store_->CloseStaleNodeSessions());
  EXPECT_EQ(stale, 1);
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Activity> after, store_->NodeActivitySince(400, 5000));
  EXPECT_TRUE(same(after, {{"node-a", 200 + 100, 0}}));
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t none, store_->CloseStaleNodeSessions());
  EXPECT_EQ(none, 0);
}

TEST_P(StoreTest, TokensAndRequestsWithinAWindow) {
  JobRecord other = Job("job-2", 150);
  other.model = "llama-3.2-1b";
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-1", 100)));
  LOOM_ASSERT_OK(store_->CreateJob(other));
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-3", 400)));
  AttemptRecord elsewhere = Attempt("att-3", "job-2", 1);
  elsewhere.node_id = "node-0";
  LOOM_ASSERT_OK(store_->AddAttempt(Attempt("att-1", "job-1", 1)));
  LOOM_ASSERT_OK(store_->AddAttempt(Attempt("att-2", "job-1", 2)));
  LOOM_ASSERT_OK(store_->AddAttempt(elsewhere));
  LOOM_ASSERT_OK(store_->AddAttempt(Attempt("att-4", "job-3", 1)));  // still running
  LOOM_ASSERT_OK(store_->FinishAttempt("att-1", AttemptState::kFailed, 120, 150, 5, "died"));
  LOOM_ASSERT_OK(store_->FinishAttempt("att-2", AttemptState::kCompleted, 160, 200, 40, ""));
  LOOM_ASSERT_OK(store_->FinishAttempt("att-3", AttemptState::kCompleted, 170, 300, 7, ""));
  LOOM_ASSERT_OK(store_->OpenNodeSession("node-1", 100));

  LOOM_ASSERT_OK_AND_ASSIGN(int64_t tokens, store_->TokensSince(0));
  EXPECT_EQ(tokens, 52);  // the running attempt's are not counted yet
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t later, store_->TokensSince(160));
  EXPECT_EQ(later, 47);
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t none, store_->TokensSince(1000));
  EXPECT_EQ(none, 0);

  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Store::NodeActivity> nodes,
                            store_->NodeActivitySince(0, 1000));
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].node_id, "node-0");  // tokens, no session
  EXPECT_EQ(nodes[0].connected_ms, 0);
  EXPECT_EQ(nodes[0].tokens, 7);
  EXPECT_EQ(nodes[1].node_id, "node-1");  // both
  EXPECT_EQ(nodes[1].connected_ms, 900);
  EXPECT_EQ(nodes[1].tokens, 45);

  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Store::ModelCount> requests, store_->RequestsSince(120));
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].model, "llama-3.2-1b");
  EXPECT_EQ(requests[0].count, 1);
  EXPECT_EQ(requests[1].model, "qwen3-0.6b");
  EXPECT_EQ(requests[1].count, 1);
}

TEST_P(StoreTest, JobAndAttemptsLifeCycle) {
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-1", 100)));
  LOOM_ASSERT_OK(store_->AddAttempt(Attempt("att-2", "job-1", 2)));
  LOOM_ASSERT_OK(store_->AddAttempt(Attempt("att-1", "job-1", 1)));
  LOOM_ASSERT_OK(
      store_->FinishAttempt("att-1", AttemptState::kFailed, 0, 150, 0, "node timed out"));
  LOOM_ASSERT_OK(store_->FinishAttempt("att-2", AttemptState::kCompleted, 160, 190, 42, ""));
  LOOM_ASSERT_OK(store_->FinishJob("job-1", JobState::kCompleted, 200, 12, 42, "stop", ""));

  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> job, store_->FindJob("job-1"));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->state, JobState::kCompleted);
  EXPECT_EQ(job->account_id, 1);
  EXPECT_EQ(job->model, "qwen3-0.6b");
  EXPECT_EQ(job->endpoint, "/v1/chat/completions");
  EXPECT_EQ(job->created_ms, 100);
  EXPECT_EQ(job->finished_ms, 200);
  EXPECT_EQ(job->prompt_tokens, 12);
  EXPECT_EQ(job->completion_tokens, 42);
  EXPECT_EQ(job->finish_reason, "stop");
  EXPECT_EQ(job->error, "");

  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts, store_->AttemptsOf("job-1"));
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].attempt_id, "att-1");
  EXPECT_EQ(attempts[0].number, 1);
  EXPECT_EQ(attempts[0].state, AttemptState::kFailed);
  EXPECT_EQ(attempts[0].error, "node timed out");
  EXPECT_EQ(attempts[0].finished_ms, 150);
  EXPECT_EQ(attempts[1].attempt_id, "att-2");
  EXPECT_EQ(attempts[1].state, AttemptState::kCompleted);
  EXPECT_EQ(attempts[1].node_id, "node-1");
  EXPECT_EQ(attempts[1].started_ms, 102);
  EXPECT_EQ(attempts[1].first_token_ms, 160);
  EXPECT_EQ(attempts[1].tokens, 42);

  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> none, store_->FindJob("job-x"));
  EXPECT_FALSE(none.has_value());
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> no_attempts, store_->AttemptsOf("job-x"));
  EXPECT_TRUE(no_attempts.empty());
}

TEST_P(StoreTest, JobAndAttemptErrorsAreClassified) {
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-1", 100)));
  EXPECT_EQ(store_->CreateJob(Job("job-1", 101)).code(), StatusCode::kFailedPrecondition);

  const Status orphan = store_->AddAttempt(Attempt("att-1", "job-x", 1));
  EXPECT_EQ(orphan.code(), StatusCode::kNotFound) << orphan.ToString();
  EXPECT_TRUE(Contains(orphan.message(), "job 'job-x' does not exist"));
  LOOM_ASSERT_OK(store_->AddAttempt(Attempt("att-1", "job-1", 1)));
  EXPECT_EQ(store_->AddAttempt(Attempt("att-1", "job-1", 2)).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->AddAttempt(Attempt("att-2", "job-1", 1)).code(),
            StatusCode::kFailedPrecondition);  // (job, number) taken

  EXPECT_EQ(store_->FinishJob("job-x", JobState::kFailed, 1, 0, 0, "", "e").code(),
            StatusCode::kNotFound);
  EXPECT_EQ(store_->FinishJob("job-1", JobState::kRunning, 1, 0, 0, "", "").code(),
            StatusCode::kInvalidArgument);
  LOOM_ASSERT_OK(store_->FinishJob("job-1", JobState::kFailed, 5, 0, 0, "", "boom"));
  const Status twice = store_->FinishJob("job-1", JobState::kCompleted, 6, 1, 1, "stop", "");
  EXPECT_EQ(twice.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(twice.message(), "already finished as failed")) << twice.ToString();

  EXPECT_EQ(store_->FinishAttempt("att-x", AttemptState::kFailed, 0, 1, 0, "").code(),
            StatusCode::kNotFound);
  LOOM_ASSERT_OK(store_->FinishAttempt("att-1", AttemptState::kCancelled, 0, 1, 0, ""));
  EXPECT_EQ(store_->FinishAttempt("att-1", AttemptState::kFailed, 0, 1, 0, "").code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->ListJobs(0, std::nullopt).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, ListJobsIsNewestFirstWithLimitAndState) {
  LOOM_ASSERT_OK(store_->CreateJob(Job("a", 10)));
  LOOM_ASSERT_OK(store_->CreateJob(Job("b", 20, JobState::kCompleted)));
  LOOM_ASSERT_OK(store_->CreateJob(Job("c", 20)));
  LOOM_ASSERT_OK(store_->CreateJob(Job("d", 30, JobState::kFailed)));

  auto ids = [](const std::vector<JobRecord>& jobs) {
    std::string out;
    for (const JobRecord& j : jobs) out += j.job_id;
    return out;
  };
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> all, store_->ListJobs(10, std::nullopt));
  EXPECT_EQ(ids(all), "dcba");
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> two, store_->ListJobs(2, std::nullopt));
  EXPECT_EQ(ids(two), "dc");
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> running,
                            store_->ListJobs(10, JobState::kRunning));
  EXPECT_EQ(ids(running), "ca");
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> done,
                            store_->ListJobs(10, JobState::kCompleted));
  EXPECT_EQ(ids(done), "b");
}

TEST_P(StoreTest, FailUnfinishedJobsEndsExactlyTheRunningOnes) {
  LOOM_ASSERT_OK(store_->CreateJob(Job("run-1", 1)));
  LOOM_ASSERT_OK(store_->AddAttempt(Attempt("r1-a1", "run-1", 1)));
  LOOM_ASSERT_OK(store_->FinishAttempt("r1-a1", AttemptState::kFailed, 0, 5, 0, "first failure"));
  LOOM_ASSERT_OK(store_->AddAttempt(Attempt("r1-a2", "run-1", 2)));
  LOOM_ASSERT_OK(store_->CreateJob(Job("run-2", 2)));
  LOOM_ASSERT_OK(store_->CreateJob(Job("done", 3)));
  LOOM_ASSERT_OK(store_->AddAttempt(Attempt("d-a1", "done", 1)));
  LOOM_ASSERT_OK(store_->FinishAttempt("d-a1", AttemptState::kCompleted, 7, 8, 9, ""));
  LOOM_ASSERT_OK(store_->FinishJob("done", JobState::kCompleted, 8, 1, 9, "stop", ""));
  LOOM_ASSERT_OK(store_->CreateJob(Job("failed", 4, JobState::kFailed)));

  LOOM_ASSERT_OK_AND_ASSIGN(int64_t ended, store_->FailUnfinishedJobs("hub restarted", 500));
  EXPECT_EQ(ended, 2);

  for (const char* id : {"run-1", "run-2"}) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> job, store_->FindJob(id));
    ASSERT_TRUE(job.has_value());
    EXPECT_EQ(job->state, JobState::kFailed) << id;
    EXPECT_EQ(job->error, "hub restarted") << id;
    EXPECT_EQ(job->finished_ms, 500) << id;
  }
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> run1, store_->AttemptsOf("run-1"));
  ASSERT_EQ(run1.size(), 2u);
  EXPECT_EQ(run1[0].error, "first failure");  // already finished: untouched
  EXPECT_EQ(run1[0].finished_ms, 5);
  EXPECT_EQ(run1[1].state, AttemptState::kFailed);
  EXPECT_EQ(run1[1].error, "hub restarted");
  EXPECT_EQ(run1[1].finished_ms, 500);

  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> done, store_->FindJob("done"));
  EXPECT_EQ(done->state, JobState::kCompleted);
  EXPECT_EQ(done->error, "");
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> done_attempts, store_->AttemptsOf("done"));
  EXPECT_EQ(done_attempts[0].state, AttemptState::kCompleted);
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> failed, store_->FindJob("failed"));
  EXPECT_EQ(failed->error, "");

  LOOM_ASSERT_OK_AND_ASSIGN(int64_t again, store_->FailUnfinishedJobs("hub restarted", 600));
  EXPECT_EQ(again, 0);
}

TEST_P(StoreTest, EverythingSurvivesClosingAndReopening) {
  LOOM_ASSERT_OK_AND_ASSIGN(Account alice, store_->CreateAccount("alice", 1));
  LOOM_ASSERT_OK(store_->AddApiKey(alice.id, "hash-a", "lk_a", 2));
  LOOM_ASSERT_OK(store_->AddEnrollToken("tok", 1000, 3, 0));
  LOOM_ASSERT_OK(store_->AddNode({"node-1", "one", "pk", 4, 4}));
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-1", 5)));
  LOOM_ASSERT_OK(store_->AddAttempt(Attempt("att-1", "job-1", 1)));
  LOOM_ASSERT_OK(store_->CreateJob(Job("job-2", 6)));
  LOOM_ASSERT_OK(store_->FinishJob("job-2", JobState::kCompleted, 7, 1, 2, "length", ""));

  Reopen();
  LOOM_ASSERT_OK_AND_ASSIGN(Account found, store_->FindAccount("alice"));
  EXPECT_EQ(found.id, alice.id);
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<int64_t> owner, store_->AccountForKey("hash-a"));
  EXPECT_EQ(owner, std::optional<int64_t>(alice.id));
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<NodeRecord> node, store_->FindNode("node-1"));
  EXPECT_TRUE(node.has_value());
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> job2, store_->FindJob("job-2"));
  ASSERT_TRUE(job2.has_value());
  EXPECT_EQ(job2->state, JobState::kCompleted);
  EXPECT_EQ(job2->finish_reason, "length");
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<AttemptRecord> attempts, store_->AttemptsOf("job-1"));
  EXPECT_EQ(attempts.size(), 1u);
  LOOM_ASSERT_OK_AND_ASSIGN(bool used, store_->UseEnrollToken("tok", "node-2", 10));
  EXPECT_TRUE(used);  // the token survived, unused
  // A new account after reopening does not reuse an id.
  LOOM_ASSERT_OK_AND_ASSIGN(Account bob, store_->CreateAccount("bob", 8));
  EXPECT_GT(bob.id, alice.id);
}

TEST_P(StoreTest, SchemaVersionIsTheMigrationCountAndReopeningAppliesNothing) {
  const int64_t count = static_cast<int64_t>(Migrations().size());
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t version, store_->SchemaVersion());
  EXPECT_EQ(version, count);
  Reopen();  // would fail if a migration's CREATE TABLE ran again
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t again, store_->SchemaVersion());
  EXPECT_EQ(again, count);
  LOOM_ASSERT_OK_AND_ASSIGN(auto conn, Connect());
  LOOM_ASSERT_OK_AND_ASSIGN(SqlResult rows, ExecPlain(*conn, "SELECT version FROM schema_version"));
  EXPECT_EQ(static_cast<int64_t>(rows.rows.size()), count);
}

TEST_P(StoreTest, NewMigrationAppliesOnceOnTopOfExistingData) {
  LOOM_ASSERT_OK(store_->CreateAccount("alice", 1));
  std::vector<Migration> migrations(Migrations().begin(), Migrations().end());
  migrations.push_back({"a ledger stand-in",
                        {"CREATE TABLE extra (id {id}, amount BIGINT NOT NULL)",
                         "CREATE INDEX extra_by_amount ON extra (amount)"}});
  LOOM_ASSERT_OK_AND_ASSIGN(auto conn, Connect());
  LOOM_ASSERT_OK(Migrate(*conn, migrations));
  LOOM_ASSERT_OK(Migrate(*conn, migrations));
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t version, ReadSchemaVersion(*conn));
  EXPECT_EQ(version, static_cast<int64_t>(migrations.size()));
  LOOM_ASSERT_OK(ExecPlain(*conn, "INSERT INTO extra (amount) VALUES (5)"));
  LOOM_ASSERT_OK_AND_ASSIGN(Account alice, store_->FindAccount("alice"));
  EXPECT_EQ(alice.name, "alice");
}

TEST_P(StoreTest, FailedMigrationRollsBackWholeAndNamesItself) {
  std::vector<Migration> migrations(Migrations().begin(), Migrations().end());
  migrations.push_back(
      {"half good", {"CREATE TABLE extra (x BIGINT)", "INSERT INTO no_such_table VALUES (1)"}});
  LOOM_ASSERT_OK_AND_ASSIGN(auto conn, Connect());
  const Status failed = Migrate(*conn, migrations);
  ASSERT_FALSE(failed.ok());
  const std::string number = StrCat("migration ", migrations.size(), " (half good): statement 2");
  EXPECT_TRUE(Contains(failed.message(), number)) << failed.ToString();
  LOOM_ASSERT_OK_AND_ASSIGN(int64_t version, ReadSchemaVersion(*conn));
  EXPECT_EQ(version, static_cast<int64_t>(Migrations().size()));
  LOOM_EXPECT_OK(ExecPlain(*conn, "CREATE TABLE extra (x BIGINT)"));  // it was rolled back
}

TEST_P(StoreTest, DatabaseFromANewerHubIsRefused) {
  LOOM_ASSERT_OK_AND_ASSIGN(auto conn, Connect());
  LOOM_ASSERT_OK(ExecPlain(
      *conn, "INSERT INTO schema_version (version, description, applied_ms) VALUES (99, 'x', 0)"));
  store_.reset();
  auto opened = OpenStore(url_);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(opened.status().message(), "schema version 99"))
      << opened.status().ToString();
}

TEST_P(StoreTest, QuotesAndUnicodeRoundTrip) {
  const std::vector<std::string> names = {"Robert'); DROP TABLE accounts;--",
                                          "it's \"quoted\" \\ and %_ wild", "名前 ✓ ümlaut 🚀",
                                          "$1 ? :name @x", "' OR '1'='1"};
  for (const std::string& name : names) LOOM_ASSERT_OK(store_->CreateAccount(name, 1));
  for (const std::string& name : names) {
    LOOM_ASSERT_OK_AND_ASSIGN(Account a, store_->FindAccount(name));
    EXPECT_EQ(a.name, name);
  }
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Account> all, store_->ListAccounts());
  ASSERT_EQ(all.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(all[i].name, names[i]);
  EXPECT_EQ(store_->FindAccount("' OR 1=1 --").status().code(), StatusCode::kNotFound);

  JobRecord job = Job("job-' \"x\" ✓", 1);
  job.model = "модель/ü";
  job.error = "line 1\nline 2\ttab";
  LOOM_ASSERT_OK(store_->CreateJob(job));
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> back, store_->FindJob(job.job_id));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->model, job.model);
  EXPECT_EQ(back->error, job.error);
}

TEST_P(StoreTest, NulAndInvalidUtf8AreRefusedAlike) {
  const Status nul = store_->CreateAccount(std::string("a\0b", 3), 1).status();
  EXPECT_EQ(nul.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(nul.message(), "NUL")) << nul.ToString();
  EXPECT_EQ(store_->CreateAccount("bad \xff\xfe", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->CreateAccount("overlong \xc0\xaf", 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->CreateAccount("cut \xe2\x9c", 1).status().code(), StatusCode::kInvalidArgument);
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Account> all, store_->ListAccounts());
  EXPECT_TRUE(all.empty());
}

// ---- SQLite only ----

TEST(SqliteStoreTest, BadPathsGiveClearErrors) {
  auto no_dir = OpenStore("/nonexistent_loom_dir/sub/hub.db");
  ASSERT_FALSE(no_dir.ok());
  EXPECT_EQ(no_dir.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(no_dir.status().message(), "directory '/nonexistent_loom_dir/sub'"))
      << no_dir.status().ToString();

  TempDir dir;
  auto is_dir = OpenStore(dir.path());
  ASSERT_FALSE(is_dir.ok());
  EXPECT_EQ(is_dir.status().code(), StatusCode::kInvalidArgument);

  const std::string junk = dir.path() + "/junk.db";
  std::ofstream(junk) << std::string(4096, 'x');
  auto not_db = OpenStore(junk);
  ASSERT_FALSE(not_db.ok());
  EXPECT_EQ(not_db.status().code(), StatusCode::kDataLoss) << not_db.status().ToString();
  EXPECT_TRUE(Contains(not_db.status().message(), junk));

  EXPECT_EQ(OpenStore("").status().code(), StatusCode::kInvalidArgument);
}

TEST(SqliteStoreTest, TwoConnectionsShareOneFile) {
  TempDir dir;
  const std::string path = dir.path() + "/hub.db";
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> hub, OpenStore(path));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> tool, OpenStore(path));
  LOOM_ASSERT_OK(hub->CreateAccount("alice", 1));
  LOOM_ASSERT_OK_AND_ASSIGN(Account seen, tool->FindAccount("alice"));
  EXPECT_EQ(seen.name, "alice");
  LOOM_ASSERT_OK(tool->CreateJob(Job("job-1", 1)));
  LOOM_ASSERT_OK(hub->CreateJob(Job("job-2", 2)));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> jobs, hub->ListJobs(10, std::nullopt));
  EXPECT_EQ(jobs.size(), 2u);
  EXPECT_EQ(tool->CreateAccount("alice", 2).status().code(), StatusCode::kFailedPrecondition);
}

// A writer killed with SIGKILL right after calls returned loses none of them: each call
// committed before returning.  The child reports each finished call's id through a pipe.
TEST(SqliteStoreTest, KilledWriterLosesNoAcknowledgedJob) {
  constexpr int kJobs = 200;
  TempDir dir;
  const std::string path = dir.path() + "/hub.db";
  LOOM_ASSERT_OK(OpenStore(path));  // migrated before the child starts writing
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    auto store = OpenStore(path);
    if (!store.ok()) ::_exit(2);
    for (int i = 0;; ++i) {  // runs until killed
      const JobRecord job = Job(StrCat("job-", i), i);
      if (!(*store)->CreateJob(job).ok()) ::_exit(3);
      const std::string line = job.job_id + "\n";
      if (::write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        ::_exit(4);
      }
    }
  }
  ::close(fds[1]);
  std::vector<std::string> acknowledged;
  std::string pending;
  char buffer[256];
  while (static_cast<int>(acknowledged.size()) < kJobs) {
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buffer[i] != '\n') {
        pending += buffer[i];
      } else {
        acknowledged.push_back(pending);
        pending.clear();
        if (static_cast<int>(acknowledged.size()) == kJobs) break;
      }
    }
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(fds[0]);
  ASSERT_TRUE(WIFSIGNALED(status))
      << "the child stopped by itself, exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  ASSERT_EQ(static_cast<int>(acknowledged.size()), kJobs);

  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(path));
  for (const std::string& id : acknowledged) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> job, store->FindJob(id));
    EXPECT_TRUE(job.has_value()) << id << " was acknowledged but is gone";
  }
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<JobRecord> all, store->ListJobs(1 << 20, std::nullopt));
  EXPECT_GE(static_cast<int>(all.size()), kJobs);
  LOOM_ASSERT_OK_AND_ASSIGN(auto conn, OpenSqliteConnection(path));
  LOOM_ASSERT_OK_AND_ASSIGN(SqlResult check, ExecPlain(*conn, "PRAGMA integrity_check"));
  ASSERT_FALSE(check.rows.empty());
  EXPECT_EQ(check.rows[0][0], "ok");
}

// ---- PostgreSQL only ----

TEST(PostgresStoreTest, UnreachableServerIsUnavailableAndNamed) {
  auto socket = OpenStore("postgresql://loom@/hub?host=/nonexistent_loom_dir&port=5999");
  ASSERT_FALSE(socket.ok());
  EXPECT_EQ(socket.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(socket.status().message(), "server '/nonexistent_loom_dir:5999'"))
      << socket.status().ToString();
  EXPECT_TRUE(Contains(socket.status().message(), "database 'hub'"));

  auto tcp = OpenStore("postgres://loom:sekrit@127.0.0.1:1/hub");
  ASSERT_FALSE(tcp.ok());
  EXPECT_EQ(tcp.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(tcp.status().message(), "127.0.0.1:1")) << tcp.status().ToString();
  EXPECT_FALSE(Contains(tcp.status().message(), "sekrit"));

  EXPECT_EQ(OpenStore("postgresql://[bad").status().code(), StatusCode::kInvalidArgument);
}

TEST(PostgresStoreTest, MissingDatabaseIsNamed) {
  LOOM_REQUIRE_POSTGRES(server);
  auto missing = OpenStore(server->Url("no_such_db"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(missing.status().message(), "no_such_db")) << missing.status().ToString();
}

TEST(PostgresStoreTest, TwoStoresShareOneDatabase) {
  LOOM_REQUIRE_POSTGRES(server);
  const std::string name = StrCat("t_", ++Postgres().databases);
  LOOM_ASSERT_OK(server->CreateDatabase(name));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> first, OpenStore(server->Url(name)));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> second, OpenStore(server->Url(name)));
  LOOM_ASSERT_OK(first->CreateAccount("alice", 1));
  LOOM_ASSERT_OK_AND_ASSIGN(Account seen, second->FindAccount("alice"));
  EXPECT_EQ(seen.name, "alice");
}

}  // namespace
}  // namespace loom::network::store
