#include "loom/parallel/plan.h"

#include <gtest/gtest.h>

#include "loom/model/synth.h"

namespace loom::parallel {
namespace {

// An uneven synthetic model: 7 layers, 8 heads over 2 KV heads, 96 feed-forward columns.
std::unique_ptr<model::ModelFile> Uneven(kernels::DType type, std::vector<std::byte>* storage) {
  model::SynthOptions o;
  o.shape = {"uneven", 64, 96, 7, 8, 2, 300, 128, 1e-5f, 10000.0f};
  o.type = type;
  o.threads = 1;
  EXPECT_TRUE(model::WriteSynthModelToMemory(o, storage).ok());
  auto file = model::OpenModelFromBytes(*storage, "uneven.gguf");
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  return file.ok() ? std::move(*file) : nullptr;
}

PlanRequest Req(int tp, int pp) {
  PlanRequest r;
  r.tp = tp;
  r.pp = pp;
  return r;
}

TEST(PlanTest, EveryLayerInExactlyOneStage) {
  std::vector<std::byte> bytes;
  auto file = Uneven(kernels::DType::kF32, &bytes);
  ASSERT_NE(file, nullptr);
  for (int pp = 1; pp <= 7; ++pp) {
    auto plan = MakePlan(*file, Req(1, pp));
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    int64_t next = 0;
    for (const RankPlan& r : plan->ranks) {
      EXPECT_EQ(r.shard.layer_begin, next);
      EXPECT_GT(r.shard.layer_end, r.shard.layer_begin);
      EXPECT_EQ(r.shard.embed, r.stage == 0);
      EXPECT_EQ(r.shard.head, r.stage == pp - 1);
      next = r.shard.layer_end;
    }
    EXPECT_EQ(next, 7);
  }
  EXPECT_EQ(MakePlan(*file, Req(1, 8)).status().code(), StatusCode::kInvalidArgument);
}

TEST(PlanTest, MixturesOfExpertsSplitIntoStagesButNotTensorParallelRanks) {
  model::SynthOptions o;
  o.shape = *model::FindSynthShape("tiny");
  o.arch = model::SynthArch::kMixtral;
  o.n_experts = 4;
  o.n_experts_used = 2;
  o.threads = 1;
  std::vector<std::byte> bytes;
  ASSERT_TRUE(model::WriteSynthModelToMemory(o, &bytes).ok());
  auto file = model::OpenModelFromBytes(bytes, "mixtral.gguf");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto pp = MakePlan(**file, Req(1, 2));
  ASSERT_TRUE(pp.ok()) << pp.status().ToString();
  EXPECT_EQ(pp->ranks.size(), 2u);
  auto tp = MakePlan(**file, Req(2, 1));
  ASSERT_FALSE(tp.ok());
  EXPECT_EQ(tp.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(tp.status().message().find("use --pp"), std::string::npos);
}

TEST(PlanTest, LatentAttentionStagesHoldTheCompressedCache) {
  model::SynthOptions o;
  o.shape = *model::FindSynthShape("tiny");  // 5 layers, context 512
  o.arch = model::SynthArch::kDeepseek2;
  o.n_experts = 4;
  o.n_experts_used = 2;
  o.threads = 1;
  std::vector<std::byte> bytes;
  ASSERT_TRUE(model::WriteSynthModelToMemory(o, &bytes).ok());
  auto file = model::OpenModelFromBytes(bytes, "deepseek2.gguf");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto plan = MakePlan(**file, Req(1, 2));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const model::HParams& hp = (*file)->hparams;
  for (const RankPlan& r : plan->ranks) {
    const int64_t layers = r.shard.layer_end - r.shard.layer_begin;
    // kv_lora_rank 32 + rope 8 f32 values per position and layer, not 8 heads x (24 + 16).
    EXPECT_EQ(r.kv_bytes, layers * 512 * (32 + 8) * 4) << hp.kv_lora_rank;
  }
}

TEST(PlanTest, LayersFollowStageWeightsOrExplicitCounts) {
  std::vector<std::byte> bytes;
  auto file = Uneven(kernels::DType::kF32, &bytes);
  ASSERT_NE(file, nullptr);
  auto weighted = MakePlan(*file, [] { auto r = Req(1, 2); r.stage_weights = {3.0, 1.0}; return r; }());
  ASSERT_TRUE(weighted.ok());
  EXPECT_EQ(weighted->rank(0).shard.layer_end, 5);  // 1 + round(5 * 3/4) of 7
  auto explicit_plan = MakePlan(*file, [] { auto r = Req(1, 3); r.stage_layers = {1, 4, 2}; return r; }());
  ASSERT_TRUE(explicit_plan.ok());
  EXPECT_EQ(explicit_plan->rank(1).shard.layer_begin, 1);
  EXPECT_EQ(explicit_plan->rank(1).shard.layer_end, 5);
  EXPECT_FALSE(MakePlan(*file, [] { auto r = Req(1, 3); r.stage_layers = {1, 4, 1}; return r; }()).ok());
  EXPECT_FALSE(MakePlan(*file, [] { auto r = Req(1, 2); r.stage_layers = {0, 7}; return r; }()).ok());
}

TEST(PlanTest, TensorParallelSplitsHeadsAndWholeBlocksOfColumns) {
  std::vector<std::byte> bytes;
  auto file = Uneven(kernels::DType::kQ4_0, &bytes);
  ASSERT_NE(file, nullptr);
  auto plan = MakePlan(*file, Req(2, 1));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // 96 columns = 3 blocks of 32: 2 + 1.
  EXPECT_EQ(plan->rank(0).shard.ffn_dim, 64);
  EXPECT_EQ(plan->rank(1).shard.ffn_begin, 64);
  EXPECT_EQ(plan->rank(1).shard.ffn_dim, 32);
  EXPECT_EQ(plan->rank(1).shard.head_begin, 4);
  // The output head by vocabulary rows: the ranks' slices cover it exactly once.
  EXPECT_EQ(plan->rank(0).shard.vocab_begin, 0);
  EXPECT_EQ(plan->rank(1).shard.vocab_begin, plan->rank(0).shard.vocab_count);
  EXPECT_EQ(plan->rank(0).shard.vocab_count + plan->rank(1).shard.vocab_count,
            file->hparams.vocab_size);
  EXPECT_LE(plan->rank(0).shard.vocab_count - plan->rank(1).shard.vocab_count, 1);
  // Four ranks cannot share three blocks; three ranks do not divide eight heads.
  EXPECT_EQ(MakePlan(*file, Req(4, 1)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakePlan(*file, Req(3, 1)).status().code(), StatusCode::kInvalidArgument);
}

TEST(PlanTest, MoreRanksThanKvHeadsShareThem) {
  std::vector<std::byte> bytes;
  auto file = Uneven(kernels::DType::kF32, &bytes);
  ASSERT_NE(file, nullptr);
  auto plan = MakePlan(*file, Req(4, 1));  // 2 KV heads, 4 ranks of 2 query heads
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto w = model::BindWeights(*file, plan->rank(3).shard);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->local.n_kv_heads, 1);
  EXPECT_EQ(w->local.kv_head_begin, 1);
}

TEST(PlanTest, ShardBytesAddUpToTheModel) {
  std::vector<std::byte> bytes;
  auto file = Uneven(kernels::DType::kF32, &bytes);
  ASSERT_NE(file, nullptr);
  auto plan = MakePlan(*file, Req(2, 3));
  ASSERT_TRUE(plan.ok());
  int64_t sum = 0;
  for (const RankPlan& r : plan->ranks) sum += r.weight_bytes;
  // Each stage's two tensor-parallel ranks both hold the norms, and stage 0's the embedding;
  // everything else (the last stage's output head by vocabulary rows) is split between them.
  int64_t replicated = 0;
  for (const auto& [name, t] : file->tensors) {
    if (name.find("norm") != std::string::npos || name == "token_embd.weight") {
      replicated += t.size_bytes;
    }
  }
  EXPECT_NEAR(static_cast<double>(sum),
              static_cast<double>(file->total_tensor_bytes() + replicated), 8.0);
}

TEST(PlanTest, RefusesPlansThatDoNotFitInMemoryWithNumbers) {
  std::vector<std::byte> bytes;
  auto file = Uneven(kernels::DType::kF32, &bytes);
  ASSERT_NE(file, nullptr);
  auto plan = MakePlan(*file, [] { auto r = Req(1, 2); r.rank_memory = {100000}; return r; }());
  ASSERT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("rank 0"), std::string::npos) << plan.status().message();
  EXPECT_NE(plan.status().message().find("GiB"), std::string::npos);
  auto roomy = Req(1, 2);
  roomy.rank_memory = {int64_t{1} << 30};
  EXPECT_TRUE(MakePlan(*file, roomy).ok());
}

}  // namespace
}  // namespace loom::parallel
