// Converted models run as written (issue 19): stories260K.gguf converted by `loom convert` into a
// Hugging Face directory that keeps only tokenizer.json (and tokenizer_config.json), and into an
// MLX directory (8-bit, groups of 32) that keeps only tokenizer.model; `loom run` on each, with no
// --tokenizer, reproduces the llama2.c golden generations, and `loom tokenize` the prompt ids.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../cli_util.h"
#include "loom/base/testing.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using testing::kLoom;
using testing::RunShell;
using testing::ShellQuote;

class ConvertedDirsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom_converted_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Converts the GGUF into `name` with `args`, then removes `drop` from it.
  std::string Convert(const std::string& gguf, const std::string& name, const std::string& args,
                      const std::vector<std::string>& drop) {
    const std::string out = (dir_ / name).string();
    const auto r =
        RunShell(kLoom + " convert -m " + ShellQuote(gguf) + " -o " + ShellQuote(out) + " " + args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (const std::string& f : drop) {
      EXPECT_TRUE(fs::remove(fs::path(out) / f)) << f << " was not written";
    }
    return out;
  }

  fs::path dir_;
};

nlohmann::json Golden(const std::string& shared) {
  std::ifstream in(shared + "/golden/stories260K_greedy.json");
  return nlohmann::json::parse(in);
}

void ExpectGolden(const std::string& model, const nlohmann::json& golden) {
  int checked = 0;
  for (const auto& entry : golden["entries"]) {
    if (entry["steps"] != 64) continue;
    const std::string prompt = entry["prompt"];
    const auto prompt_ids = entry["prompt_token_ids"].get<std::vector<int32_t>>();
    const int64_t n = 64 - (static_cast<int64_t>(prompt_ids.size()) - 1);
    const auto r = RunShell(kLoom + " run -m " + ShellQuote(model) + " -p " + ShellQuote(prompt) +
                            " -n " + std::to_string(n) + " --temp 0 --json");
    ASSERT_EQ(r.exit_code, 0) << model << "\n" << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["prompt_token_ids"].get<std::vector<int32_t>>(), prompt_ids) << model << prompt;
    EXPECT_EQ(j["generated_token_ids"], entry["generated_token_ids"]) << model << prompt;
    EXPECT_EQ(prompt + j["text"].get<std::string>(), entry["text"]) << model << prompt;
    if (!prompt.empty()) {
      const auto t =
          RunShell(kLoom + " tokenize -m " + ShellQuote(model) + " --json " + ShellQuote(prompt));
      ASSERT_EQ(t.exit_code, 0) << t.err;
      EXPECT_EQ(nlohmann::json::parse(t.out)["ids"], entry["prompt_token_ids"]) << model;
    }
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST_F(ConvertedDirsTest, HfDirectoryWithOnlyTokenizerJsonReproducesTheGoldenOutputs) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string gguf = shared + "/models/stories260K/stories260K.gguf";
  const std::string hf = Convert(gguf, "hf", "--to hf", {"tokenizer.model"});
  ASSERT_TRUE(fs::exists(fs::path(hf) / "tokenizer.json"));
  ASSERT_TRUE(fs::exists(fs::path(hf) / "tokenizer_config.json"));
  ExpectGolden(hf, Golden(shared));
  const auto info = RunShell(kLoom + " tokenize -m " + ShellQuote(hf) + " --json hi");
  EXPECT_NE(info.out.find("\"tokenizer\":\"sentencepiece\""), std::string::npos) << info.out;
}

TEST_F(ConvertedDirsTest, MlxDirectoryWithOnlyTokenizerModelReproducesTheGoldenOutputs) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string gguf = shared + "/models/stories260K/stories260K.gguf";
  const std::string mlx = Convert(gguf, "mlx", "--to mlx --bits 8 --group-size 32",
                                  {"tokenizer.json", "tokenizer_config.json"});
  ASSERT_TRUE(fs::exists(fs::path(mlx) / "tokenizer.model"));
  ExpectGolden(mlx, Golden(shared));
  // Back to GGUF: the tokenizer.model is what the GGUF embeds.
  const std::string gguf_again = (dir_ / "again.gguf").string();
  const auto back = RunShell(kLoom + " convert -m " + ShellQuote(mlx) + " -o " +
                             ShellQuote(gguf_again) + " --to gguf");
  ASSERT_EQ(back.exit_code, 0) << back.err;
  for (const auto& entry : Golden(shared)["entries"]) {
    const std::string prompt = entry["prompt"];
    if (prompt.empty()) continue;
    const auto t = RunShell(kLoom + " tokenize -m " + ShellQuote(gguf_again) + " --json " +
                            ShellQuote(prompt));
    ASSERT_EQ(t.exit_code, 0) << t.err;
    EXPECT_EQ(nlohmann::json::parse(t.out)["ids"], entry["prompt_token_ids"]);
  }
}

TEST_F(ConvertedDirsTest, ConvertingADirectoryAgainKeepsItsTokenizer) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string gguf = shared + "/models/stories260K/stories260K.gguf";
  const std::string hf = Convert(gguf, "hf", "--to hf", {});
  const std::string again = Convert(hf, "again", "--to hf --type f16", {});
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model"}) {
    EXPECT_EQ(testing::Slurp((fs::path(hf) / f).string()),
              testing::Slurp((fs::path(again) / f).string()))
        << f;
  }
}

TEST_F(ConvertedDirsTest, BenchNeedsNoTokenizer) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string gguf = shared + "/models/stories260K/stories260K.gguf";
  const std::string bare = Convert(gguf, "bare", "--to hf",
                                   {"tokenizer.json", "tokenizer_config.json", "tokenizer.model"});
  const auto run = RunShell(kLoom + " run -m " + ShellQuote(bare) + " -p hi -n 2");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("--tokenizer"), std::string::npos) << run.err;
  const auto bench = RunShell(kLoom + " bench -m " + ShellQuote(bare) + " -r 1 -p 8 -n 4");
  EXPECT_EQ(bench.exit_code, 0) << bench.err;
}

}  // namespace
}  // namespace loom
