// Shards of a model computed separately and combined give the whole model's logits: pipeline
// stages (layer ranges) handing hidden states on, and tensor-parallel shards (head and
// feed-forward column ranges) whose partial outputs are summed — here by threads in one process,
// so the sharding is tested apart from any transport.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <thread>

#include "loom/base/testing.h"
#include "loom/kernels/matmul.h"
#include "loom/model/model_test_util.h"
#include "loom/model/thread_collective_test_util.h"
#include "loom/model/transformer.h"
#include "loom/model/weight_copy.h"

namespace loom::model {
namespace {

double RelDiff(double a, double b) { return std::abs(a - b) / std::max(1.0, std::abs(b)); }

using model::testing::ThreadCollective;

const std::vector<int32_t> kTokens = {1, 403, 407, 261, 378, 432, 383, 286};

// Logits of every position of kTokens (one batch) for one shard set-up.
// With `copy`, the weight matrices are first copied out of the file's mapping; without `leaves`,
// the row-split products sum each row in one piece instead of their canonical leaf tree.
std::vector<float> WholeModelLogits(const ModelFile& file, bool copy = false, bool leaves = true) {
  auto w = BindWeights(file);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (copy) {
    EXPECT_TRUE(CopyMatricesToMemory(&*w).ok());
  }
  if (!leaves) {
    for (LayerWeights& l : w->layers) l.wo.k_leaves = l.w_down.k_leaves = 1;
  }
  base::ThreadPool pool(1);
  auto t = Transformer::Create(*w, {}, pool);
  EXPECT_TRUE(t.ok());
  const int64_t n = static_cast<int64_t>(kTokens.size());
  std::vector<int32_t> pos(kTokens.size()), slots(kTokens.size(), 0);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
  std::vector<float> logits(static_cast<size_t>(n * file.hparams.vocab_size));
  EXPECT_TRUE((*t)->Forward({kTokens, pos, slots, pos}, logits.data()).ok());
  return logits;
}

class ShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string shared = loom::testing::SharedDir();
    if (shared.empty()) GTEST_SKIP() << loom::testing::kSharedMissingMessage;
    auto f = OpenModel(shared + "/models/stories260K/stories260K.gguf");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    file_ = std::move(*f);
    want_ = WholeModelLogits(*file_);
  }
  void ExpectClose(const std::vector<float>& got) {
    ASSERT_EQ(got.size(), want_.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_LT(RelDiff(got[i], want_[i]), 1e-4) << i;
  }
  std::unique_ptr<ModelFile> file_;
  std::vector<float> want_;
};

TEST_F(ShardTest, PipelineStagesHandingOnHiddenStatesMatchWholeModel) {
  // 5 layers over 3 stages, unevenly.
  const std::vector<std::pair<int, int>> stages = {{0, 2}, {2, 3}, {3, 5}};
  const int64_t n = static_cast<int64_t>(kTokens.size());
  const int64_t dim = file_->hparams.dim;
  std::vector<int32_t> pos(kTokens.size()), slots(kTokens.size(), 0);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
  std::vector<float> hidden(static_cast<size_t>(n * dim));
  std::vector<float> logits(want_.size());
  base::ThreadPool pool(1);
  for (size_t s = 0; s < stages.size(); ++s) {
    ShardSpec spec;
    spec.layer_begin = stages[s].first;
    spec.layer_end = stages[s].second;
    spec.embed = s == 0;
    spec.head = s + 1 == stages.size();
    auto w = BindWeights(*file_, spec);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    auto t = Transformer::Create(*w, {}, pool);
    ASSERT_TRUE(t.ok());
    Batch batch{kTokens, pos, slots, pos};
    if (spec.embed) {
      ASSERT_TRUE((*t)->Embed(kTokens).ok());
    } else {
      std::copy(hidden.begin(), hidden.end(), (*t)->hidden_state());
      EXPECT_EQ((*t)->Embed(kTokens).code(), StatusCode::kFailedPrecondition);
    }
    ASSERT_TRUE((*t)->Layers(batch).ok());
    if (spec.head) {
      ASSERT_TRUE((*t)->Logits(pos, logits.data()).ok());
    } else {
      std::copy_n((*t)->hidden_state(), n * dim, hidden.begin());
    }
  }
  ExpectClose(logits);
}

void RunTensorParallel(const ModelFile& file, int ranks, std::vector<float>* logits,
                       bool copy = false) {
  const HParams& hp = file.hparams;
  ThreadCollective group(ranks);
  std::vector<std::thread> threads;
  std::vector<Status> results(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ShardSpec spec;
      spec.n_heads = hp.n_heads / ranks;
      spec.head_begin = r * spec.n_heads;
      // Uneven feed-forward split: 172 columns over 2 or 4 ranks in pieces that differ.
      const int64_t base = hp.ffn_dim / ranks;
      spec.ffn_begin = r * base;
      spec.ffn_dim = r + 1 == ranks ? hp.ffn_dim - spec.ffn_begin : base;
      auto w = BindWeights(file, spec);
      if (!w.ok()) {
        results[r] = w.status();
        return;
      }
      if (copy) {
        results[r] = CopyMatricesToMemory(&*w);
        if (!results[r].ok()) return;
      }
      base::ThreadPool pool(1);
      auto t = Transformer::Create(*w, {}, pool);
      ThreadCollective::Rank collective(&group, r);
      (*t)->set_collective(&collective);
      const int64_t n = static_cast<int64_t>(kTokens.size());
      std::vector<int32_t> pos(kTokens.size()), slots(kTokens.size(), 0);
      for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
      std::vector<float> mine(logits->size());
      results[r] = (*t)->Forward({kTokens, pos, slots, pos}, mine.data());
      if (r == 0) *logits = std::move(mine);
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) ASSERT_TRUE(s.ok()) << s.ToString();
}

TEST_F(ShardTest, TensorParallelShardsSummedMatchWholeModel) {
  for (int ranks : {2, 4}) {
    std::vector<float> logits(want_.size());
    RunTensorParallel(*file_, ranks, &logits);
    ExpectClose(logits);
  }
}

// Copied weights (whole, and TP shards whose column slices were packed already) compute exactly
// what the mapped ones do: the same bytes, read from elsewhere.
TEST_F(ShardTest, CopiedWeightsGiveTheSameLogitsBitForBit) {
  EXPECT_EQ(WholeModelLogits(*file_, /*copy=*/true), want_);
  std::vector<float> mapped(want_.size()), copied(want_.size());
  RunTensorParallel(*file_, 2, &mapped);
  RunTensorParallel(*file_, 2, &copied, /*copy=*/true);
  EXPECT_EQ(copied, mapped);
  auto w = BindWeights(*file_);
  ASSERT_TRUE(w.ok());
  const int64_t bytes = CopiedMatrixBytes(*w);
  EXPECT_GT(bytes, 0);
  ASSERT_TRUE(CopyMatricesToMemory(&*w).ok());
  ASSERT_EQ(w->owned_bytes.size(), 1u);
  EXPECT_EQ(w->owned_bytes[0].size(), bytes);
  const std::byte* begin = w->owned_bytes[0].data();
  for (const LayerWeights& l : w->layers) {
    EXPECT_GE(l.w_down.data, begin);
    EXPECT_LT(l.w_down.data, begin + bytes);
  }
}

// Row-split products add their column leaves in one fixed tree (kernels/matmul.h) and the ranks'
// partial sums are added in the same tree, so tensor-parallel logits equal one process's bit for
// bit, also where 8-bit activation quantization would turn any other order's last-bit differences
// into different values.  Synthetic models sized to have several leaves per row-split product.
TEST(ShardExactTest, TensorParallelLogitsEqualOneProcessBitForBit) {
  struct Case {
    kernels::DType type;
    int64_t dim, heads, ffn;
    std::vector<int> ranks;
  };
  const std::vector<Case> cases = {{kernels::DType::kQ4_0, 1024, 8, 2048, {2, 4}},
                                   {kernels::DType::kQ8_0, 1024, 8, 2048, {2, 4}},
                                   {kernels::DType::kF16, 1024, 8, 2048, {2, 4}},
                                   {kernels::DType::kQ4_K, 1024, 8, 2048, {2, 4}},
                                   {kernels::DType::kQ5_K, 1024, 8, 2048, {2}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(kernels::Traits(c.type).name);
    model::testing::TestModelSpec spec;
    spec.type = c.type;
    spec.dim = c.dim;
    spec.heads = c.heads;
    spec.kv_heads = 2;
    spec.ffn = c.ffn;
    spec.vocab = 512;
    const std::vector<std::byte> bytes = model::testing::TestGguf(spec);  // the file refers to it
    auto file = OpenModelFromBytes(bytes, "tp-exact.gguf");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    const std::vector<float> want = WholeModelLogits(**file);
    // The summation order shows in this model's logits: rows summed in one piece differ.
    EXPECT_NE(WholeModelLogits(**file, /*copy=*/false, /*leaves=*/false), want);
    for (int ranks : c.ranks) {
      std::vector<float> got(want.size());
      RunTensorParallel(**file, ranks, &got);
      EXPECT_EQ(got, want) << "tp=" << ranks;
    }
    // Copied weights take the layout this CPU's kernels read fastest (on AVX2: Q4_K and Q5_K in
    // kernels::WeightLayout::kPairedNibbles, Q4_0 and Q8_0 in kScalePairs; the ranks' column
    // slices too) and give the same bits.
    EXPECT_EQ(WholeModelLogits(**file, /*copy=*/true), want) << "copied";
    auto w = BindWeights(**file);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(CopyMatricesToMemory(&*w).ok());
    EXPECT_EQ(w->layers[0].wq.layout, kernels::PreferredLayout(c.type, c.dim));
    EXPECT_EQ(w->layers[0].w_down.layout, kernels::PreferredLayout(c.type, c.ffn));
  }
}

TEST_F(ShardTest, MoreRanksThanKvHeadsReplicatesKvHeads) {
  // stories260K has 4 KV heads; 8 ranks hold one query head each, two ranks per KV head.
  std::vector<float> logits(want_.size());
  RunTensorParallel(*file_, 8, &logits);
  ExpectClose(logits);
}

TEST_F(ShardTest, RejectsShardsOutsideTheModel) {
  ShardSpec spec;
  spec.layer_end = 6;
  EXPECT_EQ(BindWeights(*file_, spec).status().code(), StatusCode::kInvalidArgument);
  spec = {};
  spec.head_begin = 6;
  spec.n_heads = 4;
  EXPECT_EQ(BindWeights(*file_, spec).status().code(), StatusCode::kInvalidArgument);
  spec = {};
  spec.ffn_begin = 100;
  spec.ffn_dim = 100;
  EXPECT_EQ(BindWeights(*file_, spec).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::model
