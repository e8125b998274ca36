// Pods of real processes through the `loom` binary: `loom run --tp T --pp P` starts its ranks
// itself (or runs under `loom launch`), and must reproduce the llama2.c golden outputs of
// stories260K exactly, over every transport; a quantized synthetic model gives the same tokens as
// one process.  (A rank that dies mid-run: pod_fault_test.cc.)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "loom/base/testing.h"
#include "../cli_util.h"

namespace {

using loom::testing::CommandResult;
using loom::testing::kLoom;
using loom::testing::RunShell;

nlohmann::json Golden(const std::string& shared) {
  std::ifstream in(shared + "/golden/stories260K_greedy.json");
  return nlohmann::json::parse(in);
}

struct PodCase {
  int tp, pp;
  const char* backend;
  const char* model;
};

std::string CaseName(const ::testing::TestParamInfo<PodCase>& info) {
  std::string model = info.param.model;
  model = model.substr(model.find('.') + 1);
  return "tp" + std::to_string(info.param.tp) + "_pp" + std::to_string(info.param.pp) + "_" +
         info.param.backend + "_" + model;
}

class PodGoldenTest : public ::testing::TestWithParam<PodCase> {};

TEST_P(PodGoldenTest, ReproducesTheGoldenGreedyOutputsExactly) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const PodCase& c = GetParam();
  const std::string model = shared + "/models/stories260K/" + c.model;
  const nlohmann::json golden = Golden(shared);
  int checked = 0;
  for (const auto& entry : golden["entries"]) {
    if (entry["steps"] != 64) continue;
    ++checked;
    const auto& prompt_ids = entry["prompt_token_ids"];
    std::string ids;
    for (const auto& id : prompt_ids) ids += (ids.empty() ? "" : ",") + std::to_string(int(id));
    const int64_t n = 64 - (static_cast<int64_t>(prompt_ids.size()) - 1);
    const std::string cmd = kLoom + " run -m " + model + " --prompt-ids " + ids + " -n " +
                            std::to_string(n) + " --temp 0 --json --batch 2 --tp " +
                            std::to_string(c.tp) + " --pp " + std::to_string(c.pp) +
                            " --backend " + c.backend;
    const CommandResult r = RunShell(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.err;
    const nlohmann::json got = nlohmann::json::parse(r.out);  // exactly one object on stdout
    EXPECT_EQ(got["generated_token_ids"], entry["generated_token_ids"]) << cmd;
    EXPECT_EQ(got["prompt_token_ids"], prompt_ids);
    EXPECT_EQ(got["tp"], c.tp);
    EXPECT_EQ(got["pp"], c.pp);
  }
  EXPECT_EQ(checked, 3);
}

INSTANTIATE_TEST_SUITE_P(
    Plans, PodGoldenTest,
    ::testing::Values(PodCase{1, 2, "tcp", "stories260K.bin"}, PodCase{1, 5, "shm", "stories260K.bin"},
                      PodCase{2, 1, "tcp", "stories260K.gguf"}, PodCase{4, 1, "shm", "stories260K.gguf"},
                      PodCase{2, 2, "tcp", "stories260K.gguf"}, PodCase{2, 2, "shm", "stories260K.bin"},
                      PodCase{1, 5, "tcp", "stories260K.gguf"}, PodCase{4, 1, "tcp", "stories260K.bin"},
                      PodCase{2, 1, "mpi", "stories260K.gguf"}, PodCase{1, 2, "mpi", "stories260K.bin"}),
    CaseName);

TEST(PodCliTest, UnderLoomLaunchMatchesSelfLaunched) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string model = shared + "/models/stories260K/stories260K.gguf";
  const std::string args = " run -m " + model + " -p 'Lily and Tom' -n 30 --temp 0 --json --tp 2";
  const CommandResult self = RunShell(kLoom + args);
  ASSERT_EQ(self.exit_code, 0) << self.err;
  const CommandResult launched = RunShell(kLoom + " launch -n 2 --backend tcp -- " + kLoom + args);
  ASSERT_EQ(launched.exit_code, 0) << launched.err;
  EXPECT_EQ(nlohmann::json::parse(self.out)["generated_token_ids"],
            nlohmann::json::parse(launched.out)["generated_token_ids"]);
}

// A quantized model with random weights (nearly flat next-token scores, 8-bit activations) is the
// hardest case for exactness: TP=2 must still give one process's tokens, because row-split
// products are summed in one canonical tree however they are split (docs/parallel.md).
TEST(PodCliTest, TensorParallelQuantizedModelGivesOneProcessTokens) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("loom_tp_exact_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "small-q4_0.gguf").string();
  const CommandResult synth = RunShell(kLoom + " synth --shape small --type q4_0 -o " + model);
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const std::string args = " run -m " + model + " -p 'Once upon a time' -n 48 --temp 0 --json";
  const CommandResult one = RunShell(kLoom + args);
  const CommandResult tp2 = RunShell(kLoom + args + " --tp 2");
  const CommandResult hybrid = RunShell(kLoom + args + " --tp 2 --pp 2");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(tp2.exit_code, 0) << tp2.err;
  ASSERT_EQ(hybrid.exit_code, 0) << hybrid.err;
  const nlohmann::json want = nlohmann::json::parse(one.out)["generated_token_ids"];
  EXPECT_EQ(want.size(), 48u);
  EXPECT_EQ(nlohmann::json::parse(tp2.out)["generated_token_ids"], want);
  EXPECT_EQ(nlohmann::json::parse(hybrid.out)["generated_token_ids"], want);
}

// Expert parallelism through the binary: `--ep 2` (experts and heads split over two ranks) and
// `--ep 2 --pp 2` give one process's greedy tokens on peaked synthetic mixtures of experts (not
// bit for bit: the experts' weighted sum is added per rank, then over the ranks; peaked models
// keep that rounding far from the argmax).
TEST(PodCliTest, ExpertParallelGivesOneProcessTokens) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("loom_ep_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct Case {
    const char* arch;
    const char* type;
    std::vector<const char*> splits;
  };
  // The tiny shape's 64 attention-output columns split in 4 would cut Q8_0's blocks of 32: four
  // ranks on the float model.
  for (const Case& c : {Case{"mixtral", "q8_0", {" --ep 2", " --ep 2 --pp 2"}},
                        Case{"mixtral", "f32", {" --ep 4 --backend tcp"}},
                        Case{"deepseek2", "q8_0", {" --ep 2", " --ep 2 --pp 2"}},
                        Case{"deepseek2", "f32", {" --ep 4 --backend tcp"}}}) {
    const std::string model = (dir / (std::string(c.arch) + c.type + ".gguf")).string();
    const CommandResult synth = RunShell(kLoom + " synth --shape tiny --peaked --type " + c.type +
                                         " --arch " + c.arch + " -o " + model);
    ASSERT_EQ(synth.exit_code, 0) << synth.err;
    const std::string args =
        " run -m " + model + " --prompt-ids 1,300,301,302 -n 24 --temp 0 --json";
    const CommandResult one = RunShell(kLoom + args);
    ASSERT_EQ(one.exit_code, 0) << one.err;
    const nlohmann::json want = nlohmann::json::parse(one.out)["generated_token_ids"];
    EXPECT_EQ(want.size(), 24u);
    for (const char* split : c.splits) {
      const CommandResult ep = RunShell(kLoom + args + split);
      ASSERT_EQ(ep.exit_code, 0) << c.arch << split << ": " << ep.err;
      EXPECT_EQ(nlohmann::json::parse(ep.out)["generated_token_ids"], want) << c.arch << split;
      EXPECT_NE(ep.err.find("| ep "), std::string::npos) << ep.err;
    }
    const CommandResult both = RunShell(kLoom + args + " --ep 2 --tp 2");
    EXPECT_NE(both.exit_code, 0);
    EXPECT_NE(both.err.find("--tp and --ep cannot be combined"), std::string::npos) << both.err;
    const CommandResult tp = RunShell(kLoom + args + " --tp 2");
    EXPECT_NE(tp.exit_code, 0);
    EXPECT_NE(tp.err.find("or --ep to split the experts"), std::string::npos) << tp.err;
  }
  std::filesystem::remove_all(dir);
}

TEST(PodCliTest, WrongGroupSizeIsAClearError) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  const std::string model = shared + "/models/stories260K/stories260K.gguf";
  const CommandResult r =
      RunShell(kLoom + " launch -n 3 --backend tcp -- " + kLoom + " run -m " + model + " --tp 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs 2"), std::string::npos) << r.err;
}

}  // namespace
