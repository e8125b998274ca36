#include "loom/model/gguf_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "loom/model/gguf_writer.h"
#include "loom/model/model_test_util.h"

namespace loom::model {
namespace {

using kernels::DType;
using testing::TestGguf;
using testing::TestModelSpec;

std::vector<std::byte> WriteAll(GgufWriter& w) {
  std::vector<std::byte> out;
  EXPECT_TRUE(w.BeginMemory(&out).ok());
  for (size_t i = 0; i < w.tensor_count(); ++i) {
    std::vector<std::byte> data(static_cast<size_t>(w.tensor_size(i)), std::byte{0x11});
    EXPECT_TRUE(w.WriteTensorData(data).ok());
  }
  EXPECT_TRUE(w.Finish().ok());
  return out;
}

TEST(GgufReader, ReadsEveryScalarTypeBackAsWritten) {
  for (uint32_t version : {2u, 3u}) {
    GgufWriter w(version);
    w.AddU8("u8", 200);
    w.AddI8("i8", -100);
    w.AddU16("u16", 60000);
    w.AddI16("i16", -30000);
    w.AddU32("u32", 4000000000u);
    w.AddI32("i32", -2000000000);
    w.AddU64("u64", 18000000000000000000ull);
    w.AddI64("i64", -9000000000000000000ll);
    w.AddF32("f32", 1.5f);
    w.AddF64("f64", -2.25);
    w.AddBool("yes", true);
    w.AddBool("no", false);
    w.AddString("s", "hello\nworld");
    w.AddString("empty", "");
    const std::vector<std::byte> bytes = WriteAll(w);
    StatusOr<GgufFile> f = ParseGguf(bytes, "mem.gguf");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->version, version);
    EXPECT_EQ(f->metadata.size(), 14u);
    EXPECT_EQ(f->Find("u8")->IntAt(0), 200);
    EXPECT_EQ(f->Find("i8")->IntAt(0), -100);
    EXPECT_EQ(f->Find("u16")->IntAt(0), 60000);
    EXPECT_EQ(f->Find("i16")->IntAt(0), -30000);
    EXPECT_EQ(f->Find("u32")->IntAt(0), 4000000000ll);
    EXPECT_EQ(f->Find("i32")->IntAt(0), -2000000000);
    EXPECT_FALSE(f->Find("u64")->IntAt(0).has_value());  // above INT64_MAX
    EXPECT_DOUBLE_EQ(*f->Find("u64")->FloatAt(0), 18000000000000000000.0);
    EXPECT_EQ(f->Find("u64")->Summary(), "18000000000000000000");
    EXPECT_EQ(f->Find("i64")->IntAt(0), -9000000000000000000ll);
    EXPECT_EQ(f->Find("f32")->FloatAt(0), 1.5);
    EXPECT_FALSE(f->Find("f32")->IntAt(0).has_value());
    EXPECT_EQ(f->Find("f64")->FloatAt(0), -2.25);
    EXPECT_EQ(f->Find("yes")->IntAt(0), 1);
    EXPECT_EQ(f->Find("no")->IntAt(0), 0);
    EXPECT_EQ(f->Find("yes")->Summary(), "true");
    EXPECT_EQ(f->Find("s")->strings.at(0), "hello\nworld");
    EXPECT_EQ(f->Find("s")->Summary(), "\"hello\\nworld\"");
    EXPECT_EQ(f->Find("empty")->strings.at(0), "");
    EXPECT_EQ(f->Find("missing"), nullptr);
    EXPECT_TRUE(f->tensors.empty());
  }
}

TEST(GgufReader, ReadsArraysOfEveryType) {
  GgufWriter w;
  const std::vector<uint8_t> u8 = {1, 2, 255};
  const std::vector<int8_t> i8 = {-1, 0, 1};
  const std::vector<uint16_t> u16 = {7, 65535};
  const std::vector<int16_t> i16 = {-7, 7};
  const std::vector<uint32_t> u32 = {0xFFFFFFFFu};
  const std::vector<int32_t> i32 = {-5, 6, -7, 8, 9};
  const std::vector<uint64_t> u64 = {1, 2};
  const std::vector<int64_t> i64 = {-3};
  const std::vector<float> f32 = {0.5f, -0.25f};
  const std::vector<double> f64 = {1e300};
  const bool bools[] = {true, false, true};
  const std::vector<std::string> strs = {"a", "", "ccc", "dd", "e", "f"};
  w.AddArray("u8", std::span<const uint8_t>(u8));
  w.AddArray("i8", std::span<const int8_t>(i8));
  w.AddArray("u16", std::span<const uint16_t>(u16));
  w.AddArray("i16", std::span<const int16_t>(i16));
  w.AddArray("u32", std::span<const uint32_t>(u32));
  w.AddArray("i32", std::span<const int32_t>(i32));
  w.AddArray("u64", std::span<const uint64_t>(u64));
  w.AddArray("i64", std::span<const int64_t>(i64));
  w.AddArray("f32", std::span<const float>(f32));
  w.AddArray("f64", std::span<const double>(f64));
  w.AddBoolArray("bool", bools);
  w.AddStringArray("str", strs);
  w.AddArray("none", std::span<const float>());
  const std::vector<std::byte> bytes = WriteAll(w);
  StatusOr<GgufFile> f = ParseGguf(bytes, "mem.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufValue& v = *f->Find("i32");
  EXPECT_TRUE(v.is_array());
  EXPECT_EQ(v.elem_type, GgufType::kInt32);
  ASSERT_EQ(v.count, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(v.IntAt(i), i32[static_cast<size_t>(i)]);
  EXPECT_FALSE(v.IntAt(5).has_value());
  EXPECT_FALSE(v.IntAt(-1).has_value());
  EXPECT_EQ(v.Summary(), "i32[5] [-5, 6, -7, 8, ...]");
  EXPECT_EQ(f->Find("u8")->IntAt(2), 255);
  EXPECT_EQ(f->Find("i8")->IntAt(0), -1);
  EXPECT_EQ(f->Find("u16")->IntAt(1), 65535);
  EXPECT_EQ(f->Find("i16")->IntAt(0), -7);
  EXPECT_EQ(f->Find("u32")->IntAt(0), 0xFFFFFFFFll);
  EXPECT_EQ(f->Find("u64")->IntAt(1), 2);
  EXPECT_EQ(f->Find("i64")->IntAt(0), -3);
  EXPECT_EQ(f->Find("f32")->FloatAt(1), -0.25);
  EXPECT_EQ(f->Find("f64")->FloatAt(0), 1e300);
  EXPECT_EQ(f->Find("bool")->IntAt(2), 1);
  EXPECT_EQ(f->Find("bool")->Summary(), "bool[3] [true, false, true]");
  EXPECT_EQ(f->Find("str")->strings, strs);
  EXPECT_EQ(f->Find("str")->Summary(), "string[6] [\"a\", \"\", \"ccc\", \"dd\", ...]");
  EXPECT_EQ(f->Find("none")->count, 0);
  EXPECT_EQ(f->Find("none")->Summary(), "f32[0] []");
}

TEST(GgufReader, LongStringsAreShortenedInSummaries) {
  GgufWriter w;
  w.AddString("long", std::string(1000, 'x'));
  const std::vector<std::byte> bytes = WriteAll(w);
  StatusOr<GgufFile> f = ParseGguf(bytes, "mem.gguf");
  ASSERT_TRUE(f.ok());
  const std::string s = f->Find("long")->Summary();
  EXPECT_LT(s.size(), 200u);
  EXPECT_NE(s.find("(1000 bytes)"), std::string::npos);
}

TEST(GgufReader, TensorTableMatchesWhatWasDeclared) {
  GgufWriter w;
  ASSERT_TRUE(w.SetAlignment(64).ok());
  ASSERT_TRUE(w.AddTensor("a", DType::kF32, {3, 5}).ok());
  ASSERT_TRUE(w.AddTensor("b", DType::kQ4_0, {2, 64}).ok());
  ASSERT_TRUE(w.AddTensor("c", DType::kF16, {7}).ok());
  ASSERT_TRUE(w.AddTensorRaw("d", 12 /* q4_k */, {1, 256}).ok());
  ASSERT_TRUE(w.AddTensor("e", DType::kBF16, {2, 3, 4, 2}).ok());
  const std::vector<std::byte> bytes = WriteAll(w);
  EXPECT_EQ(static_cast<int64_t>(bytes.size()), w.planned_file_size());
  StatusOr<GgufFile> f = ParseGguf(bytes, "mem.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->alignment, 64);
  EXPECT_EQ(f->data_offset % 64, 0);
  ASSERT_EQ(f->tensors.size(), 5u);
  EXPECT_EQ(f->tensors[0].ne, (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(f->tensors[0].size_bytes, 60);
  EXPECT_EQ(f->tensors[1].type->name, "q4_0");
  EXPECT_EQ(f->tensors[1].size_bytes, 2 * 2 * 18);
  EXPECT_EQ(f->tensors[1].offset, 64);
  EXPECT_EQ(f->tensors[2].size_bytes, 14);
  EXPECT_EQ(f->tensors[3].type->name, "q4_k");
  EXPECT_EQ(f->tensors[3].type->dtype, DType::kQ4_K);
  EXPECT_EQ(f->tensors[3].size_bytes, 144);
  EXPECT_EQ(f->tensors[4].ne, (std::vector<int64_t>{2, 4, 3, 2}));
  EXPECT_EQ(f->tensors[4].elements, 48);
  for (const GgufTensor& t : f->tensors) EXPECT_EQ(t.offset % 64, 0) << t.name;
}

TEST(GgufReader, GgmlTypeTableKnowsTheSupportedTypes) {
  EXPECT_EQ(FindGgmlType(0)->dtype, DType::kF32);
  EXPECT_EQ(FindGgmlType(1)->dtype, DType::kF16);
  EXPECT_EQ(FindGgmlType(2)->dtype, DType::kQ4_0);
  EXPECT_EQ(FindGgmlType(8)->dtype, DType::kQ8_0);
  EXPECT_EQ(FindGgmlType(30)->dtype, DType::kBF16);
  EXPECT_EQ(FindGgmlType(14)->name, "q6_k");
  EXPECT_EQ(FindGgmlType(4), nullptr);  // removed from ggml
  EXPECT_EQ(FindGgmlType(1000), nullptr);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K}) {
    const GgmlTypeInfo* info = FindGgmlType(GgmlTypeId(t));
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, t);
    EXPECT_EQ(info->block_elems, kernels::Traits(t).block_elems);
    EXPECT_EQ(info->block_bytes, kernels::Traits(t).block_bytes);
    EXPECT_EQ(info->name, kernels::Traits(t).name);
  }
}

TEST(GgufModel, HyperparametersAndTokenizerComeFromTheKeys) {
  TestModelSpec spec;
  spec.extra_metadata = [](GgufWriter& w) {
    w.AddU32("tokenizer.ggml.unknown_token_id", 0);
    w.AddU32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
    w.AddBool("tokenizer.ggml.add_bos_token", false);
    w.AddBool("tokenizer.ggml.add_space_prefix", false);
    w.AddString("tokenizer.chat_template", "{{ messages }}");
    w.AddStringArray("tokenizer.ggml.merges", std::vector<std::string>{"a b", "c d"});
    w.AddString("tokenizer.ggml.pre", "default");
    w.AddString("llama.rope.scaling.type", "linear");
    w.AddF32("llama.rope.scaling.factor", 4.0f);
  };
  const std::vector<std::byte> bytes = TestGguf(spec);
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, "t.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const HParams& hp = (*m)->hparams;
  EXPECT_EQ((*m)->format, "gguf");
  EXPECT_EQ(hp.arch, "llama");
  EXPECT_EQ(hp.dim, 32);
  EXPECT_EQ(hp.n_layers, 2);
  EXPECT_EQ(hp.n_heads, 4);
  EXPECT_EQ(hp.n_kv_heads, 2);
  EXPECT_EQ(hp.head_dim, 8);
  EXPECT_EQ(hp.ffn_dim, 64);
  EXPECT_EQ(hp.vocab_size, 300);
  EXPECT_EQ(hp.context_length, 128);
  EXPECT_FLOAT_EQ(hp.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(hp.rope_theta, 10000.0f);
  EXPECT_EQ(hp.rope_style, kernels::RopeStyle::kInterleaved);
  EXPECT_EQ(hp.rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_FLOAT_EQ(hp.rope_scaling.factor, 4.0f);
  EXPECT_FALSE(hp.tied_embeddings);
  const TokenizerSpec& t = (*m)->tokenizer;
  EXPECT_EQ(t.model, "llama");
  EXPECT_EQ(t.tokens.size(), 300u);
  EXPECT_EQ(t.tokens[1], "<s>");
  EXPECT_EQ(t.scores.size(), 300u);
  EXPECT_EQ(t.token_types[3], 6);
  EXPECT_EQ(t.merges, (std::vector<std::string>{"a b", "c d"}));
  EXPECT_EQ(t.pre, "default");
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_EQ(t.unk_id, 0);
  EXPECT_EQ(t.pad_id, -1);
  EXPECT_FALSE(t.add_bos);
  EXPECT_FALSE(t.add_eos);
  EXPECT_FALSE(t.add_space_prefix);
  EXPECT_EQ(t.chat_template, "{{ messages }}");
  EXPECT_EQ((*m)->metadata.at("general.architecture"), "\"llama\"");
  EXPECT_EQ((*m)->metadata.at("llama.block_count"), "2");
  EXPECT_EQ((*m)->metadata.at("gguf.version"), "3");
}

TEST(GgufModel, DefaultsApplyWhenOptionalKeysAreMissing) {
  TestModelSpec spec;
  spec.tied = true;
  spec.skip_keys = {"llama.attention.head_count_kv", "llama.rope.freq_base",
                    "llama.attention.layer_norm_rms_epsilon"};
  spec.kv_heads = 4;
  const std::vector<std::byte> bytes = TestGguf(spec);
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, "t.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->hparams.n_kv_heads, 4);
  EXPECT_FLOAT_EQ((*m)->hparams.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ((*m)->hparams.rms_eps, 1e-5f);
  EXPECT_TRUE((*m)->hparams.tied_embeddings);
  EXPECT_EQ((*m)->tensors.count("output.weight"), 0u);
  EXPECT_TRUE((*m)->tokenizer.add_bos);           // SentencePiece default
  EXPECT_TRUE((*m)->tokenizer.add_space_prefix);  // SentencePiece default
}

TEST(GgufModel, TensorsPointIntoTheBytesWithTheirValues) {
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    TestModelSpec spec;
    spec.type = type;
    const std::vector<std::byte> bytes = TestGguf(spec);
    StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, "t.gguf");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    StatusOr<const TensorInfo*> q = (*m)->Find("blk.1.attn_q.weight", {32, 32});
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    EXPECT_EQ((*q)->type, type);
    EXPECT_GE((*q)->data, bytes.data());
    EXPECT_LE((*q)->data + (*q)->size_bytes, bytes.data() + bytes.size());
    EXPECT_EQ((*q)->file_offset, (*q)->data - bytes.data());
    const kernels::MatrixView mv = (*q)->matrix();
    EXPECT_EQ(mv.rows, 32);
    EXPECT_EQ(mv.cols, 32);
    EXPECT_EQ(mv.row_stride * 32, (*q)->size_bytes);
    // blk.1.attn_q is tensor 13 in declaration order (token_embd, output_norm, output, 9 of
    // blk.0, blk.1.attn_norm); check its row 1.
    std::vector<float> x(32);
    for (int64_t j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = testing::TestValue(13, 32 + j);
    std::vector<std::byte> expect(static_cast<size_t>(mv.row_stride));
    kernels::QuantizeRow(type, x.data(), 32, expect.data());
    EXPECT_EQ(std::memcmp(mv.data + mv.row_stride, expect.data(), expect.size()), 0)
        << kernels::Traits(type).name;
    StatusOr<const TensorInfo*> norm = (*m)->Find("output_norm.weight", {32});
    ASSERT_TRUE(norm.ok());
    float v0;
    std::memcpy(&v0, (*norm)->data, 4);
    EXPECT_EQ(v0, testing::TestValue(1, 0));
  }
}

TEST(GgufModel, QwenArchitecturesUseHalvesRope) {
  GgufWriter w;
  w.AddString("general.architecture", "qwen2");
  w.AddU32("qwen2.context_length", 64);
  w.AddU32("qwen2.embedding_length", 32);
  w.AddU32("qwen2.block_count", 1);
  w.AddU32("qwen2.feed_forward_length", 64);
  w.AddU32("qwen2.attention.head_count", 4);
  w.AddU32("qwen2.attention.head_count_kv", 2);
  ASSERT_TRUE(w.AddTensor("token_embd.weight", DType::kF32, {10, 32}).ok());
  const std::vector<std::byte> bytes = WriteAll(w);
  StatusOr<GgufFile> f = ParseGguf(bytes, "q.gguf");
  ASSERT_TRUE(f.ok());
  ModelFile m;
  m.path = "q.gguf";
  ASSERT_TRUE(GgufToModel(*f, bytes, &m).ok());
  EXPECT_EQ(m.hparams.rope_style, kernels::RopeStyle::kHalves);
  EXPECT_EQ(m.hparams.vocab_size, 10);
  EXPECT_TRUE(m.hparams.tied_embeddings);
}

}  // namespace
}  // namespace loom::model
