// `loom pull` and `loom info -m ORG/NAME` through the binary, against the fake hub serving a small
// synthetic GGUF model.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/fetch/fake_hub.h"
#include "loom/model/synth.h"

namespace loom::fetch {
namespace {

namespace fs = std::filesystem;
using testing::ClosedLoopbackPort;
using testing::FakeHub;
using testing::ReadWholeFile;
using testing::FakeRepo;

const std::string kLoom = std::string(LOOM_BINARY_DIR) + "/src/loom/cli/loom";
const std::string kCommit = "abcdef0123456789abcdef0123456789abcdef01";

struct CommandRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};


class PullCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kLoom)) << kLoom << " is not built";
    StatusOr<std::unique_ptr<FakeHub>> hub = FakeHub::Start();
    ASSERT_TRUE(hub.ok()) << hub.status().ToString();
    hub_ = std::move(hub).value();
    char tmpl[] = "/tmp/loom_pull_cli_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;

    const model::SynthShape* shape = model::FindSynthShape("tiny");
    ASSERT_NE(shape, nullptr);
    model::SynthOptions synth;
    synth.shape = *shape;
    synth.type = kernels::DType::kQ8_0;
    synth.threads = 1;
    std::vector<std::byte> bytes;
    ASSERT_TRUE(model::WriteSynthModelToMemory(synth, &bytes).ok());
    gguf_.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    FakeRepo repo{"org/tiny", kCommit, {}, "", ""};
    repo.files.push_back({"README.md", "tiny\n", false, false});
    repo.files.push_back({"tiny-Q8_0.gguf", gguf_, true, false});
    hub_->AddRepo(repo);
  }
  void TearDown() override {
    hub_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs `loom ARGS` with the cache and endpoint of this test (no token, no proxy), bounded.
  CommandRun Loom(const std::string& args, const std::string& endpoint = "") {
    const std::string env =
        "env -u HF_TOKEN -u http_proxy -u HTTP_PROXY -u all_proxy -u ALL_PROXY LOOM_CACHE=" + dir_ +
        "/cache HF_HUB_CACHE=" + dir_ +
        "/no-hf-cache HF_ENDPOINT=" + (endpoint.empty() ? hub_->endpoint() : endpoint);
    const std::string cmd = env + " timeout 120 " + kLoom + " " + args + " >" + dir_ +
                            "/out.txt 2>" + dir_ + "/err.txt";
    CommandRun r;
    const int status = std::system(cmd.c_str());
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = ReadWholeFile(dir_ + "/out.txt");
    r.err = ReadWholeFile(dir_ + "/err.txt");
    return r;
  }

  std::unique_ptr<FakeHub> hub_;
  std::string dir_;
  std::string gguf_;
};

TEST_F(PullCliTest, PullThenInfoByName) {
  const CommandRun pull = Loom("pull org/tiny --include '*.gguf'");
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  const std::string path =
      dir_ + "/cache/models--org--tiny/snapshots/" + kCommit + "/tiny-Q8_0.gguf";
  EXPECT_EQ(pull.out, path + "\n");
  // stderr is not a terminal here: a line per file, no bar.
  EXPECT_NE(pull.err.find("tiny-Q8_0.gguf  "), std::string::npos) << pull.err;
  EXPECT_EQ(pull.err.find('\r'), std::string::npos) << pull.err;
  EXPECT_EQ(ReadWholeFile(path), gguf_);

  const CommandRun info = Loom("info -m org/tiny --json");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const nlohmann::json j = nlohmann::json::parse(info.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << info.out;
  EXPECT_EQ(j["path"], path);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["hparams"]["dim"], 64);
  EXPECT_EQ(j["loadable"], true);

  const CommandRun by_commit = Loom("info -m org/tiny@" + kCommit + " --json");
  EXPECT_EQ(by_commit.exit_code, 0) << by_commit.err;

  // Pulling again transfers nothing.
  const CommandRun again = Loom("pull org/tiny --include '*.gguf'");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("already in the cache"), std::string::npos) << again.err;
}

TEST_F(PullCliTest, UnknownNameSuggestsPull) {
  const CommandRun info = Loom("info -m org/absent");
  EXPECT_EQ(info.exit_code, 1);
  EXPECT_NE(info.err.find("loom pull org/absent"), std::string::npos) << info.err;
}

TEST_F(PullCliTest, GgufRepositoryWithoutIncludeExplains) {
  const CommandRun pull = Loom("pull org/tiny");
  EXPECT_EQ(pull.exit_code, 1);
  EXPECT_NE(pull.err.find("--include"), std::string::npos) << pull.err;
  EXPECT_NE(pull.err.find("tiny-Q8_0.gguf"), std::string::npos) << pull.err;
}

TEST_F(PullCliTest, OfflineIsAClearError) {
  const CommandRun pull =
      Loom("pull org/tiny --include '*.gguf'", "http://127.0.0.1:" + std::to_string(ClosedLoopbackPort()));
  EXPECT_EQ(pull.exit_code, 1);
  EXPECT_NE(pull.err.find("cannot reach the hub"), std::string::npos) << pull.err;
}

TEST_F(PullCliTest, BadUsageIsExitCode2) {
  EXPECT_EQ(Loom("pull").exit_code, 2);
  EXPECT_EQ(Loom("pull not-a-repo-id").exit_code, 2);
}

}  // namespace
}  // namespace loom::fetch
