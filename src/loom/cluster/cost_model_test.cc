// The cost model on models described by shape: active bytes of mixtures of experts, planning from
// a GGUF header only and from config.json files of the published cluster runs' models.
#include "loom/cluster/cost_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <algorithm>
#include <sstream>

#include "loom/cluster/profiles.h"
#include "loom/cluster/shape_model.h"
#include "loom/model/gguf_reader.h"
#include "loom/model/gguf_writer.h"
#include "loom/model/synth.h"

namespace loom::cluster {
namespace {

std::vector<std::byte> Synth(model::SynthArch arch, int64_t experts, int64_t used,
                             kernels::DType type = kernels::DType::kF32) {
  model::SynthOptions o;
  o.shape = *model::FindSynthShape("tiny");
  o.arch = arch;
  o.type = type;
  o.n_experts = experts;
  o.n_experts_used = used;
  o.expert_ffn_dim = 64;
  o.threads = 1;
  std::vector<std::byte> bytes;
  EXPECT_TRUE(model::WriteSynthModelToMemory(o, &bytes).ok());
  return bytes;
}

CostInputs Inputs(int ranks) {
  CostInputs in;
  in.ranks = ranks;
  in.rank.decode_bytes_per_s = 1e9;
  in.rank.prompt_flops = 1e11;
  in.link = {20e-6, 1e9};
  in.context = 64;
  return in;
}

int64_t Bytes(const model::ModelFile& f, const std::string& part) {
  int64_t n = 0;
  for (const auto& [name, t] : f.tensors) {
    if (name.find(part) != std::string::npos) n += t.size_bytes;
  }
  return n;
}

// The plan with `group` ranks per stage (tensor- or, for mixtures of experts, expert-parallel).
const Prediction& Find(const std::vector<Prediction>& all, int tp, int pp) {
  for (const Prediction& p : all) {
    if (p.group() == tp && p.pp == pp) return p;
  }
  ADD_FAILURE() << "no plan tp" << tp << " pp" << pp;
  return all.front();
}

// Calibrating on a mixture of experts (no dense feed-forward matrices) measures both speeds.
TEST(CostModelTest, CalibratesOnMixturesOfExperts) {
  for (model::SynthArch arch : {model::SynthArch::kQwen3Moe, model::SynthArch::kDeepseek2}) {
    const auto bytes = Synth(arch, 8, 2, kernels::DType::kQ8_0);
    auto f = model::OpenModelFromBytes(bytes, "moe.gguf");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    auto facts = Calibrate(**f, 1);
    ASSERT_TRUE(facts.ok()) << facts.status().ToString();
    EXPECT_GT(facts->decode_bytes_per_s, 0);
    EXPECT_GT(facts->prompt_flops, 0);
  }
}

// The busiest rank's expected expert count against enumerating every choice of k experts.
TEST(CostModelTest, ExpectedBusiestExpertsMatchesEnumeration) {
  struct Case {
    std::vector<int64_t> group;
    int64_t k;
  };
  for (const Case& c : {Case{{4, 4}, 2}, Case{{3, 3, 2}, 2}, Case{{4, 4, 4, 4}, 4},
                        Case{{3, 2, 2}, 3}, Case{{8}, 3}, Case{{5, 5}, 5}}) {
    int64_t n = 0;
    std::vector<int> owner;
    for (size_t r = 0; r < c.group.size(); ++r) {
      for (int64_t e = 0; e < c.group[r]; ++e) owner.push_back(static_cast<int>(r));
      n += c.group[r];
    }
    double sum = 0;
    int64_t choices = 0;
    for (uint32_t mask = 0; mask < (1u << n); ++mask) {
      if (__builtin_popcount(mask) != c.k) continue;
      std::vector<int64_t> count(c.group.size(), 0);
      for (int64_t e = 0; e < n; ++e) count[static_cast<size_t>(owner[e])] += (mask >> e) & 1;
      sum += static_cast<double>(*std::max_element(count.begin(), count.end()));
      ++choices;
    }
    EXPECT_NEAR(ExpectedBusiestExperts(c.group, c.k), sum / static_cast<double>(choices), 1e-9)
        << c.group.size() << " ranks, k " << c.k;
  }
}

// One rank reads every weight but the embedding table (a row of it): dense models, all of them.
TEST(CostModelTest, DenseDecodeReadsEveryWeight) {
  const auto bytes = Synth(model::SynthArch::kLlama, 0, 0, kernels::DType::kQ8_0);
  auto f = model::OpenModelFromBytes(bytes, "dense");
  ASSERT_TRUE(f.ok()) << f.status().message();
  const auto all = PredictAll(**f, Inputs(1));
  const double expected =
      static_cast<double>((*f)->total_tensor_bytes() - Bytes(**f, "token_embd.")) / 1e9;
  EXPECT_DOUBLE_EQ(Find(all, 1, 1).decode_compute_s, expected);
}

// A mixture of experts reads k of n experts per token: the decode time's expert part scales with
// experts_used / experts, and a model with twice the experts but the same k reads the same.
TEST(CostModelTest, MixtureOfExpertsDecodeReadsItsActiveExperts) {
  struct Case {
    int64_t experts, used;
  };
  std::vector<double> compute, expert_bytes, other_bytes;
  for (const Case c : {Case{8, 2}, Case{16, 2}, Case{8, 4}}) {
    const auto bytes = Synth(model::SynthArch::kQwen3Moe, c.experts, c.used);
    auto f = model::OpenModelFromBytes(bytes, "moe");
    ASSERT_TRUE(f.ok()) << f.status().message();
    const auto all = PredictAll(**f, Inputs(2));
    const Prediction& one = Find(all, 1, 1);
    ASSERT_TRUE(one.feasible) << one.why_not;
    const double exps = static_cast<double>(Bytes(**f, "_exps."));
    const double other =
        static_cast<double>((*f)->total_tensor_bytes() - Bytes(**f, "token_embd.")) - exps;
    EXPECT_NEAR(one.decode_compute_s * 1e9, other + exps * c.used / c.experts, 1e-3);
    // Two stages read the same bytes between them.
    const Prediction& two = Find(all, 1, 2);
    ASSERT_TRUE(two.feasible) << two.why_not;
    EXPECT_NEAR(two.decode_compute_s, one.decode_compute_s, 1e-12);
    // Below the whole model's bytes: not every expert is read.
    EXPECT_LT(one.decode_compute_s * 1e9, other + exps);
    compute.push_back(one.decode_compute_s * 1e9);
    expert_bytes.push_back(exps);
    other_bytes.push_back(other);
  }
  // 16 experts, top 2: twice the expert bytes of 8, the same active share read.
  EXPECT_DOUBLE_EQ(expert_bytes[1], 2 * expert_bytes[0]);
  EXPECT_NEAR(compute[1] - other_bytes[1], compute[0] - other_bytes[0], 1e-3);
  // Top 4 of 8 reads twice the expert bytes of top 2.
  EXPECT_NEAR(compute[2] - other_bytes[2], 2 * (compute[0] - other_bytes[0]), 1e-3);
}

// The planner needs shapes and types, not data: a GGUF file cut after its tensor table plans as
// the whole file does, while opening it to run still fails.
TEST(CostModelTest, PlansFromAGgufHeaderOnly) {
  const auto bytes = Synth(model::SynthArch::kQwen3Moe, 8, 2, kernels::DType::kQ4_0);
  auto parsed = model::ParseGguf(bytes, "moe");
  ASSERT_TRUE(parsed.ok());
  const std::string path =
      ::testing::TempDir() + "loom_header_" + std::to_string(::getpid()) + ".gguf";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), parsed->data_offset);
  }
  EXPECT_FALSE(model::OpenModel(path).ok());
  auto header = OpenShapeOnly(path, "");
  std::remove(path.c_str());
  ASSERT_TRUE(header.ok()) << header.status().message();
  EXPECT_EQ((*header)->format, "gguf-header");
  for (const auto& [name, t] : (*header)->tensors) EXPECT_EQ(t.data, nullptr) << name;
  auto whole = model::OpenModelFromBytes(bytes, "moe");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ((*header)->total_tensor_bytes(), (*whole)->total_tensor_bytes());
  const auto a = PredictAll(**header, Inputs(4));
  const auto b = PredictAll(**whole, Inputs(4));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].feasible, b[i].feasible);
    EXPECT_EQ(a[i].decode_tokens_per_s, b[i].decode_tokens_per_s);
    EXPECT_EQ(a[i].prompt_tokens_per_s, b[i].prompt_tokens_per_s);
  }
}

// A GGUF header of an architecture the runtime does not run ("glm4moe", with DeepSeek-style
// latent-attention tensors and experts): the planner takes the tensor table as it is, and counts
// a token's active expert bytes.  (Written for "deepseek2" before the runtime read it.)
TEST(CostModelTest, PlansAHeaderOfAnArchitectureTheRuntimeDoesNotRun) {
  using kernels::DType;
  model::GgufWriter w;
  w.AddString("general.architecture", "glm4moe");
  w.AddU32("glm4moe.embedding_length", 256);
  w.AddU32("glm4moe.block_count", 2);
  w.AddU32("glm4moe.attention.head_count", 4);
  w.AddU32("glm4moe.attention.head_count_kv", 4);
  w.AddU32("glm4moe.attention.key_length", 192);
  w.AddU32("glm4moe.attention.value_length", 128);
  w.AddU32("glm4moe.attention.kv_lora_rank", 64);
  w.AddU32("glm4moe.rope.dimension_count", 64);
  w.AddU32("glm4moe.feed_forward_length", 512);
  w.AddU32("glm4moe.expert_feed_forward_length", 128);
  w.AddU32("glm4moe.expert_count", 16);
  w.AddU32("glm4moe.expert_used_count", 4);
  w.AddU32("glm4moe.context_length", 1024);
  int64_t exps = 0;
  auto add = [&](const std::string& name, DType type, std::vector<int64_t> shape) {
    ASSERT_TRUE(w.AddTensor(name, type, shape).ok()) << name;
  };
  add("token_embd.weight", DType::kQ8_0, {1000, 256});
  add("output.weight", DType::kQ8_0, {1000, 256});
  add("output_norm.weight", DType::kF32, {256});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", DType::kF32, {256});
    add(p + "attn_q.weight", DType::kQ8_0, {4 * 192, 256});
    add(p + "attn_kv_a_mqa.weight", DType::kQ8_0, {64 + 64, 256});
    add(p + "attn_kv_b.weight", DType::kQ8_0, {4 * (128 + 128), 64});
    add(p + "attn_output.weight", DType::kQ8_0, {256, 4 * 128});
    if (l == 0) {
      add(p + "ffn_gate.weight", DType::kQ4_0, {512, 256});
      add(p + "ffn_up.weight", DType::kQ4_0, {512, 256});
      add(p + "ffn_down.weight", DType::kQ4_0, {256, 512});
      continue;
    }
    add(p + "ffn_gate_inp.weight", DType::kF32, {16, 256});
    add(p + "ffn_gate_exps.weight", DType::kQ4_0, {16, 128, 256});
    add(p + "ffn_up_exps.weight", DType::kQ4_0, {16, 128, 256});
    add(p + "ffn_down_exps.weight", DType::kQ4_0, {16, 256, 128});
    add(p + "ffn_gate_shexp.weight", DType::kQ4_0, {128, 256});
    add(p + "ffn_up_shexp.weight", DType::kQ4_0, {128, 256});
    add(p + "ffn_down_shexp.weight", DType::kQ4_0, {256, 128});
    exps = 3 * 16 * 128 * 256 / 32 * 18;
  }
  std::vector<std::byte> header;
  ASSERT_TRUE(w.BeginMemory(&header).ok());  // the header only: no tensor data follows
  const std::string path =
      ::testing::TempDir() + "loom_glm4moe_" + std::to_string(::getpid()) + ".gguf";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()),
              static_cast<std::streamsize>(header.size()));
  }
  auto f = OpenShapeOnly(path, "");
  std::remove(path.c_str());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->hparams.arch, "glm4moe");
  EXPECT_TRUE((*f)->hparams.is_moe());
  EXPECT_EQ((*f)->hparams.vocab_size, 1000);
  const auto all = PredictAll(**f, Inputs(2));
  const Prediction& one = Find(all, 1, 1);
  ASSERT_TRUE(one.feasible) << one.why_not;
  const double read = static_cast<double>((*f)->total_tensor_bytes() - 1000 * 256 / 32 * 34);
  EXPECT_NEAR(one.decode_compute_s * 1e9, read - exps * (1.0 - 4.0 / 16), 1e-3);
  EXPECT_TRUE(Find(all, 1, 2).feasible) << Find(all, 1, 2).why_not;
}

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/bench/configs/" + name, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  EXPECT_FALSE(s.str().empty()) << name;
  return s.str();
}

// The configs of the published cluster runs' models give their published parameter counts.
TEST(CostModelTest, ConfigsGiveThePublishedParameterCounts) {
  struct Case {
    const char* file;
    double total, active;  // billions, as the model cards give them
  };
  for (const Case c : {Case{"qwen3-235b-a22b.json", 235, 22}, Case{"deepseek-v3.1.json", 671, 37},
                       Case{"kimi-k2-thinking.json", 1040, 32}}) {
    auto f = ShapeFromConfig(Fixture(c.file), c.file, "");
    ASSERT_TRUE(f.ok()) << f.status().message();
    const model::ParameterCounts n = model::CountParameters(**f);
    // The cards round; DeepSeek's 671B leaves out the multi-token-prediction layer's 14B, and the
    // counts here leave out nothing else that is published.
    EXPECT_NEAR(static_cast<double>(n.total) / 1e9, c.total, 0.02 * c.total) << c.file;
    EXPECT_NEAR(static_cast<double>(n.active) / 1e9, c.active, 0.06 * c.active) << c.file;
  }
}

// `loom plan`'s table for Qwen3 235B-A22B on up to four M3 Ultras over Thunderbolt 5 RDMA: the
// shape of the output, not the published speeds.
TEST(CostModelTest, Qwen3OnFourM3UltrasOverThunderbolt5) {
  auto f = ShapeFromConfig(Fixture("qwen3-235b-a22b.json"), "qwen3", "");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE((*f)->hparams.is_moe());
  auto machine = LoadMachineProfile("m3-ultra-512g");
  auto link = LoadLinkProfile("tb5-rdma");
  ASSERT_TRUE(machine.ok() && link.ok());
  CostInputs in;
  in.ranks = 4;
  in.rank = machine->Facts();
  in.link = link->Facts();
  in.context = 8192;
  const auto all = PredictAll(**f, in);
  ASSERT_EQ(all.size(), 8u);  // (group, pp) with group * pp <= 4
  for (const Prediction& p : all) {
    EXPECT_EQ(p.tp, 1);  // a mixture of experts splits its groups by experts
    if (p.ep == 3) {
      EXPECT_FALSE(p.feasible);  // 3 does not divide the 64 heads
      EXPECT_NE(p.why_not.find("does not divide"), std::string::npos) << p.why_not;
      continue;
    }
    ASSERT_TRUE(p.feasible) << p.why_not;
    EXPECT_GT(p.decode_tokens_per_s, 0);
    EXPECT_GT(p.prompt_tokens_per_s, 0);
    EXPECT_EQ(p.plan.ep, p.ep > 1);
  }
  // Stages run one after another: the same bytes read per token and more hops, so more machines
  // in a pipeline predict fewer tokens/s.
  const Prediction& one = Find(all, 1, 1);
  const Prediction& four = Find(all, 1, 4);
  EXPECT_NEAR(four.decode_compute_s, one.decode_compute_s, 1e-9);
  EXPECT_GT(four.decode_link_s, one.decode_link_s);
  EXPECT_LT(four.decode_tokens_per_s, one.decode_tokens_per_s);
  // Expert parallelism as `--ep` runs it: every rank holds 1/ep of every expert's rows, so each
  // reads 1/ep of the bytes; but it pays three all-reduces a layer (attention, the experts'
  // gathered activations, the block's output), at Thunderbolt 5's 50 us that is ~15 ms a token
  // over 94 layers, more than the halved reads save: one machine is predicted fastest.
  const Prediction& ep2 = Find(all, 2, 1);
  const Prediction& ep4 = Find(all, 4, 1);
  EXPECT_NEAR(ep2.decode_compute_s, one.decode_compute_s * 0.5, one.decode_compute_s * 0.02);
  EXPECT_NEAR(ep4.decode_compute_s, one.decode_compute_s * 0.25, one.decode_compute_s * 0.02);
  EXPECT_GT(ep2.decode_link_s, 90 * 3 * 50e-6);
  EXPECT_GT(ep4.decode_link_s, ep2.decode_link_s);
  EXPECT_EQ(PickBest(all), &one);
  // Active bytes: about 22B parameters at 4.5 bits, at 0.8 x 819 GB/s.
  const double active = static_cast<double>(model::CountParameters(**f).active_bytes_per_token);
  EXPECT_NEAR(one.decode_compute_s, active / (0.8 * 819e9), 0.02 * one.decode_compute_s);
}

// A dense 70B model: tensor parallelism halves each rank's reads and costs two all-reduces per
// layer, which Thunderbolt 5 RDMA's latency allows, so more machines predict more tokens/s; over
// Thunderbolt 4 TCP (300 us) two machines' all-reduces cost more than their halved reads save, and
// at four the link takes longer than the reads.
TEST(CostModelTest, DenseModelSpeedsUpWithTensorParallelismOverThunderbolt5Only) {
  auto f = ShapeFromConfig(Fixture("llama-3.1-70b.json"), "llama", "q4_0");
  ASSERT_TRUE(f.ok()) << f.status().message();
  auto machine = LoadMachineProfile("m4-max-128g");
  ASSERT_TRUE(machine.ok());
  CostInputs in;
  in.ranks = 4;
  in.rank = machine->Facts();
  in.context = 8192;
  in.link = LoadLinkProfile("tb5-rdma")->Facts();
  const auto fast = PredictAll(**f, in);
  const double tp1 = Find(fast, 1, 1).decode_tokens_per_s,
               tp2 = Find(fast, 2, 1).decode_tokens_per_s,
               tp4 = Find(fast, 4, 1).decode_tokens_per_s;
  EXPECT_GT(tp2, tp1);
  EXPECT_GT(tp4, tp2);
  EXPECT_EQ(PickBest(fast)->tp, 4);
  in.link = LoadLinkProfile("tb4-tcp")->Facts();
  const auto slow = PredictAll(**f, in);
  EXPECT_LT(Find(slow, 2, 1).decode_tokens_per_s, Find(slow, 1, 1).decode_tokens_per_s);
  EXPECT_GT(Find(slow, 4, 1).decode_link_s, Find(slow, 4, 1).decode_compute_s);
}

// Kimi K2 at 4 bits does not fit one 512 GB machine; two stages do.
TEST(CostModelTest, KimiK2NeedsTwoM3Ultras) {
  auto f = ShapeFromConfig(Fixture("kimi-k2-thinking.json"), "kimi", "");
  ASSERT_TRUE(f.ok()) << f.status().message();
  auto machine = LoadMachineProfile("m3-ultra-512g");
  ASSERT_TRUE(machine.ok());
  CostInputs in;
  in.ranks = 2;
  in.rank = machine->Facts();
  in.link = LoadLinkProfile("tb5-rdma")->Facts();
  in.context = 8192;
  const auto all = PredictAll(**f, in);
  EXPECT_FALSE(Find(all, 1, 1).feasible);
  EXPECT_NE(Find(all, 1, 1).why_not.find("needs"), std::string::npos) << Find(all, 1, 1).why_not;
  EXPECT_TRUE(Find(all, 1, 2).feasible) << Find(all, 1, 2).why_not;
}

TEST(CostModelTest, ConfigErrorsAreClear) {
  auto expect_error = [](const std::string& json, const std::string& type,
                         const std::string& words) {
    auto f = ShapeFromConfig(json, "config.json", type);
    ASSERT_FALSE(f.ok()) << json;
    EXPECT_NE(f.status().message().find(words), std::string::npos) << f.status().message();
  };
  const std::string base =
      R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, )"
      R"("intermediate_size": 128, "vocab_size": 300)";
  expect_error("[]", "", "not a JSON object");
  expect_error(R"({"hidden_size": 64})", "", "no \"num_hidden_layers\"");
  expect_error(base + R"(, "num_key_value_heads": 3})", "", "must divide");
  expect_error(base + R"(, "hidden_size": -1})", "", "non-negative");
  expect_error(base + R"(, "num_experts": 4, "num_experts_per_tok": 5})", "", "5 of 4 experts");
  expect_error(base + "}", "q3_k", "not a type the planner sizes");
  expect_error(base + R"(, "quantization": {"bits": 3, "group_size": 64}})", "", "give --type");
  // Wrong JSON types are errors, not exceptions.
  expect_error(base + R"(, "quantization": {"bits": "4", "group_size": 64}})", "", "give --type");
  expect_error(base + R"(, "tie_word_embeddings": "yes"})", "", "true or false");
  expect_error(base + R"(, "num_experts": "8"})", "", "non-negative integer");
  expect_error(base + R"(, "hidden_size": 4000000000000})", "", "above the planner's limit");
  EXPECT_TRUE(ShapeFromConfig(base + R"(, "model_type": 7})", "config.json", "").ok());
  auto dense = ShapeFromConfig(base + "}", "config.json", "q4_0");
  ASSERT_TRUE(dense.ok()) << dense.status().message();
  EXPECT_EQ((*dense)->tensors.at("blk.1.ffn_down.weight").type, kernels::DType::kQ4_0);
}

}  // namespace
}  // namespace loom::cluster
