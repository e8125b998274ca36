// Pull against the fake hub: fresh download, no-op second pull, resume, hash checks, tokens,
// gated and missing repositories, offline.
#include "loom/fetch/hub_pull.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "loom/fetch/fake_hub.h"
#include "loom/model/model_cache.h"

namespace loom::fetch {
namespace {

namespace fs = std::filesystem;
using testing::FakeFile;
using testing::ClosedLoopbackPort;
using testing::FakeHub;
using testing::ReadWholeFile;
using testing::FakeRepo;

const std::string kCommit = "c0ffee0000000000000000000000000000000001";
constexpr size_t kWeightBytes = 200000;

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed;
  for (char& c : s) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}


FakeRepo ModelRepo(const std::string& id) {
  FakeRepo repo{id, kCommit, {}, "", ""};
  repo.files.push_back({"README.md", "# a model\n", false, false});
  repo.files.push_back({"config.json", R"({"model_type":"llama","hidden_size":64})", false, false});
  repo.files.push_back({"tokenizer.json", R"({"model":{"type":"BPE"}})", false, false});
  repo.files.push_back({"model.safetensors", Pattern(kWeightBytes, 7), true, false});
  return repo;
}

class HubPullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"}) ::unsetenv(v);
    StatusOr<std::unique_ptr<FakeHub>> hub = FakeHub::Start();
    ASSERT_TRUE(hub.ok()) << hub.status().ToString();
    hub_ = std::move(hub).value();
    char tmpl[] = "/tmp/loom_pull_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    cache_ = tmpl;
    options_.repo_id = "org/model";
    options_.cache_dir = cache_;
    options_.endpoint = hub_->endpoint();
    options_.retry_delay_ms = 1;
    options_.http.connect_timeout_ms = 5000;
    options_.http.stall_timeout_ms = 5000;
  }
  void TearDown() override {
    hub_.reset();
    std::error_code ec;
    fs::remove_all(cache_, ec);
  }

  StatusOr<PullResult> DoPull() { return Pull(options_, progress_); }
  std::string Blob(const std::string& content, bool lfs) const {
    return model::BlobPath(cache_, options_.repo_id,
                           lfs ? FakeHub::Sha256Hex(content) : FakeHub::GitBlobSha1Hex(content));
  }

  std::unique_ptr<FakeHub> hub_;
  std::string cache_;
  PullOptions options_;
  TransferProgress progress_{nullptr, false};
};

TEST_F(HubPullTest, FreshPullStoresVerifiedFilesInASnapshot) {
  const FakeRepo repo = ModelRepo("org/model");
  hub_->AddRepo(repo);
  StatusOr<PullResult> r = DoPull();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->commit, kCommit);
  EXPECT_EQ(r->snapshot_dir, model::SnapshotDir(cache_, "org/model", kCommit));
  EXPECT_EQ(r->model_path, r->snapshot_dir);
  EXPECT_EQ(r->files.size(), 3u);
  EXPECT_EQ(r->bytes_downloaded, static_cast<int64_t>(kWeightBytes + repo.files[1].content.size() +
                                                      repo.files[2].content.size()));
  for (const FakeFile& f : repo.files) {
    const fs::path link = fs::path(r->snapshot_dir) / f.path;
    if (f.path == "README.md") {
      EXPECT_FALSE(fs::exists(link));
      continue;
    }
    ASSERT_TRUE(fs::is_symlink(link)) << link;
    EXPECT_EQ(fs::read_symlink(link).string(),
              "../../blobs/" + fs::path(Blob(f.content, f.lfs)).filename().string());
    EXPECT_EQ(ReadWholeFile(link.string()), f.content) << f.path;
  }
  EXPECT_EQ(hub_->CountRequests("README"), 0);
  StatusOr<std::string> ref = model::ReadRef(cache_, "org/model", "main");
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  EXPECT_EQ(*ref, kCommit);
  for (const auto& e :
       fs::directory_iterator(model::RepoCacheDir(cache_, "org/model") + "/blobs")) {
    EXPECT_NE(e.path().extension(), ".part") << e.path();
  }
  // Large files come by commit, through the CDN; the API was asked for blobs.
  EXPECT_EQ(hub_->CountRequests("/api/models/org/model/revision/main?blobs=true"), 1);
  EXPECT_EQ(hub_->CountRequests("/org/model/resolve/" + kCommit + "/model.safetensors"), 1);
  EXPECT_EQ(hub_->CountRequests("/blobs/"), 1);
}

TEST_F(HubPullTest, SecondPullDownloadsNothing) {
  hub_->AddRepo(ModelRepo("org/model"));
  ASSERT_TRUE(DoPull().ok());
  const size_t requests = hub_->requests().size();
  StatusOr<PullResult> again = DoPull();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->bytes_downloaded, 0);
  for (const PulledFile& f : again->files) EXPECT_FALSE(f.downloaded) << f.path;
  // Only the model-info question was asked again.
  EXPECT_EQ(hub_->requests().size(), requests + 1);
}

TEST_F(HubPullTest, DroppedConnectionIsResumedWithARange) {
  const FakeRepo repo = ModelRepo("org/model");
  hub_->AddRepo(repo);
  hub_->DropAfter("model.safetensors", 70000, 1);
  StatusOr<PullResult> r = DoPull();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<std::string> cdn_ranges;
  for (const auto& req : hub_->requests()) {
    if (req.listener == "cdn") cdn_ranges.push_back(req.range);
  }
  EXPECT_EQ(cdn_ranges, (std::vector<std::string>{"", "bytes=70000-"}));
  EXPECT_EQ(ReadWholeFile(r->snapshot_dir + "/model.safetensors"), repo.files[3].content);
}

TEST_F(HubPullTest, InterruptedPullLeavesAPartFileTheNextPullResumes) {
  const FakeRepo repo = ModelRepo("org/model");
  hub_->AddRepo(repo);
  hub_->DropAfter("model.safetensors", 70000, 1);
  options_.max_attempts = 1;
  StatusOr<PullResult> r = DoPull();
  ASSERT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("run the same command again to resume"), std::string::npos)
      << r.status().message();
  const std::string blob = Blob(repo.files[3].content, true);
  EXPECT_FALSE(fs::exists(blob));
  ASSERT_TRUE(fs::exists(blob + ".part"));
  EXPECT_EQ(fs::file_size(blob + ".part"), 70000u);
  // Nothing resolves to the half-pulled model.
  EXPECT_FALSE(fs::exists(model::RefPath(cache_, "org/model", "main")));
  const std::vector<std::string> dirs = {cache_};
  EXPECT_EQ(model::ResolveModelPath("org/model", dirs).status().code(), StatusCode::kNotFound);

  r = DoPull();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<std::string> cdn_ranges;
  for (const auto& req : hub_->requests()) {
    if (req.listener == "cdn") cdn_ranges.push_back(req.range);
  }
  EXPECT_EQ(cdn_ranges, (std::vector<std::string>{"", "bytes=70000-"}));
  EXPECT_EQ(ReadWholeFile(blob), repo.files[3].content);
  EXPECT_FALSE(fs::exists(blob + ".part"));
  // The rest of the weights, and tokenizer.json, which the first pull never reached.
  EXPECT_EQ(r->bytes_downloaded,
            static_cast<int64_t>(kWeightBytes - 70000 + repo.files[2].content.size()));
}

TEST_F(HubPullTest, ServerThatIgnoresTheRangeStartsOver) {
  const FakeRepo repo = ModelRepo("org/model");
  hub_->AddRepo(repo);
  hub_->DropAfter("model.safetensors", 50000, 1);
  options_.max_attempts = 1;
  ASSERT_FALSE(DoPull().ok());
  hub_->set_ignore_range(true);
  StatusOr<PullResult> r = DoPull();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadWholeFile(r->snapshot_dir + "/model.safetensors"), repo.files[3].content);
}

TEST_F(HubPullTest, HashMismatchIsRejectedAndNothingMovesIntoPlace) {
  for (const bool lfs : {true, false}) {
    SCOPED_TRACE(lfs ? "lfs sha256" : "git sha1");
    FakeRepo repo = ModelRepo(lfs ? "org/bad-lfs" : "org/bad-small");
    FakeFile& victim = repo.files[lfs ? 3 : 1];
    victim.corrupt = true;
    hub_->AddRepo(repo);
    options_.repo_id = repo.id;
    StatusOr<PullResult> r = DoPull();
    ASSERT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
    EXPECT_NE(r.status().message().find(victim.path), std::string::npos);
    EXPECT_NE(r.status().message().find(lfs ? "sha256 mismatch" : "git sha1 mismatch"),
              std::string::npos)
        << r.status().message();
    const std::string blob = model::BlobPath(
        cache_, repo.id,
        lfs ? FakeHub::Sha256Hex(victim.content) : FakeHub::GitBlobSha1Hex(victim.content));
    EXPECT_FALSE(fs::exists(blob));
    EXPECT_FALSE(fs::exists(blob + ".part"));
    EXPECT_FALSE(fs::exists(model::SnapshotDir(cache_, repo.id, kCommit) + "/" + victim.path));
    EXPECT_FALSE(fs::exists(model::RefPath(cache_, repo.id, "main")));
  }
}

TEST_F(HubPullTest, GatedModelWithoutTokenSaysToSetHfToken) {
  FakeRepo repo = ModelRepo("org/model");
  repo.gated = "manual";
  repo.token = "hf_good";
  hub_->AddRepo(repo);
  StatusOr<PullResult> r = DoPull();
  ASSERT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().ToString();
  EXPECT_NE(r.status().message().find("gated"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("HF_TOKEN"), std::string::npos) << r.status().message();
  EXPECT_EQ(hub_->CountRequests("/resolve/"), 0);
}

TEST_F(HubPullTest, GatedModelWithATokenWithoutAccessIsDenied) {
  FakeRepo repo = ModelRepo("org/model");
  repo.gated = "manual";
  repo.token = "hf_good";
  hub_->AddRepo(repo);
  options_.token = "hf_other";
  StatusOr<PullResult> r = DoPull();
  ASSERT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().ToString();
  EXPECT_NE(r.status().message().find("GatedRepo"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("HF_TOKEN"), std::string::npos);
}

TEST_F(HubPullTest, TokenGoesToTheHubButNotToTheCdn) {
  FakeRepo repo = ModelRepo("org/model");
  repo.gated = "manual";
  repo.token = "hf_good";
  hub_->AddRepo(repo);
  options_.token = "hf_good";
  StatusOr<PullResult> r = DoPull();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  int hub = 0, cdn = 0;
  for (const auto& req : hub_->requests()) {
    if (req.listener == "hub") {
      EXPECT_EQ(req.authorization, "Bearer hf_good") << req.target;
      ++hub;
    } else {
      EXPECT_EQ(req.authorization, "") << req.target;
      ++cdn;
    }
  }
  EXPECT_EQ(hub, 4);  // model info + three files
  EXPECT_EQ(cdn, 1);
}

TEST_F(HubPullTest, UnreachableHubIsAClearError) {
  hub_->AddRepo(ModelRepo("org/model"));
  ASSERT_TRUE(DoPull().ok());
  options_.endpoint = "http://127.0.0.1:" + std::to_string(ClosedLoopbackPort());
  StatusOr<PullResult> r = DoPull();
  ASSERT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("cannot reach the hub at " + options_.endpoint), std::string::npos) << m;
  EXPECT_NE(m.find("HF_ENDPOINT"), std::string::npos) << m;
  EXPECT_NE(m.find("already in the cache"), std::string::npos) << m;
}

TEST_F(HubPullTest, MissingRepositoryAndRevisionAreNamed) {
  hub_->AddRepo(ModelRepo("org/model"));
  options_.repo_id = "org/absent";
  StatusOr<PullResult> r = DoPull();  // anonymous: the hub answers 401, as for a private repo
  ASSERT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().ToString();
  EXPECT_NE(r.status().message().find("HF_TOKEN"), std::string::npos);
  options_.token = "hf_any";
  r = DoPull();
  ASSERT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
  EXPECT_NE(r.status().message().find("org/absent"), std::string::npos);

  options_.repo_id = "org/model";
  options_.revision = "v9";
  r = DoPull();
  ASSERT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
  EXPECT_NE(r.status().message().find("revision 'v9' not found"), std::string::npos)
      << r.status().message();
}

TEST_F(HubPullTest, GgufRepositoryPullsTheIncludedFileAndResolvesToIt) {
  FakeRepo repo{"org/gguf", kCommit, {}, "", ""};
  repo.files.push_back({"m-Q4_0.gguf", Pattern(30000, 1), true, false});
  repo.files.push_back({"m-Q8_0.gguf", Pattern(50000, 2), true, false});
  hub_->AddRepo(repo);
  options_.repo_id = "org/gguf";
  StatusOr<PullResult> r = DoPull();
  ASSERT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("--include"), std::string::npos);

  options_.include = {"*Q8_0*"};
  r = DoPull();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model_path, r->snapshot_dir + "/m-Q8_0.gguf");
  EXPECT_EQ(hub_->CountRequests("m-Q4_0"), 0);
  const std::vector<std::string> dirs = {cache_};
  StatusOr<std::string> resolved = model::ResolveModelPath("org/gguf", dirs);
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  EXPECT_EQ(*resolved, r->model_path);
  EXPECT_EQ(ReadWholeFile(*resolved), repo.files[1].content);
}

TEST_F(HubPullTest, IndexedShardsReplaceOtherCopiesOfTheWeights) {
  FakeRepo repo{"org/sharded", kCommit, {}, "", ""};
  repo.files.push_back({"config.json", "{}", false, false});
  repo.files.push_back({"consolidated.safetensors", Pattern(40000, 3), true, false});
  repo.files.push_back({"model-00001-of-00002.safetensors", Pattern(20000, 4), true, false});
  repo.files.push_back({"model-00002-of-00002.safetensors", Pattern(20000, 5), true, false});
  repo.files.push_back({"model.safetensors.index.json",
                        R"({"weight_map":{"a":"model-00001-of-00002.safetensors",)"
                        R"("b":"model-00002-of-00002.safetensors"}})",
                        false, false});
  hub_->AddRepo(repo);
  options_.repo_id = "org/sharded";
  StatusOr<PullResult> r = DoPull();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(hub_->CountRequests("consolidated"), 0);
  EXPECT_EQ(r->files.size(), 4u);
  EXPECT_TRUE(fs::exists(r->snapshot_dir + "/model-00002-of-00002.safetensors"));
}

TEST_F(HubPullTest, PullByCommitLinksTheSnapshotWithoutARef) {
  hub_->AddRepo(ModelRepo("org/model"));
  options_.revision = kCommit;
  StatusOr<PullResult> r = DoPull();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(fs::exists(model::RefPath(cache_, "org/model", kCommit)));
  const std::vector<std::string> dirs = {cache_};
  StatusOr<std::string> resolved = model::ResolveModelPath("org/model@" + kCommit, dirs);
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  EXPECT_EQ(*resolved, r->snapshot_dir);
}

TEST_F(HubPullTest, ProgressWithoutATerminalIsALinePerFile) {
  hub_->AddRepo(ModelRepo("org/model"));
  char* text = nullptr;
  size_t size = 0;
  FILE* out = ::open_memstream(&text, &size);
  ASSERT_NE(out, nullptr);
  {
    TransferProgress progress(out, /*interactive=*/false);
    ASSERT_TRUE(Pull(options_, progress).ok());
    ASSERT_TRUE(Pull(options_, progress).ok());
  }
  std::fclose(out);
  const std::string s(text, size);
  std::free(text);
  EXPECT_NE(s.find("pull org/model@main (commit c0ffee000000): 3 files"), std::string::npos) << s;
  EXPECT_NE(s.find("\nmodel.safetensors  195.31 KiB in "), std::string::npos) << s;
  EXPECT_NE(s.find("\nmodel.safetensors  195.31 KiB, already in the cache\n"), std::string::npos)
      << s;
  EXPECT_EQ(s.find('\r'), std::string::npos);
}

}  // namespace
}  // namespace loom::fetch
