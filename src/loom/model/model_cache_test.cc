#include "loom/model/model_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace loom::model {
namespace {

namespace fs = std::filesystem;

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kOther = "89abcdef0123456789abcdef0123456789abcdef";

void Touch(const fs::path& path, const std::string& content = "x") {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << content;
}

class ModelCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom_model_cache_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    cache_ = root_ + "/loom";
    hf_cache_ = root_ + "/hf";
    fs::create_directories(cache_);
    fs::create_directories(hf_cache_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // A pulled snapshot with `files`, recorded under refs/`revision` when that is not empty.
  std::string Snapshot(const std::string& cache, const std::string& repo, const std::string& commit,
                       const std::vector<std::string>& files, const std::string& revision) {
    const std::string dir = SnapshotDir(cache, repo, commit);
    fs::create_directories(dir);
    for (const std::string& f : files) Touch(fs::path(dir) / f);
    if (!revision.empty()) {
      EXPECT_TRUE(WriteRef(cache, repo, revision, commit).ok());
    }
    return dir;
  }

  std::string root_, cache_, hf_cache_;
};

TEST(ModelNameTest, ParsesOrgNameAndRevision) {
  StatusOr<ModelName> n = ParseModelName("meta-llama/Llama-3.2-1B");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->repo_id, "meta-llama/Llama-3.2-1B");
  EXPECT_EQ(n->revision, "main");
  EXPECT_FALSE(n->revision_given);
  n = ParseModelName("Qwen/Qwen2.5-0.5B-Instruct@refs/pr/1");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->repo_id, "Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(n->revision, "refs/pr/1");
  EXPECT_TRUE(n->revision_given);
}

TEST(ModelNameTest, RejectsWhatIsNotARepositoryId) {
  for (const char* bad : {"model.gguf", "a/b/c", "/abs/path", "./x/y", "org/", "/name", "o rg/n",
                          "org/-name", "org/name.", "org/na--me", "org/na..me", "org/name@",
                          "org/name@../x", "org/name@/main", "org/name@a//b"}) {
    EXPECT_FALSE(ParseModelName(bad).ok()) << bad;
  }
  EXPECT_FALSE(IsValidRepoId("org/" + std::string(97, 'a')));
  EXPECT_TRUE(IsValidRepoId("org/" + std::string(96, 'a')));
}

TEST(ModelNameTest, CommitHashes) {
  EXPECT_TRUE(IsCommitHash(kCommit));
  EXPECT_FALSE(IsCommitHash("main"));
  EXPECT_FALSE(IsCommitHash(std::string(40, 'A')));
  EXPECT_FALSE(IsCommitHash(std::string(39, 'a')));
}

TEST(ModelNameTest, CacheLayoutMatchesHuggingfaceHub) {
  EXPECT_EQ(RepoCacheDir("/c", "org/name"), "/c/models--org--name");
  EXPECT_EQ(RefPath("/c", "org/name", "main"), "/c/models--org--name/refs/main");
  EXPECT_EQ(SnapshotDir("/c", "org/name", kCommit), "/c/models--org--name/snapshots/" + kCommit);
  EXPECT_EQ(BlobPath("/c", "org/name", "ab"), "/c/models--org--name/blobs/ab");
}

TEST_F(ModelCacheTest, ExistingPathIsReturnedAsItIs) {
  Touch(fs::path(root_) / "m.gguf");
  const std::vector<std::string> dirs = {cache_};
  StatusOr<std::string> p = ResolveModelPath(root_ + "/m.gguf", dirs);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, root_ + "/m.gguf");
}

TEST_F(ModelCacheTest, HuggingFaceSnapshotResolvesToItsDirectory) {
  const std::string dir =
      Snapshot(cache_, "org/llama", kCommit, {"config.json", "model.safetensors"}, "main");
  const std::vector<std::string> dirs = {cache_};
  StatusOr<std::string> p = ResolveModelPath("org/llama", dirs);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, dir);
}

TEST_F(ModelCacheTest, GgufSnapshotResolvesToItsOnlyGguf) {
  const std::string dir = Snapshot(cache_, "org/gguf", kCommit, {"sub/m-Q4_0.gguf"}, "main");
  const std::vector<std::string> dirs = {cache_};
  StatusOr<std::string> p = ResolveModelPath("org/gguf", dirs);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, dir + "/sub/m-Q4_0.gguf");
}

TEST_F(ModelCacheTest, SeveralGgufsAskTheUserToChoose) {
  Snapshot(cache_, "org/gguf", kCommit, {"a.gguf", "b.gguf"}, "main");
  const std::vector<std::string> dirs = {cache_};
  StatusOr<std::string> p = ResolveModelPath("org/gguf", dirs);
  ASSERT_EQ(p.status().code(), StatusCode::kFailedPrecondition) << p.status().ToString();
  EXPECT_NE(p.status().message().find("b.gguf"), std::string::npos);
}

TEST_F(ModelCacheTest, RevisionsAndCommitsResolveToTheirSnapshots) {
  const std::string main_dir = Snapshot(cache_, "org/m", kCommit, {"config.json"}, "main");
  const std::string tag_dir = Snapshot(cache_, "org/m", kOther, {"config.json"}, "v1.0");
  const std::vector<std::string> dirs = {cache_};
  EXPECT_EQ(*ResolveModelPath("org/m", dirs), main_dir);
  EXPECT_EQ(*ResolveModelPath("org/m@v1.0", dirs), tag_dir);
  EXPECT_EQ(*ResolveModelPath("org/m@" + kOther, dirs), tag_dir);
  StatusOr<std::string> missing = ResolveModelPath("org/m@v2", dirs);
  ASSERT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("loom pull org/m --revision v2"), std::string::npos)
      << missing.status().message();
}

TEST_F(ModelCacheTest, UnknownNameSuggestsPull) {
  const std::vector<std::string> dirs = {cache_};
  StatusOr<std::string> p = ResolveModelPath("org/absent", dirs);
  ASSERT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("no such file or directory"), std::string::npos);
  EXPECT_NE(p.status().message().find("loom pull org/absent"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find(cache_), std::string::npos);
}

TEST_F(ModelCacheTest, NonNameThatDoesNotExistIsNotFound) {
  const std::vector<std::string> dirs = {cache_};
  StatusOr<std::string> p = ResolveModelPath(root_ + "/missing.gguf", dirs);
  ASSERT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(p.status().message().find("loom pull"), std::string::npos);
}

TEST_F(ModelCacheTest, FallsBackToTheHuggingFaceCache) {
  const std::string dir = Snapshot(hf_cache_, "org/hf", kCommit, {"config.json"}, "main");
  const std::vector<std::string> dirs = {cache_, hf_cache_};
  StatusOr<std::string> p = ResolveModelPath("org/hf", dirs);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, dir);
}

TEST_F(ModelCacheTest, ARefWithoutItsSnapshotDoesNotResolve) {
  ASSERT_TRUE(WriteRef(cache_, "org/m", "main", kCommit).ok());
  const std::vector<std::string> dirs = {cache_};
  StatusOr<std::string> p = ResolveModelPath("org/m", dirs);
  ASSERT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("is missing"), std::string::npos) << p.status().message();
}

TEST_F(ModelCacheTest, CorruptRefIsDataLoss) {
  Touch(RefPath(cache_, "org/m", "main"), "not a commit\n");
  StatusOr<std::string> ref = ReadRef(cache_, "org/m", "main");
  EXPECT_EQ(ref.status().code(), StatusCode::kDataLoss);
  Touch(RefPath(cache_, "org/m", "main"), kCommit + "\n");
  ref = ReadRef(cache_, "org/m", "main");
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(*ref, kCommit);
}

// Sets environment variables for one scope and restores them after.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<const char*> names) {
    for (const char* n : names) {
      const char* v = std::getenv(n);
      saved_.push_back({n, v != nullptr, v != nullptr ? v : ""});
    }
  }
  ~ScopedEnv() {
    for (const auto& s : saved_) {
      if (s.set) {
        ::setenv(s.name, s.value.c_str(), 1);
      } else {
        ::unsetenv(s.name);
      }
    }
  }

 private:
  struct Saved {
    const char* name;
    bool set;
    std::string value;
  };
  std::vector<Saved> saved_;
};

TEST_F(ModelCacheTest, DefaultCacheDirFollowsTheEnvironment) {
  ScopedEnv env({"LOOM_CACHE", "XDG_CACHE_HOME", "HOME"});
  ::setenv("LOOM_CACHE", "/x/loom-cache", 1);
  EXPECT_EQ(DefaultCacheDir(), "/x/loom-cache");
  ::unsetenv("LOOM_CACHE");
  ::setenv("XDG_CACHE_HOME", "/x/xdg", 1);
  EXPECT_EQ(DefaultCacheDir(), "/x/xdg/loom/hub");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/x/home", 1);
  EXPECT_EQ(DefaultCacheDir(), "/x/home/.cache/loom/hub");
}

}  // namespace
}  // namespace loom::model
