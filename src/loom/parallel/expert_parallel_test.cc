// Expert parallelism (parallel/plan.h): the ranks of an expert-parallel group, run by threads of
// one process with their partial outputs summed (ThreadCollective), give the greedy tokens of one
// process and logits within rounding of it, for every mixture-of-experts architecture; each rank
// binds only its own experts.  Not bit for bit: one process adds a token's k weighted experts in
// its choice order, the group adds each rank's share and then the ranks' sums (docs/parallel.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "loom/model/model_test_util.h"
#include "loom/model/synth.h"
#include "loom/model/thread_collective_test_util.h"
#include "loom/model/transformer.h"
#include "loom/parallel/plan.h"

namespace loom::model {
namespace {

namespace k = loom::kernels;
using testing::ThreadCollective;

using Model = testing::SynthMoe;

Model Synth(SynthArch arch, k::DType type, bool mla_split = false) {
  Model m = testing::MakeSynthMoe(arch, type, 8, 2, mla_split);
  EXPECT_NE(m.file, nullptr) << m.error;
  return m;
}

const std::vector<int32_t> kPrompt = {1, 300, 301, 302, 290, 310, 305, 330, 340};
constexpr int kSteps = 12;

struct Decoded {
  std::vector<int32_t> tokens;  // greedy continuation
  std::vector<float> logits;    // (steps + 1, vocab): after the prompt, then after each token
  Status status;
};

// Greedy decoding by one shard (with `collective` when it is one of a group).
Decoded Decode(const ModelFile& file, const ShardSpec& spec, Collective* collective) {
  Decoded run;
  auto w = BindWeights(file, spec);
  if (!w.ok()) {
    run.status = w.status();
    return run;
  }
  base::ThreadPool pool(1);
  auto t = Transformer::Create(*w, {}, pool);
  if (!t.ok()) {
    run.status = t.status();
    return run;
  }
  (*t)->set_collective(collective);
  const int64_t vocab = file.hparams.vocab_size;
  std::vector<int32_t> tok = kPrompt, pos, slot(kPrompt.size(), 0);
  for (size_t i = 0; i < kPrompt.size(); ++i) pos.push_back(static_cast<int32_t>(i));
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (int step = 0; step <= kSteps; ++step) {
    const int32_t last = static_cast<int32_t>(tok.size()) - 1;
    const std::vector<int32_t> rows = {last};
    run.status = (*t)->Forward({tok, pos, slot, rows}, logits.data());
    if (!run.status.ok()) return run;
    run.logits.insert(run.logits.end(), logits.begin(), logits.end());
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (step == kSteps) break;
    run.tokens.push_back(next);
    tok = {next};
    pos = {static_cast<int32_t>(kPrompt.size()) + step};
    slot = {0};
  }
  return run;
}

// Rank 0's run of an expert-parallel group of `ranks` planned by MakePlan (each rank computes the
// whole output head here: the head's vocabulary split is the pod's concern).
Decoded DecodeExpertParallel(const ModelFile& file, int ranks, bool whole_experts,
                             std::vector<parallel::RankPlan>* plans) {
  parallel::PlanRequest req;
  req.ep = ranks;
  req.ep_whole_experts = whole_experts;
  auto plan = parallel::MakePlan(file, req);
  if (!plan.ok()) return {{}, {}, plan.status()};
  EXPECT_TRUE(plan->ep);
  EXPECT_EQ(plan->tp, ranks);
  *plans = plan->ranks;
  ThreadCollective group(ranks);
  std::vector<Decoded> runs(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ShardSpec spec = plan->rank(r).shard;
      spec.vocab_begin = 0;
      spec.vocab_count = -1;
      ThreadCollective::Rank collective(&group, r);
      runs[static_cast<size_t>(r)] = Decode(file, spec, &collective);
    });
  }
  for (auto& t : threads) t.join();
  for (const Decoded& r : runs) {
    if (!r.status.ok()) return r;
  }
  // Every rank saw the same sums.
  for (const Decoded& r : runs) EXPECT_EQ(r.tokens, runs[0].tokens);
  return runs[0];
}

struct Case {
  SynthArch arch;
  k::DType type;
  bool mla_split;
};

// The largest |a - b| / max(1, |b|) over the logits.
double WorstRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) /
                                std::max(1.0, std::abs(static_cast<double>(b[i]))));
  }
  return worst;
}

class ExpertParallelTest : public ::testing::TestWithParam<Case> {};

TEST_P(ExpertParallelTest, GroupsGiveOneProcesssTokens) {
  const Model m = Synth(GetParam().arch, GetParam().type, GetParam().mla_split);
  ASSERT_NE(m.file, nullptr);
  const Decoded one = Decode(*m.file, {}, nullptr);
  ASSERT_TRUE(one.status.ok()) << one.status.ToString();
  // The tiny shape's 64 attention-output columns split into 4 cut quantized blocks of 32: 4 ranks
  // for the float models only.
  const std::vector<int> groups =
      GetParam().type == k::DType::kF32 ? std::vector<int>{2, 4} : std::vector<int>{2};
  for (int ranks : groups) {
    std::vector<parallel::RankPlan> plans;
    const Decoded ep = DecodeExpertParallel(*m.file, ranks, /*whole_experts=*/true, &plans);
    ASSERT_TRUE(ep.status.ok()) << ranks << ": " << ep.status.ToString();
    EXPECT_EQ(ep.tokens, one.tokens) << ranks << " ranks";
    ASSERT_EQ(ep.logits.size(), one.logits.size());
    const double worst = WorstRelativeDifference(ep.logits, one.logits);
    EXPECT_LT(worst, 1e-3) << ranks << " ranks";
    // The experts are dealt out in consecutive ranges, each rank holding only its own.
    int64_t next = 0;
    for (const parallel::RankPlan& r : plans) {
      EXPECT_EQ(r.shard.expert_begin, next);
      EXPECT_EQ(r.shard.n_experts, m.file->hparams.n_experts / ranks);
      next += r.shard.n_experts;
      auto w = BindWeights(*m.file, r.shard);
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      for (int64_t l = 0; l < w->local.n_layers(); ++l) {
        const LayerWeights& L = w->layers[static_cast<size_t>(l)];
        if (!m.file->hparams.is_moe_layer(l)) continue;
        for (int64_t e = 0; e < m.file->hparams.n_experts; ++e) {
          const bool mine = e >= r.shard.expert_begin && e < r.shard.expert_begin + r.shard.n_experts;
          EXPECT_EQ(L.experts[static_cast<size_t>(e)].gate.data != nullptr, mine) << e;
        }
      }
    }
    EXPECT_EQ(next, m.file->hparams.n_experts);
  }
}

// The default split: every rank holds its rows of every expert (gate and up rows of
// expert_ffn_dim, down rows of dim).  The same greedy tokens, and the experts' sums computed whole
// by one rank each.
TEST_P(ExpertParallelTest, RowPartsGiveOneProcesssTokens) {
  const Model m = Synth(GetParam().arch, GetParam().type, GetParam().mla_split);
  ASSERT_NE(m.file, nullptr);
  const HParams& hp = m.file->hparams;
  const Decoded one = Decode(*m.file, {}, nullptr);
  ASSERT_TRUE(one.status.ok()) << one.status.ToString();
  const std::vector<int> groups =
      GetParam().type == k::DType::kF32 ? std::vector<int>{2, 4} : std::vector<int>{2};
  for (int ranks : groups) {
    std::vector<parallel::RankPlan> plans;
    const Decoded ep = DecodeExpertParallel(*m.file, ranks, /*whole_experts=*/false, &plans);
    ASSERT_TRUE(ep.status.ok()) << ranks << ": " << ep.status.ToString();
    EXPECT_EQ(ep.tokens, one.tokens) << ranks << " ranks";
    ASSERT_EQ(ep.logits.size(), one.logits.size());
    const double worst = WorstRelativeDifference(ep.logits, one.logits);
    // The experts' outputs are one process's bits (moe_test), but attention's and the shared
    // experts' partial sums differ in the last bits as under whole experts; where such a bit tips
    // the rounding of an 8-bit activation (Q8_0, Q4_0 products), the prompt's cache moves by a
    // percent of a logit (Qwen2-MoE Q8_0 here: 0.12 at the prompt; the same tokens).
    const bool quantized_act = GetParam().type != k::DType::kF32;
    EXPECT_LT(worst, quantized_act ? 0.2 : 1e-3) << ranks << " ranks";
    int64_t ffn_rows = 0, dim_rows = 0;
    for (const parallel::RankPlan& r : plans) {
      EXPECT_EQ(r.shard.expert_parts, ranks);
      EXPECT_EQ(r.shard.expert_part, r.tp_rank);
      auto w = BindWeights(*m.file, r.shard);
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      const ExpertRows rows = ExpertRowsOf(hp, w->local);
      EXPECT_EQ(rows.ffn_begin, ffn_rows);
      EXPECT_EQ(rows.dim_begin, dim_rows);
      ffn_rows += rows.ffn;
      dim_rows += rows.dim;
      for (int64_t l = 0; l < w->local.n_layers(); ++l) {
        if (!hp.is_moe_layer(l)) continue;
        for (const LayerWeights::Expert& e : w->layers[static_cast<size_t>(l)].experts) {
          EXPECT_EQ(e.gate.rows, rows.ffn);
          EXPECT_EQ(e.up.rows, rows.ffn);
          EXPECT_EQ(e.down.rows, rows.dim);
          EXPECT_EQ(e.down.cols, hp.expert_ffn_dim);
        }
      }
    }
    EXPECT_EQ(ffn_rows, hp.expert_ffn_dim);
    EXPECT_EQ(dim_rows, hp.dim);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ExpertParallelTest,
                         ::testing::Values(Case{SynthArch::kMixtral, k::DType::kF32, false},
                                           Case{SynthArch::kMixtral, k::DType::kQ8_0, false},
                                           Case{SynthArch::kQwen2Moe, k::DType::kF32, false},
                                           Case{SynthArch::kQwen2Moe, k::DType::kQ8_0, false},
                                           Case{SynthArch::kQwen3Moe, k::DType::kF32, false},
                                           Case{SynthArch::kQwen3Moe, k::DType::kQ4_0, false},
                                           Case{SynthArch::kDeepseek2, k::DType::kF32, false},
                                           Case{SynthArch::kDeepseek2, k::DType::kQ8_0, false},
                                           Case{SynthArch::kDeepseek2, k::DType::kF32, true}),
                         [](const auto& info) {
                           const SynthArch a = info.param.arch;
                           return std::string(a == SynthArch::kMixtral    ? "mixtral_"
                                              : a == SynthArch::kQwen2Moe ? "qwen2moe_"
                                              : a == SynthArch::kQwen3Moe ? "qwen3moe_"
                                                                          : "deepseek2_") +
                                  std::string(k::Traits(info.param.type).name) +
                                  (info.param.mla_split ? "_split" : "");
                         });

// The shard's share of the weights: experts 1/N each, attention by heads, router and norms whole.
TEST(ExpertParallelTest, RanksHoldTheirShareOfTheWeights) {
  const Model m = Synth(SynthArch::kQwen3Moe, k::DType::kF32);
  ASSERT_NE(m.file, nullptr);
  parallel::PlanRequest req;
  req.ep = 2;
  auto plan = parallel::MakePlan(*m.file, req);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  int64_t experts = 0, replicated = 0;
  for (const auto& [name, t] : m.file->tensors) {
    if (name.find("_exps.") != std::string::npos) experts += t.size_bytes;
    if (name.find("ffn_gate_inp") != std::string::npos || name.find("norm") != std::string::npos)
      replicated += t.size_bytes;
  }
  const int64_t whole = parallel::ShardWeightBytes(*m.file, {});
  const int64_t a = plan->rank(0).weight_bytes, b = plan->rank(1).weight_bytes;
  EXPECT_EQ(a, b);
  EXPECT_LT(a, whole - experts / 2 + 1);
  EXPECT_GE(a + b, whole + replicated - 1);
}

// What the plan refuses, clearly.
TEST(ExpertParallelTest, PlansThatCannotWorkAreClearErrors) {
  const Model moe = Synth(SynthArch::kMixtral, k::DType::kF32);
  ASSERT_NE(moe.file, nullptr);
  parallel::PlanRequest req;
  req.ep = 16;  // 8 experts
  auto p = parallel::MakePlan(*moe.file, req);
  ASSERT_FALSE(p.ok());
  req.ep = 2;
  req.tp = 2;
  p = parallel::MakePlan(*moe.file, req);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("tp 1 when ep > 1"), std::string::npos) << p.status().ToString();
  req.tp = 2;
  req.ep = 1;
  p = parallel::MakePlan(*moe.file, req);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("use --pp, or --ep"), std::string::npos) << p.status().ToString();
  // A dense model has no experts to split.
  SynthOptions o;
  o.shape = *FindSynthShape("tiny");
  o.type = k::DType::kF32;
  o.threads = 1;
  std::vector<std::byte> bytes;
  ASSERT_TRUE(WriteSynthModelToMemory(o, &bytes).ok());
  auto dense = OpenModelFromBytes(bytes, "dense.gguf");
  ASSERT_TRUE(dense.ok());
  req.tp = 1;
  req.ep = 2;
  p = parallel::MakePlan(**dense, req);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("needs a mixture-of-experts model"), std::string::npos);
  // Heads split without the experts (or the other way round) would sum wrong: refused at bind.
  ShardSpec heads;
  heads.n_heads = moe.file->hparams.n_heads / 2;
  auto w = BindWeights(*moe.file, heads);
  ASSERT_FALSE(w.ok());
  ShardSpec experts;
  experts.n_experts = 4;
  w = BindWeights(*moe.file, experts);
  ASSERT_FALSE(w.ok());
  ShardSpec outside;
  outside.n_heads = 4;
  outside.expert_begin = 6;
  outside.n_experts = 4;
  w = BindWeights(*moe.file, outside);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("outside the model's 8"), std::string::npos) << w.status().ToString();
  // Row parts: heads split with them, a part in range, every expert held.
  ShardSpec rows;
  rows.expert_parts = 2;
  w = BindWeights(*moe.file, rows);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("not supported"), std::string::npos) << w.status().ToString();
  rows.n_heads = moe.file->hparams.n_heads / 2;
  ASSERT_TRUE(BindWeights(*moe.file, rows).ok());
  rows.expert_part = 2;
  w = BindWeights(*moe.file, rows);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("row part 2 of 2"), std::string::npos) << w.status().ToString();
  rows.expert_part = 0;
  rows.n_experts = 4;
  w = BindWeights(*moe.file, rows);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("all 8 experts held"), std::string::npos) << w.status().ToString();
}

}  // namespace
}  // namespace loom::model
