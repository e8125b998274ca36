// The KV cache's row types and the attention over them inside the model: Q8_0 rows (sizes, bad
// shapes, round trips), the real stories260K model's greedy tokens with a Q8_0 cache against f32,
// a long batched prompt against token-by-token decoding bit for bit for any thread count (tiles
// of queries and blocks of keys must not change a query's sums), and the refusal of Q8_0 for
// latent attention.
#include "loom/model/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "loom/base/testing.h"
#include "loom/model/model_test_util.h"
#include "loom/model/transformer.h"

namespace loom::model {
namespace {

TEST(KvCacheTest, Q8RowsTakeUnderAThirdOfF32) {
  auto f32 = KvCache::Create(2, 1, 128, 256, -1, KvType::kF32, 64);
  auto q8 = KvCache::Create(2, 1, 128, 256, -1, KvType::kQ8_0, 64);
  ASSERT_TRUE(f32.ok() && q8.ok());
  EXPECT_EQ(f32->bytes(), 2 * 128 * 256 * 2 * 4);
  EXPECT_EQ(q8->bytes(), 2 * 128 * (256 + 256 / 32 * 4) * 2);
  EXPECT_EQ(q8->bytes_per_position(), 2 * (256 + 8 * 4));
  EXPECT_EQ(q8->K(0, 0), nullptr);   // no float rows
  EXPECT_EQ(f32->K(0, 0), nullptr);  // keys in tiles
  EXPECT_NE(f32->V(0, 0), nullptr);
  // Keys are kept in whole tiles of kAttendKeyBlock positions: 100 takes 128 for them.
  auto odd = KvCache::Create(1, 1, 100, 64, -1, KvType::kF32, 64);
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->bytes(), (128 + 100) * 64 * 4);
  // A latent-attention cache (no values) keeps row-major float keys and no q8_0.
  auto latent = KvCache::Create(1, 1, 100, 64, 0);
  ASSERT_TRUE(latent.ok());
  EXPECT_NE(latent->K(0, 0), nullptr);
  EXPECT_FALSE(KvCache::Create(1, 1, 100, 64, 0, KvType::kQ8_0, 64).ok());
}

TEST(KvCacheTest, Q8RejectsHeadsItCannotBlock) {
  auto bad = KvCache::Create(1, 1, 8, 96, -1, KvType::kQ8_0, 48);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("head_dim 48"), std::string::npos)
      << bad.status().message();
  EXPECT_TRUE(KvCache::Create(1, 1, 8, 32, -1, KvType::kQ8_0, 8).ok());  // a head is one block
}

TEST(KvCacheTest, StoredQ8RowsReadBackWithinHalfAStep) {
  const int64_t kv_dim = 16, hd = 8;  // two heads of one block each
  auto cache = KvCache::Create(2, 2, 4, kv_dim, -1, KvType::kQ8_0, hd);
  ASSERT_TRUE(cache.ok());
  std::vector<float> key(kv_dim), value(kv_dim);
  for (int64_t i = 0; i < kv_dim; ++i) key[i] = 0.1f * i - 0.7f, value[i] = std::sin(1.0f * i);
  cache->Store(1, 1, 3, key.data(), value.data());
  for (int64_t h = 0; h < 2; ++h) {
    const kernels::KvHeadRows k = cache->KeyRows(1, 1, h * hd);
    const kernels::KvHeadRows v = cache->ValueRows(1, 1, h * hd);
    ASSERT_TRUE(k.tiled);  // position 3 is column 3 of tile 0
    constexpr int64_t kB = kernels::kAttendKeyBlock;
    for (int64_t i = 0; i < hd; ++i) {
      const float kd = k.d[(i / k.block) * kB + 3], vd = v.d[3 * v.d_stride + i / v.block];
      EXPECT_NEAR(k.q[i * kB + 3] * kd, key[h * hd + i], 0.5f * kd * 1.001f);
      EXPECT_NEAR(v.q[3 * v.stride + i] * vd, value[h * hd + i], 0.5f * vd * 1.001f);
    }
  }
}

using testing::Load;
using testing::Loaded;

Loaded LoadStories(const std::string& shared, base::ThreadPool& pool, TransformerOptions options) {
  auto file = OpenModel(shared + "/models/stories260K/stories260K.gguf");
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return {};
  return Load(std::move(*file), pool, options);
}

// Greedy tokens after `prompt`, token by token in slot 0.
std::vector<int32_t> Greedy(Transformer& t, std::vector<int32_t> tokens, int64_t steps) {
  const int64_t vocab = t.hparams().vocab_size;
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<int32_t> out;
  for (size_t p = 0; out.size() < static_cast<size_t>(steps); ++p) {
    const int32_t tok = tokens[p], pos = static_cast<int32_t>(p), slot = 0, row = 0;
    EXPECT_TRUE(t.Forward({{&tok, 1}, {&pos, 1}, {&slot, 1}, {&row, 1}}, logits.data()).ok());
    if (p + 1 < tokens.size()) continue;
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    tokens.push_back(next);
  }
  return out;
}

TEST(KvCacheTest, Q8CacheGivesStories260KTheSameGreedyTokensAsF32) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  base::ThreadPool pool(2);
  TransformerOptions options;
  Loaded f32 = LoadStories(shared, pool, options);
  options.kv_type = KvType::kQ8_0;
  Loaded q8 = LoadStories(shared, pool, options);
  ASSERT_NE(f32.model, nullptr);
  ASSERT_NE(q8.model, nullptr);
  EXPECT_LT(q8.model->cache().bytes() * 2, f32.model->cache().bytes());
  for (const std::vector<int32_t>& prompt :
       {std::vector<int32_t>{1}, std::vector<int32_t>{1, 403, 407, 261, 378}}) {
    const std::vector<int32_t> want = Greedy(*f32.model, prompt, 200);
    const std::vector<int32_t> got = Greedy(*q8.model, prompt, 200);
    // 8-bit keys and values keep stories260K's first 100 greedy tokens exactly (measured: 118
    // and 114 of these 200; past that a near tie flips and the texts part).
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(std::equal(want.begin(), want.begin() + 100, got.begin()));
    size_t same = 0;
    while (same < want.size() && want[same] == got[same]) ++same;
    std::printf("q8_0 cache: first %zu of %zu greedy tokens as f32\n", same, want.size());
  }
}

// A small synthetic model with head_dim 64 and grouped-query heads (4 per kv head), its matrices
// whole 32-value blocks (their products give a row the same bits whatever the batch).
std::vector<std::byte> SynthHeadDim64(kernels::DType type) {
  SynthOptions o;
  o.shape = {"kv-test", 256, 256, 2, 4, 1, 300, 512, 1e-5f, 10000.0f};
  o.type = type;
  o.peaked = true;
  o.threads = 1;
  std::vector<std::byte> bytes;
  EXPECT_TRUE(WriteSynthModelToMemory(o, &bytes).ok());
  return bytes;
}

// A 300-token prompt in one batch (tiles of 16 rows, 5 key blocks) gives every position the same
// logits bits as running it token by token, for 1 and 3 threads, f32 and q8_0 rows.
TEST(KvCacheTest, LongBatchedPromptEqualsTokenByTokenBitForBit) {
  const std::vector<std::byte> bytes = SynthHeadDim64(kernels::DType::kQ8_0);
  std::vector<int32_t> tokens(300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(3 + (i * 37) % 290);
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (KvType type : {KvType::kF32, KvType::kQ8_0}) {
    std::vector<std::vector<float>> runs;
    for (int threads : {1, 3}) {
      base::ThreadPool pool(threads);
      TransformerOptions options;
      options.max_batch = n;
      options.kv_type = type;
      auto file = OpenModelFromBytes(bytes, "kv-test.gguf");
      ASSERT_TRUE(file.ok()) << file.status().ToString();
      Loaded m = Load(std::move(*file), pool, options);
      ASSERT_NE(m.model, nullptr);
      const int64_t vocab = m.model->hparams().vocab_size;
      std::vector<int32_t> pos(tokens.size()), slots(tokens.size(), 0), rows(tokens.size());
      for (int64_t i = 0; i < n; ++i) pos[i] = rows[i] = static_cast<int32_t>(i);
      std::vector<float> batched(static_cast<size_t>(n * vocab));
      ASSERT_TRUE(m.model->Forward({tokens, pos, slots, rows}, batched.data()).ok());
      std::vector<float> sequential(batched.size());
      for (int64_t i = 0; i < n; ++i) {
        const int32_t row = 0;
        ASSERT_TRUE(m.model
                        ->Forward({{&tokens[i], 1}, {&pos[i], 1}, {&slots[i], 1}, {&row, 1}},
                                  sequential.data() + i * vocab)
                        .ok());
      }
      for (size_t j = 0; j < batched.size(); ++j) {
        ASSERT_EQ(batched[j], sequential[j]) << KvTypeName(type) << " threads " << threads
                                             << " position " << j / vocab << " logit " << j % vocab;
      }
      runs.push_back(std::move(batched));
    }
    EXPECT_EQ(runs[0], runs[1]) << KvTypeName(type) << ": thread count changed the bits";
  }
}

TEST(KvCacheTest, Q8CacheOnAHeadDim64ModelStaysCloseToF32) {
  const std::vector<std::byte> bytes = SynthHeadDim64(kernels::DType::kF32);
  std::vector<std::vector<float>> logits;
  for (KvType type : {KvType::kF32, KvType::kQ8_0}) {
    auto file = OpenModelFromBytes(bytes, "kv-test.gguf");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    base::ThreadPool pool(2);
    TransformerOptions options;
    options.max_batch = 200;
    options.kv_type = type;
    Loaded m = Load(std::move(*file), pool, options);
    ASSERT_NE(m.model, nullptr);
    std::vector<int32_t> tokens(200), pos(200), slots(200, 0);
    for (int32_t i = 0; i < 200; ++i) tokens[i] = 3 + (i * 11) % 290, pos[i] = i;
    const int32_t row = 199;
    std::vector<float> out(300);
    ASSERT_TRUE(m.model->Forward({tokens, pos, slots, {&row, 1}}, out.data()).ok());
    logits.push_back(out);
  }
  double worst = 0, range = 0;
  for (size_t v = 0; v < 300; ++v) {
    worst = std::max(worst, double{std::fabs(logits[0][v] - logits[1][v])});
    range = std::max(range, double{std::fabs(logits[0][v])});
  }
  EXPECT_LT(worst, 0.02 * range) << "worst " << worst << " of " << range;
  EXPECT_EQ(std::max_element(logits[0].begin(), logits[0].end()) - logits[0].begin(),
            std::max_element(logits[1].begin(), logits[1].end()) - logits[1].begin());
}

TEST(KvCacheTest, LatentAttentionRefusesAQ8CacheClearly) {
  testing::SynthMoe m = testing::MakeSynthMoe(SynthArch::kDeepseek2, kernels::DType::kF32, 4, 2);
  ASSERT_NE(m.file, nullptr) << m.error;
  auto w = BindWeights(*m.file);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  base::ThreadPool pool(1);
  TransformerOptions options;
  options.kv_type = KvType::kQ8_0;
  auto t = Transformer::Create(*w, options, pool);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("latent attention"), std::string::npos)
      << t.status().message();
  options.kv_type = KvType::kF32;
  EXPECT_TRUE(Transformer::Create(*w, options, pool).ok());
}

}  // namespace
}  // namespace loom::model
