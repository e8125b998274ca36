// `loom doctor` black-box: this machine's facts in plain text and as one JSON object, the chip
// table through --chip, model advice on a synthetic model with given rank speeds (the split it
// picks moves from tensor parallel to pipeline as the links' latency grows), a clear one-line
// error for a bad model file, and the links of two cluster daemons on loopback.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../cli_util.h"

namespace loom {
namespace {

using json = nlohmann::json;
using testing::kLoom;
using testing::RunShell;
using testing::ShellQuote;

class DoctorCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("loom_doctor_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    model_ = dir_ + "/tiny.gguf";
    const auto r = RunShell(kLoom + " synth --shape tiny --threads 1 -o " + ShellQuote(model_));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // A socket nobody listens on: the outcome does not depend on a daemon running here.
    none_ = " --control " + ShellQuote(dir_ + "/none.sock");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `loom doctor ARGS --json` with fixed rank speeds, parsed.
  json Doctor(const std::string& args) {
    const auto r = RunShell(kLoom + " doctor --json --decode-gbs 10 --prompt-gflops 50 " + args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    return j;
  }

  std::string dir_, model_, none_;
};

TEST_F(DoctorCliTest, PlainTextNamesThisMachineAndHowToStartADaemon) {
  const auto r = RunShell(kLoom + " doctor" + none_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"This machine: ", "  OS ", "  CPU ", "  SIMD ", "  memory ",
                           "GB/s with one thread", "  RDMA ", "Links to other machines",
                           "No cluster daemon answers at", "loom cluster join --secret"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("Model:"), std::string::npos);
}

TEST_F(DoctorCliTest, JsonWithAChipAndAModel) {
  const json j = Doctor("-m " + ShellQuote(model_) + " --chip 'Apple M3 Ultra' --ctx 256" + none_);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["v"], 1);
  const json& m = j["machine"];
  EXPECT_GT(m["cores"].get<int>(), 0);
  EXPECT_GT(m["memory_total_bytes"].get<int64_t>(), 0);
  EXPECT_GE(m["memory_total_bytes"].get<int64_t>(), m["memory_available_bytes"].get<int64_t>());
  EXPECT_FALSE(m["simd"].get<std::string>().empty());
  EXPECT_FALSE(m["os"].get<std::string>().empty());
  EXPECT_GT(m["read_gbytes_per_s"]["one_thread"].get<double>(), 0);
  EXPECT_GT(m["read_gbytes_per_s"]["all_cores"].get<double>(), 0);
  EXPECT_TRUE(m["rdma_devices"].is_array());
  const json& chip = j["chip"];
  EXPECT_EQ(chip["chip"], "Apple M3 Ultra");
  EXPECT_EQ(chip["source"], "--chip");
  EXPECT_EQ(chip["thunderbolt"], 5);
  EXPECT_TRUE(chip["rdma_capable"].get<bool>());
  EXPECT_FALSE(j["cluster"]["daemon"].get<bool>());
  const json& model = j["model"];
  EXPECT_EQ(model["model"], model_);
  EXPECT_EQ(model["context"], 256);
  EXPECT_TRUE(model["hypothetical"].get<bool>());
  EXPECT_EQ(model["ranks"], 2);  // the default --ranks
  EXPECT_DOUBLE_EQ(model["link"]["latency_us"].get<double>(), 50);
  EXPECT_DOUBLE_EQ(model["link"]["gbits_per_s"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(model["rank"]["decode_gbytes_per_s"].get<double>(), 10);
  EXPECT_GT(model["fit"]["weights_bytes"].get<int64_t>(), 0);
  EXPECT_GT(model["fit"]["kv_bytes"].get<int64_t>(), 0);
  EXPECT_TRUE(model["fit"]["fits"].get<bool>());  // a 1.5 MiB model
  EXPECT_EQ(model["plans"].size(), 3u);           // tp1 pp1, tp1 pp2, tp2 pp1
  ASSERT_TRUE(model["pick"].is_object());
  const json& pick = model["pick"];
  EXPECT_NEAR(1e3 / pick["decode_tokens_per_s"].get<double>(),
              pick["decode_compute_ms"].get<double>() + pick["decode_link_ms"].get<double>(), 1e-6);
  EXPECT_DOUBLE_EQ(model["fast_link"]["latency_us"].get<double>(), 5);
  EXPECT_DOUBLE_EQ(model["fast_link"]["gbits_per_s"].get<double>(), 80);
  EXPECT_TRUE(model["fast_pick"].is_object());
  EXPECT_GE(model["advice"].size(), 4u);
}

TEST_F(DoctorCliTest, TheSplitMovesFromTensorToPipelineAsLatencyGrows) {
  const std::string base = "-m " + ShellQuote(model_) + " --ctx 256" + none_;
  const json whole = Doctor(base);
  ASSERT_TRUE(whole.is_object());
  // Each machine holds 80% of what the model needs: one is not enough, two are.
  const int64_t memory = whole["model"]["fit"]["need_bytes"].get<int64_t>() * 8 / 10;
  const std::string split = base + " --memory " + std::to_string(memory);
  const json low = Doctor(split + " --link-latency-us 1 --link-gbps 100");
  const json high = Doctor(split + " --link-latency-us 2000");
  ASSERT_TRUE(low.is_object() && high.is_object());
  EXPECT_FALSE(low["model"]["fit"]["fits"].get<bool>());
  EXPECT_EQ(low["model"]["pick"]["tp"], 2);
  EXPECT_EQ(low["model"]["pick"]["pp"], 1);
  EXPECT_EQ(high["model"]["pick"]["tp"], 1);
  EXPECT_EQ(high["model"]["pick"]["pp"], 2);
  // The RDMA-class link would make tensor parallelism the best split again.
  EXPECT_EQ(high["model"]["fast_pick"]["tp"], 2);
  EXPECT_TRUE(high["model"]["change"]["best_changes"].get<bool>());
  // The text says the same.
  const auto text = RunShell(kLoom + " doctor --decode-gbs 10 --prompt-gflops 50 " + split +
                             " --link-latency-us 2000");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("A pipeline split wins"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("does not fit on this machine"), std::string::npos) << text.out;
}

TEST_F(DoctorCliTest, ABadModelFileIsOneClearLine) {
  std::ofstream(dir_ + "/bad.gguf") << "not a model";
  for (const std::string& path : {dir_ + "/missing.gguf", dir_ + "/bad.gguf"}) {
    const auto r = RunShell(kLoom + " doctor -m " + ShellQuote(path) + none_);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err.rfind("loom doctor: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST_F(DoctorCliTest, LinksOfTwoDaemonsOnLoopback) {
  const std::string a = dir_ + "/a.sock", b = dir_ + "/b.sock";
  const int port_a = FreePort();
  int port_b = FreePort();
  while (port_b == port_a) port_b = FreePort();
  const std::string pa = std::to_string(port_a), pb = std::to_string(port_b);
  const std::string join = kLoom + " cluster join --secret s --no-multicast --bind 127.0.0.1 " +
                           "--quiet --member-timeout 5";
  // Both daemons in the background of one shell, stopped when it is done.
  const std::string script =
      join + " --name a --port " + pa + " --control " + ShellQuote(a) + " & A=$!; " + join +
      " --name b --port " + pb + " --peer 127.0.0.1:" + pa + " --control " + ShellQuote(b) +
      " & B=$!; " + kLoom + " cluster status --control " + ShellQuote(a) +
      " --wait-members 2 --wait 30 >/dev/null && " + kLoom +
      " doctor --json --decode-gbs 10 --prompt-gflops 50 -m " + ShellQuote(model_) + " --control " +
      ShellQuote(a) + "; R=$?; kill $A $B; wait; exit $R";
  const auto r = RunShell("sh -c " + ShellQuote(script), 90);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  const json& c = j["cluster"];
  EXPECT_TRUE(c["daemon"].get<bool>());
  ASSERT_EQ(c["members"].size(), 2u) << c.dump();
  for (const json& m : c["members"]) {
    EXPECT_TRUE(m["cores"].is_number_integer()) << m.dump();
    EXPECT_GT(m["cores"].get<int>(), 0) << m.dump();
    EXPECT_GT(m["read_gbytes_per_s"].get<double>(), 0) << m.dump();
  }
  EXPECT_TRUE(c["members"][0]["self"].get<bool>());
  ASSERT_EQ(c["pairs"].size(), 1u) << c.dump();
  const json& pair = c["pairs"][0];
  ASSERT_TRUE(pair["fastest"].is_object()) << pair.dump();
  EXPECT_GT(pair["fastest"]["latency_us"].get<double>(), 0);
  EXPECT_GT(pair["fastest"]["gbytes_per_s"].get<double>(), 0);
  // The model is planned over the two members and their measured link.
  const json& model = j["model"];
  EXPECT_FALSE(model["hypothetical"].get<bool>());
  EXPECT_EQ(model["ranks"], 2);
  EXPECT_NEAR(model["link"]["latency_us"].get<double>(),
              pair["fastest"]["latency_us"].get<double>(), 1e-6);
}

}  // namespace
}  // namespace loom
