#include "loom/model/llama2c.h"

#include <gtest/gtest.h>

#include "loom/model/model_test_util.h"

namespace loom::model {
namespace {

using testing::Llama2cSpec;
using testing::TestLlama2c;

// The float index (within the weights) at which tensor `name` starts.
int64_t FirstIndex(const ModelFile& m, const std::string& name, int64_t header_bytes) {
  return (m.tensors.at(name).file_offset - header_bytes) / 4;
}

float First(const ModelFile& m, const std::string& name) {
  float v;
  std::memcpy(&v, m.tensors.at(name).data, 4);
  return v;
}

TEST(Llama2c, LegacyLayoutMapsToGgufNamesInPlace) {
  Llama2cSpec s;  // dim 16, hidden 32, 2 layers, 4 heads, 2 kv heads, vocab 40, seq 8, shared
  const std::vector<std::byte> bytes = TestLlama2c(s);
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, "m.bin");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelFile& mf = **m;
  EXPECT_EQ(mf.format, "llama2c");
  EXPECT_EQ(mf.hparams.dim, 16);
  EXPECT_EQ(mf.hparams.ffn_dim, 32);
  EXPECT_EQ(mf.hparams.n_layers, 2);
  EXPECT_EQ(mf.hparams.n_heads, 4);
  EXPECT_EQ(mf.hparams.n_kv_heads, 2);
  EXPECT_EQ(mf.hparams.head_dim, 4);
  EXPECT_EQ(mf.hparams.vocab_size, 40);
  EXPECT_EQ(mf.hparams.context_length, 8);
  EXPECT_TRUE(mf.hparams.tied_embeddings);
  EXPECT_EQ(mf.hparams.rope_style, kernels::RopeStyle::kInterleaved);
  EXPECT_EQ(mf.tokenizer.model, "");
  EXPECT_EQ(mf.tokenizer.bos_id, 1);
  EXPECT_EQ(mf.tokenizer.eos_id, 2);
  EXPECT_TRUE(mf.tokenizer.stop_at_bos);
  EXPECT_EQ(mf.tensors.count("output.weight"), 0u);
  EXPECT_EQ(mf.tensors.size(), 2u + 9u * 2u);

  // Offsets in floats, following run.c's memory_map_weights.
  const int64_t L = 2, dim = 16, kv = 8, hid = 32, vocab = 40;
  int64_t at = 0;
  auto expect_stack = [&](const std::string& suffix, int64_t per_layer) {
    for (int64_t l = 0; l < L; ++l) {
      const std::string name = "blk." + std::to_string(l) + "." + suffix;
      EXPECT_EQ(FirstIndex(mf, name, 28), at + l * per_layer) << name;
      EXPECT_FLOAT_EQ(First(mf, name), static_cast<float>(at + l * per_layer) * 0.001f) << name;
    }
    at += L * per_layer;
  };
  EXPECT_EQ(FirstIndex(mf, "token_embd.weight", 28), 0);
  at = vocab * dim;
  expect_stack("attn_norm.weight", dim);
  expect_stack("attn_q.weight", dim * dim);
  expect_stack("attn_k.weight", kv * dim);
  expect_stack("attn_v.weight", kv * dim);
  expect_stack("attn_output.weight", dim * dim);
  expect_stack("ffn_norm.weight", dim);
  expect_stack("ffn_gate.weight", hid * dim);
  expect_stack("ffn_down.weight", dim * hid);
  expect_stack("ffn_up.weight", hid * dim);
  EXPECT_EQ(FirstIndex(mf, "output_norm.weight", 28), at);
  EXPECT_EQ(mf.tensors.at("blk.1.attn_k.weight").shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(mf.tensors.at("blk.0.ffn_down.weight").shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(mf.metadata.at("llama2c.shared_classifier"), "true");
}

TEST(Llama2c, SeparateClassifierFollowsTheRopeTables) {
  Llama2cSpec s;
  s.shared = false;
  const std::vector<std::byte> bytes = TestLlama2c(s);
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, "m.bin");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE((*m)->hparams.tied_embeddings);
  const int64_t wcls = testing::Llama2cFloats(s) - 40 * 16;
  EXPECT_EQ(FirstIndex(**m, "output.weight", 28), wcls);
  EXPECT_EQ((*m)->tensors.at("output.weight").shape, (std::vector<int64_t>{40, 16}));
  // The RoPE tables (2 x seq_len x head_size/2 floats) sit between output_norm and wcls.
  EXPECT_EQ(FirstIndex(**m, "output_norm.weight", 28) + 16 + 2 * 8 * 2, wcls);
}

TEST(Llama2c, Version1LayoutMapsToGgufNames) {
  for (bool shared : {true, false}) {
    Llama2cSpec s;
    s.v1 = true;
    s.shared = shared;
    const std::vector<std::byte> bytes = TestLlama2c(s);
    StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, "m.bin");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const ModelFile& mf = **m;
    EXPECT_EQ(mf.metadata.at("llama2c.version"), "1");
    EXPECT_EQ(mf.hparams.tied_embeddings, shared);
    EXPECT_EQ(FirstIndex(mf, "blk.0.attn_norm.weight", 256), 0);
    EXPECT_EQ(FirstIndex(mf, "blk.1.attn_norm.weight", 256), 16);
    EXPECT_EQ(FirstIndex(mf, "blk.0.ffn_norm.weight", 256), 32);
    EXPECT_EQ(FirstIndex(mf, "output_norm.weight", 256), 64);
    EXPECT_EQ(FirstIndex(mf, "token_embd.weight", 256), 80);
    EXPECT_EQ(FirstIndex(mf, "blk.0.attn_q.weight", 256), 80 + 640);
    EXPECT_EQ(FirstIndex(mf, "blk.0.attn_k.weight", 256), 80 + 640 + 2 * 256);
    if (!shared) {
      EXPECT_EQ(FirstIndex(mf, "output.weight", 256), testing::Llama2cFloats(s) - 640);
    }
  }
}

TEST(Llama2c, SizeMustMatchTheHeader) {
  Llama2cSpec s;
  std::vector<std::byte> bytes = TestLlama2c(s);
  bytes.resize(bytes.size() - 4);
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, "short.bin");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find("short.bin: llama2.c checkpoint"), std::string::npos);
  EXPECT_NE(m.status().message().find("but the file has"), std::string::npos)
      << m.status().message();

  // A positive vocab_size (shared) on a file that also holds wcls: the size says which.
  Llama2cSpec unshared;
  unshared.shared = false;
  bytes = TestLlama2c(unshared);
  testing::Poke<int32_t>(bytes, 20, 40);
  m = OpenModelFromBytes(bytes, "flag.bin");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("classifier flag looks wrong"), std::string::npos)
      << m.status().message();
}

TEST(Llama2c, Version2AndUnknownVersionsAreRejected) {
  Llama2cSpec s;
  s.v1 = true;
  std::vector<std::byte> bytes = TestLlama2c(s);
  testing::Poke<int32_t>(bytes, 4, 2);
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, "v2.bin");
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  testing::Poke<int32_t>(bytes, 4, 9);
  m = OpenModelFromBytes(bytes, "v9.bin");
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find("v9.bin: unknown llama2.c checkpoint version 9"),
            std::string::npos);
  testing::Poke<int32_t>(bytes, 4, 1);
  testing::Poke<uint8_t>(bytes, 36, 7);
  m = OpenModelFromBytes(bytes, "flag.bin");
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  bytes.resize(100);
  m = OpenModelFromBytes(bytes, "cut.bin");
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
}

TEST(Llama2c, ImplausibleHeadersAreNotTakenForCheckpoints) {
  EXPECT_FALSE(LooksLikeLlama2cLegacy(std::vector<std::byte>(27)));
  Llama2cSpec s;
  std::vector<std::byte> bytes = TestLlama2c(s);
  EXPECT_TRUE(LooksLikeLlama2cLegacy(bytes));
  for (int field = 0; field < 7; ++field) {
    std::vector<std::byte> bad = bytes;
    testing::Poke<int32_t>(bad, field * 4, 0);
    EXPECT_FALSE(LooksLikeLlama2cLegacy(bad)) << field;
    StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bad, "x.bin");
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(m.status().message().find("x.bin: not a model file I know"), std::string::npos);
  }
  testing::Poke<int32_t>(bytes, 12, 5);  // 5 heads do not divide dim 16
  EXPECT_FALSE(LooksLikeLlama2cLegacy(bytes));
}

}  // namespace
}  // namespace loom::model
