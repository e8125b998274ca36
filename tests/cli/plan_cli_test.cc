// `loom plan` with machine and link profiles: no measuring, no weights needed (a config.json
// directory without safetensors, a GGUF file cut after its header), and clear errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../cli_util.h"

namespace loom {
namespace {

using testing::kLoom;
using testing::RunShell;
using testing::ShellQuote;

std::string TempDir(const std::string& name) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("loom_plan_" + name + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

void ExpectIn(const std::string& text, const std::string& want) {
  EXPECT_NE(text.find(want), std::string::npos) << "'" << want << "' not in:\n" << text;
}

TEST(PlanCliTest, ConfigDirectoryWithProfilesPrintsEveryPlan) {
  const std::string dir = TempDir("config");
  std::filesystem::copy_file(std::string(LOOM_SOURCE_DIR) + "/bench/configs/deepseek-v3.1.json",
                             dir + "/config.json");
  const auto r = RunShell(kLoom + " plan -m " + ShellQuote(dir) +
                          " --machine m3-ultra-512g --link tb5-rdma --ranks 4 --ctx 8192 --json");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("measuring"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["machine"], "m3-ultra-512g");
  EXPECT_EQ(j["link"]["profile"], "tb5-rdma");
  EXPECT_EQ(j["format"], "config");
  // A token reads a few percent of a mixture of experts' bytes.
  EXPECT_LT(j["active_bytes_per_token"].get<double>(), 0.1 * j["total_bytes"].get<double>());
  EXPECT_EQ(j["plans"].size(), 8u);
  EXPECT_EQ(j["pick"]["tp"], 1);

  const auto text = RunShell(kLoom + " plan -m " + std::string(LOOM_SOURCE_DIR) +
                             "/bench/configs/deepseek-v3.1.json --machine m3-ultra-512g "
                             "--link tb5-rdma --ranks 2 --ctx 8192");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  ExpectIn(text.out, "(671.0B parameters); a token reads");
  ExpectIn(text.out, "sized from config.json, no weights");
  ExpectIn(text.out, "machine profile m3-ultra-512g: 819 GB/s x 0.80 efficiency");
  ExpectIn(text.out, "<- pick");
}

TEST(PlanCliTest, GgufHeaderOnlyPlansButDoesNotRun) {
  const std::string dir = TempDir("header");
  const std::string whole = dir + "/moe.gguf", header = dir + "/header.gguf";
  ASSERT_EQ(
      RunShell(kLoom + " synth --arch qwen3moe --shape small --type q4_0 -o " + whole).exit_code,
      0);
  // The small shape's metadata (a 4096-token vocabulary) and tensor table take about 100 KiB,
  // its data megabytes; cut at 256 KiB, the file has no whole tensor.
  ASSERT_GT(std::filesystem::file_size(whole), 4u << 20);
  std::filesystem::copy_file(whole, header);
  std::filesystem::resize_file(header, 256 << 10);
  const std::string flags = " --machine m4-pro-64g --link 10gbe --ranks 2 --json";
  const auto a = RunShell(kLoom + " plan -m " + whole + flags);
  const auto b = RunShell(kLoom + " plan -m " + header + flags);
  const auto run = RunShell(kLoom + " run -m " + header + " -p hi -n 1");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(run.exit_code, 0);
  auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(jb["format"], "gguf-header");
  EXPECT_EQ(ja["total_bytes"], jb["total_bytes"]);
  EXPECT_EQ(ja["plans"][0]["decode_tokens_per_s"], jb["plans"][0]["decode_tokens_per_s"]);
}

TEST(PlanCliTest, GgufCutInsideItsHeaderIsAClearError) {
  const std::string dir = TempDir("cut");
  const std::string whole = dir + "/moe.gguf";
  ASSERT_EQ(
      RunShell(kLoom + " synth --arch qwen3moe --shape small --type q4_0 -o " + whole).exit_code,
      0);
  std::filesystem::resize_file(whole, 4 << 10);  // inside the vocabulary
  const auto r = RunShell(kLoom + " plan -m " + whole + " --machine m4-pro-64g");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.exit_code, 1);
  ExpectIn(r.err, "may end inside its metadata");
}

TEST(PlanCliTest, ClearErrors) {
  const std::string config = std::string(LOOM_SOURCE_DIR) + "/bench/configs/qwen3-235b-a22b.json";
  auto r = RunShell(kLoom + " plan -m " + config + " --machine m9-ultra");
  EXPECT_EQ(r.exit_code, 1);
  ExpectIn(r.err, "no machine profile named 'm9-ultra'");
  ExpectIn(r.err, "m3-ultra-512g, m4-max-128g, m4-pro-64g");
  r = RunShell(kLoom + " plan -m " + config + " --machine m4-pro-64g --link tb5");
  EXPECT_EQ(r.exit_code, 1);
  ExpectIn(r.err, "10gbe, tb4-tcp, tb5-rdma");
  r = RunShell(kLoom + " plan -m " + config + " --type q4_0");
  EXPECT_EQ(r.exit_code, 1);
  ExpectIn(r.err, "give --machine");
  r = RunShell(kLoom + " plan -m " + config);  // measuring this machine needs the weights
  EXPECT_EQ(r.exit_code, 1);
  ExpectIn(r.err, "--machine");
}

}  // namespace
}  // namespace loom
