// The fixture of the store suites (store_test.cc, ledger_test.cc): every TEST_P runs against a
// fresh SQLite file and a fresh database on a temporary PostgreSQL server (started once per
// binary, on first use, and stopped when the tests are over).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "loom/network/store/postgres/postgres_store.h"
#include "loom/network/store/postgres/temp_postgres.h"
#include "loom/network/store/sql.h"
#include "loom/network/store/sqlite/sqlite_store.h"
#include "loom/network/store/store.h"

namespace loom::network::store {

inline const Status& StatusOf(const Status& s) { return s; }
template <class T>
const Status& StatusOf(const StatusOr<T>& s) {
  return s.status();
}

#define LOOM_EXPECT_OK(expr)                         \
  do {                                               \
    const ::loom::Status loom_s_ = StatusOf(expr);   \
    EXPECT_TRUE(loom_s_.ok()) << loom_s_.ToString(); \
  } while (0)
#define LOOM_ASSERT_OK(expr)                         \
  do {                                               \
    const ::loom::Status loom_s_ = StatusOf(expr);   \
    ASSERT_TRUE(loom_s_.ok()) << loom_s_.ToString(); \
  } while (0)
#define LOOM_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  LOOM_ASSERT_OK_AND_ASSIGN_IMPL(LOOM_CONCAT(loom_r_, __LINE__), lhs, expr)
#define LOOM_ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();    \
  lhs = std::move(tmp).value()

inline bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// A temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "loom_store_XXXXXX").string();
    if (::mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---- the PostgreSQL server: one per binary, started by the first test that needs it ----

struct PostgresState {
  bool tried = false;
  Status failure;  // why there is no server
  std::unique_ptr<TempPostgres> server;
  int databases = 0;
};

inline PostgresState& Postgres() {
  static PostgresState state;
  return state;
}

inline TempPostgres* PostgresServer() {
  PostgresState& pg = Postgres();
  if (!pg.tried) {
    pg.tried = true;
    auto started = TempPostgres::Start();
    if (started.ok()) {
      pg.server = std::move(started).value();
    } else {
      pg.failure = started.status();
      if (pg.failure.code() == StatusCode::kNotFound) {
        std::fprintf(stderr, "\n*** %s ***\n\n", kPostgresMissingMessage);
      }
    }
  }
  return pg.server.get();
}

// Stops the server when the tests are over (gtest owns the environment it is given).
class StopPostgres : public ::testing::Environment {
 public:
  void TearDown() override { Postgres().server.reset(); }
};
// Registered once per binary, by store_test.cc.

// In a test body: `server` is the running server, or the test is skipped (not installed) or
// failed (installed but would not start).
#define LOOM_REQUIRE_POSTGRES(server)                                                             \
  TempPostgres* const server = PostgresServer();                                                  \
  if (server == nullptr) {                                                                        \
    if (Postgres().failure.code() == StatusCode::kNotFound) {                                     \
      GTEST_SKIP() << kPostgresMissingMessage;                                                    \
    }                                                                                             \
    FAIL() << "the temporary PostgreSQL server did not start: " << Postgres().failure.ToString(); \
  }

// ---- the suite over both engines ----

inline JobRecord Job(std::string id, int64_t created_ms, JobState state = JobState::kRunning) {
  JobRecord job;
  job.job_id = std::move(id);
  job.account_id = 1;
  job.model = "qwen3-0.6b";
  job.endpoint = "/v1/chat/completions";
  job.state = state;
  job.created_ms = created_ms;
  return job;
}

inline AttemptRecord Attempt(std::string id, std::string job_id, int32_t number) {
  AttemptRecord a;
  a.attempt_id = std::move(id);
  a.job_id = std::move(job_id);
  a.node_id = "node-1";
  a.number = number;
  a.started_ms = 100 + number;
  return a;
}

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      ASSERT_FALSE(dir_.path().empty());
      url_ = dir_.path() + "/hub.db";
    } else {
      LOOM_REQUIRE_POSTGRES(server);
      const std::string name = StrCat("t_", ++Postgres().databases);
      LOOM_ASSERT_OK(server->CreateDatabase(name));
      url_ = server->Url(name);
    }
    Reopen();
  }

  void Reopen() {
    store_.reset();
    LOOM_ASSERT_OK_AND_ASSIGN(store_, OpenStore(url_));
  }

  StatusOr<std::unique_ptr<SqlConnection>> Connect() {
    return GetParam() == "sqlite" ? OpenSqliteConnection(url_) : OpenPostgresConnection(url_);
  }

  TempDir dir_;
  std::string url_;
  std::unique_ptr<Store> store_;
};

}  // namespace loom::network::store
