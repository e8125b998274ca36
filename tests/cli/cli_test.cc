// The `loom` command line as users and other tools call it (the contract of issue 2): `loom run`
// reproduces the llama2.c golden generations from the .bin checkpoint and the GGUF file, prints one
// JSON object with --json and statistics on stderr; `loom tokenize` gives the reference prompt ids;
// `loom info` describes the model; --chat without a template is the plain prompt; bad files give a
// clear error naming the file and never a crash.
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

using testing::kLoom;
using testing::RunShell;
using testing::ShellQuote;

nlohmann::json Golden(const std::string& shared) {
  std::ifstream in(shared + "/golden/stories260K_greedy.json");
  return nlohmann::json::parse(in);
}

class RunGoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RunGoldenTest, JsonOutputReproducesTheReferenceGenerations) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string model = shared + "/models/stories260K/" + GetParam();
  int checked = 0;
  const nlohmann::json golden = Golden(shared);
  for (const auto& entry : golden["entries"]) {
    if (entry["steps"] != 64) continue;
    const std::string prompt = entry["prompt"];
    const auto prompt_ids = entry["prompt_token_ids"].get<std::vector<int32_t>>();
    // llama2.c's steps count prompt positions; its last prompt position yields the first token.
    const int64_t n = 64 - (static_cast<int64_t>(prompt_ids.size()) - 1);
    const auto r = RunShell(kLoom + " run -m " + ShellQuote(model) + " -p " + ShellQuote(prompt) +
                            " -n " + std::to_string(n) + " --temp 0 --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);  // exactly one object on stdout
    EXPECT_EQ(j["prompt_token_ids"].get<std::vector<int32_t>>(), prompt_ids) << prompt;
    EXPECT_EQ(j["generated_token_ids"], entry["generated_token_ids"]) << prompt;
    // llama2.c prints the prompt and then the completion; "text" is the completion.
    EXPECT_EQ(prompt + j["text"].get<std::string>(), entry["text"]) << prompt;
    EXPECT_TRUE(j["timings"].is_object());
    EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

INSTANTIATE_TEST_SUITE_P(Files, RunGoldenTest,
                         ::testing::Values("stories260K.bin", "stories260K.gguf"));

TEST(CliTest, StreamedTextEqualsTheJsonText) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string model = shared + "/models/stories260K/stories260K.gguf";
  const auto text = RunShell(kLoom + " run -m " + model + " -p 'The dog' -n 40 --temp 0");
  const auto json = RunShell(kLoom + " run -m " + model + " -p 'The dog' -n 40 --temp 0 --json");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const std::string completion = nlohmann::json::parse(json.out)["text"];
  EXPECT_NE(text.out.find(completion), std::string::npos) << text.out;
}

TEST(CliTest, TokenizeGivesTheReferencePromptIds) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  for (const char* source : {"stories260K.gguf", "tok512.bin"}) {
    const std::string path = shared + "/models/stories260K/" + source;
    const nlohmann::json golden = Golden(shared);
    for (const auto& entry : golden["entries"]) {
      const std::string prompt = entry["prompt"];
      if (prompt.empty()) continue;
      const auto r = RunShell(kLoom + " tokenize -m " + path + " --json " + ShellQuote(prompt));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], entry["prompt_token_ids"]) << source;
    }
  }
}

TEST(CliTest, InfoDescribesTheModel) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const auto r = RunShell(kLoom + " info -m " + shared + "/models/stories260K/stories260K.gguf");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"llama", "64", "512", "f32"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " in\n" << r.out;
  }
}

TEST(CliTest, ChatWithoutATemplateIsThePlainPrompt) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string model = shared + "/models/stories260K/stories260K.gguf";
  const auto plain = RunShell(kLoom + " run -m " + model + " -p 'Lily' -n 16 --temp 0 --json");
  const auto chat =
      RunShell(kLoom + " run -m " + model + " --chat -p 'Lily' -n 16 --temp 0 --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_EQ(nlohmann::json::parse(chat.out)["generated_token_ids"],
            nlohmann::json::parse(plain.out)["generated_token_ids"]);
  const auto system = RunShell(kLoom + " run -m " + model + " --system hi -p x");
  EXPECT_NE(system.exit_code, 0);  // --system needs --chat
  EXPECT_NE(system.err.find("--chat"), std::string::npos) << system.err;
}

TEST(CliTest, BadFilesAreClearErrorsNotCrashes) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("loom_cli_bad_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string junk = (dir / "junk.gguf").string();
  std::ofstream(junk) << "this is not a model file at all";
  const std::string truncated = (dir / "truncated.gguf").string();
  std::ofstream(truncated) << "GGUF\x03";
  const struct {
    std::string path, expect;
  } cases[] = {
      {(dir / "missing.gguf").string(), "missing.gguf"},
      {junk, "junk.gguf"},
      {truncated, "truncated.gguf"},
  };
  for (const auto& c : cases) {
    for (const char* command : {" run -p hi -m ", " info -m ", " bench -r 1 -m "}) {
      const auto r = RunShell(kLoom + command + c.path);
      EXPECT_NE(r.exit_code, 0) << command << c.path;
      EXPECT_LT(r.exit_code, 128) << "crashed: " << command << c.path << "\n" << r.err;
      EXPECT_NE(r.err.find(c.expect), std::string::npos) << command << "\n" << r.err;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace loom
