// The real stories260K model in both formats (../shared/models/stories260K).
#include <gtest/gtest.h>

#include <cstring>

#include "loom/base/testing.h"
#include "loom/model/model_file.h"

namespace loom::model {
namespace {

std::string ModelPath(const std::string& shared, const std::string& file) {
  return shared + "/models/stories260K/" + file;
}

void ExpectStories260KShape(const HParams& hp) {
  EXPECT_EQ(hp.arch, "llama");
  EXPECT_EQ(hp.dim, 64);
  EXPECT_EQ(hp.ffn_dim, 172);
  EXPECT_EQ(hp.n_layers, 5);
  EXPECT_EQ(hp.n_heads, 8);
  EXPECT_EQ(hp.n_kv_heads, 4);
  EXPECT_EQ(hp.head_dim, 8);
  EXPECT_EQ(hp.vocab_size, 512);
  EXPECT_FLOAT_EQ(hp.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(hp.rope_theta, 10000.0f);  // the GGUF has no rope.freq_base: the default
  EXPECT_EQ(hp.rope_style, kernels::RopeStyle::kInterleaved);
  EXPECT_EQ(hp.rope_scaling.type, RopeScalingType::kNone);
}

TEST(RealModel, Stories260KGgufLoads) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModel(ModelPath(shared, "stories260K.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelFile& mf = **m;
  EXPECT_EQ(mf.format, "gguf");
  ExpectStories260KShape(mf.hparams);
  EXPECT_EQ(mf.hparams.context_length, 2048);  // what the GGUF says (trained on 512)
  EXPECT_FALSE(mf.hparams.tied_embeddings);    // a separate, identical output.weight
  EXPECT_EQ(mf.tensors.size(), 48u);
  EXPECT_EQ(mf.total_tensor_bytes(), 1171200);
  const TokenizerSpec& t = mf.tokenizer;
  EXPECT_EQ(t.model, "llama");
  ASSERT_EQ(t.tokens.size(), 512u);
  EXPECT_EQ(t.tokens[0], "<unk>");
  EXPECT_EQ(t.tokens[1], "<s>");
  EXPECT_EQ(t.tokens[2], "</s>");
  EXPECT_EQ(t.tokens[3 + 0x0A], "<0x0A>");
  EXPECT_EQ(t.scores.size(), 512u);
  EXPECT_EQ(t.token_types.size(), 512u);
  EXPECT_EQ(t.token_types[0], 2);
  EXPECT_EQ(t.token_types[1], 3);
  EXPECT_EQ(t.token_types[3], 6);
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_EQ(t.unk_id, 0);
  EXPECT_EQ(t.pad_id, -1);  // stored as 0xFFFFFFFF
  EXPECT_TRUE(t.add_bos);
  EXPECT_TRUE(t.add_space_prefix);
  // Every tensor lies in the mapping, 32-byte aligned (the default alignment).
  const base::MappedFile& map = mf.mappings.at(0);
  for (const auto& [name, info] : mf.tensors) {
    EXPECT_EQ(info.type, kernels::DType::kF32) << name;
    EXPECT_EQ(info.file_offset % 32, 0) << name;
    EXPECT_EQ(info.data, map.data() + info.file_offset) << name;
    EXPECT_LE(info.file_offset + info.size_bytes, map.size()) << name;
  }
}

TEST(RealModel, Stories260KBinLoads) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModel(ModelPath(shared, "stories260K.bin"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelFile& mf = **m;
  EXPECT_EQ(mf.format, "llama2c");
  ExpectStories260KShape(mf.hparams);
  EXPECT_EQ(mf.hparams.context_length, 512);
  EXPECT_TRUE(mf.hparams.tied_embeddings);  // positive vocab_size: shared classifier
  EXPECT_EQ(mf.tensors.size(), 47u);        // no output.weight
  EXPECT_TRUE(mf.tokenizer.tokens.empty());
  EXPECT_TRUE(mf.tokenizer.stop_at_bos);
}

// The README promises the two files hold the same weights: every tensor of the .bin must equal the
// GGUF's tensor of the same name bit for bit, which checks the whole llama2.c layout (order, row
// and column orientation, the skipped RoPE tables).
TEST(RealModel, Stories260KBinAndGgufTensorsAreBitIdentical) {
  LOOM_REQUIRE_SHARED_DIR(shared);
  StatusOr<std::unique_ptr<ModelFile>> gguf = OpenModel(ModelPath(shared, "stories260K.gguf"));
  StatusOr<std::unique_ptr<ModelFile>> bin = OpenModel(ModelPath(shared, "stories260K.bin"));
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  ASSERT_TRUE(bin.ok()) << bin.status().ToString();
  int compared = 0;
  for (const auto& [name, g] : (*gguf)->tensors) {
    // The .bin ties the classifier to the embedding; the GGUF stores a copy.
    const std::string bin_name = name == "output.weight" ? "token_embd.weight" : name;
    auto it = (*bin)->tensors.find(bin_name);
    ASSERT_NE(it, (*bin)->tensors.end()) << name;
    const TensorInfo& b = it->second;
    EXPECT_EQ(g.shape, b.shape) << name;
    ASSERT_EQ(g.size_bytes, b.size_bytes) << name;
    EXPECT_EQ(std::memcmp(g.data, b.data, static_cast<size_t>(g.size_bytes)), 0) << name;
    ++compared;
  }
  EXPECT_EQ(compared, 48);
}

}  // namespace
}  // namespace loom::model
