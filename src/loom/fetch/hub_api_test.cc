#include "loom/fetch/hub_api.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace loom::fetch {
namespace {

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kSha256(64, 'a');
const std::string kBlob(40, 'b');

std::string Info(const std::string& siblings, const std::string& extra = "") {
  return R"({"id":"org/model","sha":")" + kCommit + R"(","private":false,)" + extra +
         R"("siblings":[)" + siblings + "]}";
}

std::string Small(const std::string& name, int size = 10) {
  return R"({"rfilename":")" + name + R"(","size":)" + std::to_string(size) + R"(,"blobId":")" +
         kBlob + R"("})";
}

std::string Lfs(const std::string& name, int size = 1000) {
  return R"({"rfilename":")" + name + R"(","size":)" + std::to_string(size) + R"(,"blobId":")" +
         kBlob + R"(","lfs":{"sha256":")" + kSha256 + R"(","size":)" + std::to_string(size) +
         R"(,"pointerSize":134}})";
}

std::vector<std::string> Paths(const std::vector<RepoFile>& files) {
  std::vector<std::string> out;
  for (const RepoFile& f : files) out.push_back(f.path);
  return out;
}

TEST(HubApiTest, ParsesCommitFilesSizesAndHashes) {
  StatusOr<RepoInfo> info =
      ParseRepoInfo(Info(Small("config.json", 651) + "," + Lfs("model.safetensors", 4096),
                         R"("gated":"manual",)"),
                    "test");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->id, "org/model");
  EXPECT_EQ(info->commit, kCommit);
  EXPECT_EQ(info->gated, "manual");
  ASSERT_EQ(info->files.size(), 2u);
  EXPECT_EQ(info->files[0].path, "config.json");
  EXPECT_EQ(info->files[0].size, 651);
  EXPECT_EQ(info->files[0].hash_kind(), HashKind::kGitSha1);
  EXPECT_EQ(info->files[0].hash(), kBlob);
  EXPECT_EQ(info->files[1].size, 4096);
  EXPECT_EQ(info->files[1].hash_kind(), HashKind::kSha256);
  EXPECT_EQ(info->files[1].hash(), kSha256);
}

TEST(HubApiTest, GatedFalseMeansNotGated) {
  StatusOr<RepoInfo> info = ParseRepoInfo(Info(Small("config.json"), R"("gated":false,)"), "t");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->gated, "");
}

TEST(HubApiTest, RejectsMalformedAnswers) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not valid JSON"},
      {"[1,2]", "not a JSON object"},
      {R"({"sha":"xyz","siblings":[]})", "40-hex commit"},
      {R"({"sha":")" + kCommit + R"("})", "siblings"},
      {Info(R"({"size":3})"), "rfilename"},
      {Info(R"({"rfilename":"a","size":-1})"), "bad \"size\""},
      {Info(R"({"rfilename":"a","size":1.5})"), "bad \"size\""},
      {Info(R"({"rfilename":"a","blobId":"zz"})"), "blobId"},
      {Info(R"({"rfilename":"a","lfs":{"sha256":"12"}})"), "lfs.sha256"},
      {Info(R"({"rfilename":"a","size":5,"lfs":{"sha256":")" + kSha256 + R"(","size":6}})"),
       "disagrees"},
      {Info(Small("a") + "," + Small("a")), "listed twice"},
  };
  for (const auto& [json, expected] : cases) {
    StatusOr<RepoInfo> info = ParseRepoInfo(json, "https://hub/api");
    ASSERT_FALSE(info.ok()) << json;
    EXPECT_EQ(info.status().code(), StatusCode::kDataLoss) << json;
    EXPECT_NE(info.status().message().find(expected), std::string::npos)
        << json << " -> " << info.status().message();
    EXPECT_NE(info.status().message().find("https://hub/api"), std::string::npos);
  }
}

TEST(HubApiTest, LeavesOutPathsUnsafeToCreate) {
  StatusOr<RepoInfo> info = ParseRepoInfo(
      Info(Small("../evil") + "," + Small("/abs") + "," + Small("a//b") + "," + Small("ok.json")),
      "t");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(Paths(info->files), std::vector<std::string>{"ok.json"});
  EXPECT_EQ(info->skipped_files, 3);
}

TEST(HubApiTest, SafeRepoPaths) {
  for (const char* ok : {"config.json", "a/b/c.gguf", "Q4_K_M/x-00001-of-00002.gguf", ".hidden"}) {
    EXPECT_TRUE(IsSafeRepoPath(ok)) << ok;
  }
  for (const char* bad :
       {"", "/etc/passwd", "../x", "a/../b", "a/./b", ".", "a/", "a//b", "a\\b", "new\nline"}) {
    EXPECT_FALSE(IsSafeRepoPath(bad)) << bad;
  }
  EXPECT_FALSE(IsSafeRepoPath(std::string(300, 'x')));
}

TEST(HubApiTest, SafetensorsIndexListsShardsOnce) {
  StatusOr<std::vector<std::string>> shards = ParseSafetensorsIndex(
      R"({"metadata":{"total_size":10},"weight_map":{"a":"m-2.safetensors","b":"m-1.safetensors",
          "c":"m-2.safetensors"}})",
      "index");
  ASSERT_TRUE(shards.ok()) << shards.status().ToString();
  EXPECT_EQ(*shards, (std::vector<std::string>{"m-1.safetensors", "m-2.safetensors"}));
  for (const char* bad :
       {"{}", R"({"weight_map":{}})", R"({"weight_map":{"a":1}})",
        R"({"weight_map":{"a":"../x.safetensors"}})", R"({"weight_map":{"a":"x.bin"}})", "nope"}) {
    EXPECT_EQ(ParseSafetensorsIndex(bad, "index").status().code(), StatusCode::kDataLoss) << bad;
  }
}

RepoInfo MakeInfo(const std::vector<std::string>& paths) {
  RepoInfo info;
  info.id = "org/model";
  info.commit = kCommit;
  for (const std::string& p : paths) info.files.push_back({p, 100, kBlob, ""});
  return info;
}

TEST(HubApiTest, DefaultSelectionIsConfigTokenizerAndTopLevelSafetensors) {
  const RepoInfo info =
      MakeInfo({".gitattributes", "README.md", "config.json", "generation_config.json",
                "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                "model.safetensors.index.json", "original/consolidated.00.pth",
                "onnx/model.safetensors", "special_tokens_map.json", "tokenizer.json",
                "tokenizer.model", "tokenizer_config.json", "pytorch_model.bin"});
  StatusOr<std::vector<RepoFile>> files = SelectModelFiles(info, {});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(Paths(*files),
            (std::vector<std::string>{
                "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors", "model.safetensors.index.json",
                "special_tokens_map.json", "tokenizer.json", "tokenizer.model",
                "tokenizer_config.json"}));
}

TEST(HubApiTest, GgufRepositoryNeedsInclude) {
  const RepoInfo info = MakeInfo({"README.md", "m-Q4_K_M.gguf", "m-Q8_0.gguf"});
  StatusOr<std::vector<RepoFile>> files = SelectModelFiles(info, {});
  ASSERT_EQ(files.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(files.status().message().find("--include"), std::string::npos);
  EXPECT_NE(files.status().message().find("m-Q8_0.gguf"), std::string::npos);

  const std::vector<std::string> include = {"*Q4_K_M.gguf"};
  files = SelectModelFiles(info, include);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(Paths(*files), std::vector<std::string>{"m-Q4_K_M.gguf"});
}

TEST(HubApiTest, IncludeReplacesDefaultWeightsAndMatchesAcrossFolders) {
  const RepoInfo info = MakeInfo({"config.json", "model.safetensors", "Q4/a-00001-of-00002.gguf",
                                  "Q4/a-00002-of-00002.gguf", "Q8/a.gguf"});
  const std::vector<std::string> include = {"*Q4*"};
  StatusOr<std::vector<RepoFile>> files = SelectModelFiles(info, include);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(Paths(*files), (std::vector<std::string>{"config.json", "Q4/a-00001-of-00002.gguf",
                                                     "Q4/a-00002-of-00002.gguf"}));
}

TEST(HubApiTest, IncludeThatMatchesNothingIsAnError) {
  const RepoInfo info = MakeInfo({"config.json", "a-Q8_0.gguf"});
  const std::vector<std::string> include = {"*Q2_K*"};
  StatusOr<std::vector<RepoFile>> files = SelectModelFiles(info, include);
  ASSERT_EQ(files.status().code(), StatusCode::kNotFound);
  EXPECT_NE(files.status().message().find("*Q2_K*"), std::string::npos);
  EXPECT_NE(files.status().message().find("a-Q8_0.gguf"), std::string::npos);
}

TEST(HubApiTest, RepositoryWithoutWeightsLoomReadsIsNotFound) {
  const RepoInfo info = MakeInfo({"config.json", "pytorch_model.bin"});
  StatusOr<std::vector<RepoFile>> files = SelectModelFiles(info, {});
  ASSERT_EQ(files.status().code(), StatusCode::kNotFound);
  EXPECT_NE(files.status().message().find("pytorch_model.bin"), std::string::npos);
}

TEST(HubApiTest, IndexKeepsOnlyTheShardsItNames) {
  // Mistral-style: the same weights as consolidated.safetensors and as indexed shards.
  const RepoInfo info =
      MakeInfo({"config.json", "consolidated.safetensors", "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors", std::string(kSafetensorsIndex)});
  StatusOr<std::vector<RepoFile>> selected = SelectModelFiles(info, {});
  ASSERT_TRUE(selected.ok());
  const std::vector<std::string> shards = {"model-00001-of-00002.safetensors",
                                           "model-00002-of-00002.safetensors"};
  StatusOr<std::vector<RepoFile>> kept = KeepIndexedShards(*selected, info, shards);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(Paths(*kept), (std::vector<std::string>{
                              "config.json", "model-00001-of-00002.safetensors",
                              "model-00002-of-00002.safetensors", std::string(kSafetensorsIndex)}));
  const std::vector<std::string> missing = {"model-00003-of-00003.safetensors"};
  EXPECT_EQ(KeepIndexedShards(*selected, info, missing).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace loom::fetch
