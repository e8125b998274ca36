// Whole synthetic mixture-of-experts models: a prompt in one batch equals token by token, pipeline
// stages equal one process, copied and mapped experts give the same logits, tensor parallelism is
// refused, and bad MoE files get clear errors.  (The MoE block itself: moe_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string_view>

#include "loom/model/moe.h"
#include "loom/model/model_test_util.h"
#include "loom/model/synth.h"
#include "loom/model/transformer.h"
#include "loom/model/weight_copy.h"

namespace loom::model {
namespace {

namespace k = loom::kernels;

// ---- Whole synthetic models ----

using SynthModel = testing::SynthMoe;

SynthModel MakeSynth(SynthArch arch, k::DType type, int64_t experts = 4, int64_t used = 2) {
  SynthModel m = testing::MakeSynthMoe(arch, type, experts, used);
  EXPECT_NE(m.file, nullptr) << m.error;
  return m;
}

const std::vector<int32_t> kPrompt = {1, 300, 301, 302, 290, 310, 305, 330, 340};

// Logits of every prompt position, in one batch or one token at a time, through `stages` layer
// ranges handing on the hidden state (one stage: the whole model).
std::vector<float> PromptLogits(const ModelFile& file, bool one_batch,
                                const std::vector<std::pair<int64_t, int64_t>>& stages) {
  const int64_t n = static_cast<int64_t>(kPrompt.size());
  const int64_t vocab = file.hparams.vocab_size, dim = file.hparams.dim;
  base::ThreadPool pool(2);
  std::vector<TransformerWeights> weights;
  std::vector<std::unique_ptr<Transformer>> parts;
  for (size_t s = 0; s < stages.size(); ++s) {
    ShardSpec spec;
    spec.layer_begin = stages[s].first;
    spec.layer_end = stages[s].second;
    spec.embed = s == 0;
    spec.head = s + 1 == stages.size();
    auto w = BindWeights(file, spec);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    if (!w.ok()) return {};
    weights.push_back(std::move(*w));
  }
  for (const TransformerWeights& w : weights) {
    auto t = Transformer::Create(w, {}, pool);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return {};
    parts.push_back(std::move(*t));
  }
  std::vector<float> logits(static_cast<size_t>(n * vocab));
  const int64_t step = one_batch ? n : 1;
  for (int64_t i0 = 0; i0 < n; i0 += step) {
    std::vector<int32_t> tok(kPrompt.begin() + i0, kPrompt.begin() + i0 + step), pos, slot, rows;
    for (int64_t i = 0; i < step; ++i) {
      pos.push_back(static_cast<int32_t>(i0 + i));
      slot.push_back(0);
      rows.push_back(static_cast<int32_t>(i));
    }
    const Batch b{tok, pos, slot, rows};
    EXPECT_TRUE(parts.front()->Embed(tok).ok());
    for (size_t s = 0; s < parts.size(); ++s) {
      if (s > 0) {
        std::copy_n(parts[s - 1]->hidden_state(), step * dim, parts[s]->hidden_state());
      }
      const Status st = parts[s]->Layers(b);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    EXPECT_TRUE(parts.back()->Logits(rows, logits.data() + i0 * vocab).ok());
  }
  return logits;
}

std::vector<int32_t> Argmax(const std::vector<float>& logits, int64_t vocab) {
  std::vector<int32_t> out;
  for (size_t i = 0; i + vocab <= logits.size(); i += vocab) {
    out.push_back(static_cast<int32_t>(
        std::max_element(logits.begin() + i, logits.begin() + i + vocab) - logits.begin() - i));
  }
  return out;
}

class MoeModelTest : public ::testing::TestWithParam<std::pair<SynthArch, k::DType>> {};

TEST_P(MoeModelTest, PromptBatchTokenByTokenAndPipelineStagesAgree) {
  const SynthModel m = MakeSynth(GetParam().first, GetParam().second);
  ASSERT_NE(m.file, nullptr);
  const int64_t vocab = m.file->hparams.vocab_size;
  const std::vector<float> whole = PromptLogits(*m.file, true, {{0, 5}});
  const std::vector<float> sequential = PromptLogits(*m.file, false, {{0, 5}});
  const std::vector<float> pp2 = PromptLogits(*m.file, true, {{0, 2}, {2, 5}});
  ASSERT_EQ(whole.size(), static_cast<size_t>(kPrompt.size() * vocab));
  ASSERT_EQ(sequential.size(), whole.size());
  ASSERT_EQ(pp2.size(), whole.size());
  // Pipeline stages run the same kernels on the same inputs: the same bits.
  EXPECT_EQ(pp2, whole);
  for (size_t i = 0; i < whole.size(); ++i) {
    ASSERT_NEAR(sequential[i], whole[i], 1e-3 * std::max(1.0f, std::abs(whole[i]))) << i;
  }
  EXPECT_EQ(Argmax(sequential, vocab), Argmax(whole, vocab));
  // Peaked: the greedy choices are not near-ties (the margin the llama.cpp comparison relies on).
  int decisive = 0;
  for (size_t i = 0; i < whole.size(); i += vocab) {
    std::vector<float> row(whole.begin() + i, whole.begin() + i + vocab);
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<>());
    decisive += row[0] - row[1] > 0.05f;
  }
  EXPECT_GE(decisive, static_cast<int>(kPrompt.size()) - 1);
}

INSTANTIATE_TEST_SUITE_P(Archs, MoeModelTest,
                         ::testing::Values(std::pair{SynthArch::kMixtral, k::DType::kF32},
                                           std::pair{SynthArch::kMixtral, k::DType::kQ8_0},
                                           std::pair{SynthArch::kQwen2Moe, k::DType::kF32},
                                           std::pair{SynthArch::kQwen2Moe, k::DType::kQ8_0},
                                           std::pair{SynthArch::kQwen3Moe, k::DType::kF32},
                                           std::pair{SynthArch::kQwen3Moe, k::DType::kQ4_0},
                                           std::pair{SynthArch::kDeepseek2, k::DType::kF32},
                                           std::pair{SynthArch::kDeepseek2, k::DType::kQ8_0}),
                         [](const auto& info) {
                           const SynthArch a = info.param.first;
                           return std::string(a == SynthArch::kMixtral    ? "mixtral_"
                                              : a == SynthArch::kQwen2Moe ? "qwen2moe_"
                                              : a == SynthArch::kQwen3Moe ? "qwen3moe_"
                                                                          : "deepseek2_") +
                                  std::string(k::Traits(info.param.second).name);
                         });

// Copying with the experts moves them into the huge-page buffer too; without, they stay the
// file's.  Either way the logits are the mapped weights' bit for bit.
TEST(MoeModelTest, CopiedWeightsWithOrWithoutTheExpertsGiveTheSameLogits) {
  const SynthModel m = MakeSynth(SynthArch::kQwen3Moe, k::DType::kQ8_0);
  ASSERT_NE(m.file, nullptr);
  auto mapped = BindWeights(*m.file);
  auto dense = BindWeights(*m.file);
  auto all = BindWeights(*m.file);
  ASSERT_TRUE(mapped.ok() && dense.ok() && all.ok());
  ASSERT_TRUE(CopyMatricesToMemory(&*dense, /*experts=*/false).ok());
  ASSERT_TRUE(CopyMatricesToMemory(&*all).ok());
  EXPECT_LT(CopiedMatrixBytes(*mapped, false), CopiedMatrixBytes(*mapped));
  const LayerWeights& D = dense->layers[0];
  EXPECT_EQ(D.experts[0].gate.data, mapped->layers[0].experts[0].gate.data);  // still the file's
  EXPECT_NE(D.router.data, mapped->layers[0].router.data);                    // copied
  ASSERT_EQ(all->owned_bytes.size(), 1u);
  const std::byte* begin = all->owned_bytes[0].data();
  const std::byte* end = begin + all->owned_bytes[0].size();
  for (const LayerWeights& L : all->layers) {
    for (const LayerWeights::Expert& e : L.experts) {
      for (const k::MatrixView* v : {&e.gate, &e.up, &e.down}) {
        EXPECT_TRUE(v->data >= begin && v->data < end);
      }
    }
  }
  const int32_t tok = 300, pos = 0, slot = 0, row = 0;
  const Batch b{{&tok, 1}, {&pos, 1}, {&slot, 1}, {&row, 1}};
  std::vector<std::vector<float>> logits;
  for (const TransformerWeights* w : {&*mapped, &*dense, &*all}) {
    base::ThreadPool pool(1);
    auto t = Transformer::Create(*w, {}, pool);
    ASSERT_TRUE(t.ok());
    logits.emplace_back(static_cast<size_t>(m.file->hparams.vocab_size));
    ASSERT_TRUE((*t)->Forward(b, logits.back().data()).ok());
  }
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_EQ(logits[0], logits[2]);
}

TEST(MoeModelTest, ActiveParametersCountTheUsedShareOfTheExperts) {
  const SynthModel m = MakeSynth(SynthArch::kQwen3Moe, k::DType::kF32, 8, 2);
  ASSERT_NE(m.file, nullptr);
  const HParams& hp = m.file->hparams;
  const int64_t experts = hp.n_layers * 3 * hp.n_experts * hp.expert_ffn_dim * hp.dim;
  int64_t all = 0;
  for (const auto& [name, t] : m.file->tensors) all += t.elements();
  const ParameterCounts c = CountParameters(*m.file);
  EXPECT_EQ(c.total, all);
  EXPECT_EQ(c.active, all - experts + experts * 2 / 8);
  // f32: 4 bytes a value; the embedding is read one row a token.
  EXPECT_EQ(c.active_bytes_per_token, 4 * (c.active - (hp.vocab_size - 1) * hp.dim));
}

TEST(MoeModelTest, TensorParallelShardsAreRefused) {
  for (SynthArch arch : {SynthArch::kMixtral, SynthArch::kDeepseek2}) {
    const SynthModel m = MakeSynth(arch, k::DType::kF32);
    ASSERT_NE(m.file, nullptr);
    ShardSpec heads;
    heads.n_heads = m.file->hparams.n_heads / 2;
    ShardSpec ffn;
    ffn.ffn_dim = m.file->hparams.ffn_dim / 2;
    for (const ShardSpec& s : {heads, ffn}) {
      auto w = BindWeights(*m.file, s);
      ASSERT_FALSE(w.ok());
      EXPECT_NE(w.status().message().find("tensor parallelism of mixture-of-experts layers is not "
                                          "supported yet; use --pp"),
                std::string::npos)
          << w.status().ToString();
    }
  }
}

// Overwrites the u32 value of metadata key `key` (GGUF: key string, u32 type, value).
void PatchU32(std::vector<std::byte>& bytes, std::string_view key, uint32_t value) {
  const std::string_view all(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const size_t at = all.find(key);
  ASSERT_NE(at, std::string_view::npos) << key;
  std::memcpy(bytes.data() + at + key.size() + 4, &value, 4);
}

// Renames the first tensor called `from` to `to` (same length) in the tensor table.
void PatchName(std::vector<std::byte>& bytes, std::string_view from, std::string_view to) {
  ASSERT_EQ(from.size(), to.size());
  const std::string_view all(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const size_t at = all.find(from);
  ASSERT_NE(at, std::string_view::npos) << from;
  std::memcpy(bytes.data() + at, to.data(), to.size());
}

std::string OpenError(const std::vector<std::byte>& bytes) {
  auto f = OpenModelFromBytes(bytes, "bad.gguf");
  if (f.ok()) {
    auto w = BindWeights(**f);
    return w.ok() ? "" : w.status().ToString();
  }
  return f.status().ToString();
}

TEST(MoeModelTest, BadExpertMetadataAndTensorsAreClearErrors) {
  SynthModel m = MakeSynth(SynthArch::kMixtral, k::DType::kF32, 4, 2);
  ASSERT_NE(m.file, nullptr);
  {
    std::vector<std::byte> b = m.bytes;
    PatchU32(b, "llama.expert_used_count", 5);
    const std::string e = OpenError(b);
    EXPECT_NE(e.find("llama.expert_used_count is 5 (expected 1 to 4)"), std::string::npos) << e;
  }
  {
    std::vector<std::byte> b = m.bytes;
    PatchU32(b, "llama.expert_count", 6);
    const std::string e = OpenError(b);
    EXPECT_NE(e.find("'blk.0.ffn_gate_inp.weight' has shape [4, 64] but the hyperparameters "
                     "imply [6, 64]"),
              std::string::npos)
        << e;
  }
  {
    std::vector<std::byte> b = m.bytes;
    PatchName(b, "blk.1.ffn_gate_inp.weight", "blk.1.ffn_gate_inq.weight");
    const std::string e = OpenError(b);
    EXPECT_NE(e.find("missing tensor 'blk.1.ffn_gate_inp.weight'"), std::string::npos) << e;
  }
  {
    // One tensor per expert (blk.N.ffn_gate.E.weight, as early Mixtral files and Hugging Face
    // directories hold them), with expert 0's up and down matrices and expert 1 missing.
    testing::TestModelSpec spec;
    spec.layers = 1;
    spec.extra_metadata = [](GgufWriter& w) {
      w.AddU32("llama.expert_count", 2);
      w.AddU32("llama.expert_used_count", 1);
    };
    spec.extra_tensors = [&](GgufWriter& w) {
      (void)w.AddTensor("blk.0.ffn_gate_inp.weight", k::DType::kF32, {2, spec.dim});
      (void)w.AddTensor("blk.0.ffn_gate.0.weight", k::DType::kF32, {spec.ffn, spec.dim});
    };
    const std::string e = OpenError(testing::TestGguf(spec));
    EXPECT_NE(e.find("missing tensor 'blk.0.ffn_up.0.weight'"), std::string::npos)
        << e;
  }
}

TEST(MoeModelTest, BadDeepseekMetadataAndTensorsAreClearErrors) {
  SynthModel m = MakeSynth(SynthArch::kDeepseek2, k::DType::kF32, 4, 2);
  ASSERT_NE(m.file, nullptr);
  const struct {
    const char* key;
    uint32_t value;
    const char* want;
  } keys[] = {
      {"deepseek2.expert_group_count", 3,
       "expert_group_count 3 and expert_group_used_count 1 do "
       "not fit 4 experts"},
      {"deepseek2.expert_gating_func", 3, "expert_gating_func 3 is not supported"},
      {"deepseek2.leading_dense_block_count", 9, "leading_dense_block_count 9"},
      {"deepseek2.attention.kv_lora_rank", 16,
       "'blk.0.attn_kv_a_mqa.weight' has shape [40, 64], expected [24, 64]"},
      {"deepseek2.rope.dimension_count", 24, "latent attention sizes do not fit"},
  };
  for (const auto& c : keys) {
    std::vector<std::byte> b = m.bytes;
    PatchU32(b, c.key, c.value);
    const std::string e = OpenError(b);
    EXPECT_NE(e.find(c.want), std::string::npos) << c.key << ": " << e;
  }
  std::vector<std::byte> b = m.bytes;
  PatchName(b, "blk.2.attn_kv_b.weight", "blk.2.attn_kv_c.weight");
  const std::string e = OpenError(b);
  EXPECT_NE(e.find("missing tensor 'blk.2.attn_kv_b.weight' (or its halves 'blk.2.attn_k_b.weight' "
                   "and 'blk.2.attn_v_b.weight')"),
            std::string::npos)
      << e;
}

// Qwen2-MoE's block: softmax weights of the top k not renormalised, and a shared expert of its
// own width (not n_shared * expert_ffn_dim) scaled per token by sigmoid(gate_inp . x), against the
// reference; the gate must matter (the output differs from the ungated one).

}  // namespace
}  // namespace loom::model
