// Corrupt, truncated and inconsistent model files: each gives the expected error code and a message
// naming the file, never a crash.  The bad files are made here from good ones.
#include <gtest/gtest.h>

#include <random>

#include "loom/model/gguf_reader.h"
#include "loom/model/model_file.h"
#include "loom/model/model_test_util.h"

namespace loom::model {
namespace {

using kernels::DType;
using testing::MetadataValue;
using testing::Peek;
using testing::Poke;
using testing::TensorInfoFields;
using testing::TestGguf;
using testing::TestModelSpec;

constexpr const char* kName = "bad.gguf";

// Opens `bytes` and expects `code` with a message that starts with the file name and contains
// `needle`.
void ExpectError(const std::vector<std::byte>& bytes, StatusCode code, const std::string& needle) {
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, kName);
  ASSERT_FALSE(m.ok()) << "expected " << StatusCodeName(code) << " containing '" << needle << "'";
  EXPECT_EQ(m.status().code(), code) << m.status().ToString();
  EXPECT_EQ(m.status().message().rfind(kName, 0), 0u) << m.status().message();
  EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
}

std::vector<std::byte> WithMetadata(std::function<void(GgufWriter&)> extra) {
  TestModelSpec spec;
  spec.extra_metadata = std::move(extra);
  return TestGguf(spec);
}

TEST(BadInput, TruncatedGgufAtEveryCutPoint) {
  const std::vector<std::byte> good = TestGguf({});
  ASSERT_TRUE(OpenModelFromBytes(good, kName).ok());
  StatusOr<GgufFile> f = ParseGguf(good, kName);
  ASSERT_TRUE(f.ok());
  // Every byte of the header, metadata and tensor table, then steps through the data.
  std::vector<int64_t> cuts;
  for (int64_t c = 0; c < f->data_offset + 64; ++c) cuts.push_back(c);
  for (int64_t c = f->data_offset + 64; c < static_cast<int64_t>(good.size()); c += 997) {
    cuts.push_back(c);
  }
  cuts.push_back(static_cast<int64_t>(good.size()) - 1);
  for (int64_t cut : cuts) {
    const std::vector<std::byte> bad(good.begin(), good.begin() + cut);
    StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bad, kName);
    ASSERT_FALSE(m.ok()) << "cut " << cut;
    // Fewer than 4 bytes cannot show the GGUF magic: "not a model file"; otherwise corrupt.
    EXPECT_EQ(m.status().code(), cut < 4 ? StatusCode::kInvalidArgument : StatusCode::kDataLoss)
        << "cut " << cut << ": " << m.status().ToString();
    EXPECT_EQ(m.status().message().rfind(kName, 0), 0u) << m.status().message();
  }
}

TEST(BadInput, TruncatedLlama2cAtManyCutPoints) {
  const std::vector<std::byte> good = testing::TestLlama2c({});
  for (int64_t cut = 0; cut < static_cast<int64_t>(good.size()); cut += (cut < 64 ? 1 : 37)) {
    const std::vector<std::byte> bad(good.begin(), good.begin() + cut);
    StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bad, kName);
    ASSERT_FALSE(m.ok()) << "cut " << cut;
    EXPECT_EQ(m.status().code(), cut < 28 ? StatusCode::kInvalidArgument : StatusCode::kDataLoss)
        << "cut " << cut << ": " << m.status().ToString();
    EXPECT_EQ(m.status().message().rfind(kName, 0), 0u);
  }
  std::vector<std::byte> longer = good;
  longer.resize(good.size() + 4);
  ExpectError(longer, StatusCode::kDataLoss, "but the file has");
}

TEST(BadInput, WrongMagicAndVersions) {
  std::vector<std::byte> bytes = TestGguf({});
  ExpectError({}, StatusCode::kInvalidArgument, "empty file");
  std::vector<std::byte> bad = bytes;
  bad[3] = std::byte{'E'};
  ExpectError(bad, StatusCode::kInvalidArgument, "not a model file I know");
  StatusOr<GgufFile> f = ParseGguf(bad, kName);
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("not a GGUF file"), std::string::npos);
  bad = bytes;
  Poke<uint32_t>(bad, 4, 1);
  ExpectError(bad, StatusCode::kUnimplemented, "GGUF version 1 is not supported");
  Poke<uint32_t>(bad, 4, 4);
  ExpectError(bad, StatusCode::kDataLoss, "unknown GGUF version 4");
  Poke<uint32_t>(bad, 4, 0x03000000u);
  ExpectError(bad, StatusCode::kUnimplemented, "big-endian");
  TestModelSpec v2;
  v2.version = 2;
  EXPECT_TRUE(OpenModelFromBytes(TestGguf(v2), kName).ok());
}

TEST(BadInput, UnknownAndUnsupportedTensorTypes) {
  std::vector<std::byte> bytes = TestGguf({});
  const int64_t info = TensorInfoFields(bytes, "blk.0.ffn_down.weight");
  ASSERT_GT(info, 0);
  const int64_t type_at = info + 4 + 2 * 8;
  ASSERT_EQ(Peek<uint32_t>(bytes, type_at), 0u);
  Poke<uint32_t>(bytes, type_at, 99);
  ExpectError(bytes, StatusCode::kDataLoss,
              "tensor 'blk.0.ffn_down.weight' has unknown tensor type id 99");
  Poke<uint32_t>(bytes, type_at, 4);  // removed from ggml long ago
  ExpectError(bytes, StatusCode::kDataLoss, "unknown tensor type id 4");

  TestModelSpec spec;
  spec.skip_tensors = {"blk.0.ffn_down.weight"};
  spec.extra_tensors = [](GgufWriter& w) {
    (void)w.AddTensorRaw("blk.0.ffn_down.weight", 10 /* q2_k */, {32, 256});
  };
  ExpectError(TestGguf(spec), StatusCode::kUnimplemented,
              "unsupported tensor type q2_k in tensor 'blk.0.ffn_down.weight'");
  spec.extra_tensors = [](GgufWriter& w) {
    (void)w.AddTensorRaw("blk.0.ffn_down.weight", 11 /* q3_k */, {32, 256});
  };
  ExpectError(TestGguf(spec), StatusCode::kUnimplemented, "unsupported tensor type q3_k");

  // A row that is not a whole number of blocks.
  bytes = TestGguf({});
  Poke<uint32_t>(bytes, type_at, 8);    // q8_0 has 32-value blocks; ne[0] = 64 works...
  Poke<uint64_t>(bytes, info + 4, 48);  // ...but 48 does not
  ExpectError(bytes, StatusCode::kDataLoss, "not a whole number of 32-value q8_0 blocks");
}

TEST(BadInput, TensorsPastTheEndOrMisaligned) {
  const std::vector<std::byte> good = TestGguf({});
  const int64_t info = TensorInfoFields(good, "blk.1.ffn_up.weight");
  const int64_t offset_at = info + 4 + 2 * 8 + 4;
  const uint64_t offset = Peek<uint64_t>(good, offset_at);
  std::vector<std::byte> bad = good;
  Poke<uint64_t>(bad, offset_at, offset + 32 * 4096);
  ExpectError(bad, StatusCode::kDataLoss,
              "tensor 'blk.1.ffn_up.weight' extends past end of file (offset ");
  Poke<uint64_t>(bad, offset_at, offset + 4);
  ExpectError(bad, StatusCode::kDataLoss, "not a multiple of the alignment 32");
  Poke<uint64_t>(bad, offset_at, 0x7FFFFFFFFFFFFFE0ull);
  ExpectError(bad, StatusCode::kDataLoss, "beyond the end of file");
  Poke<uint64_t>(bad, offset_at, 0xFFFFFFFFFFFFFFE0ull);
  ExpectError(bad, StatusCode::kDataLoss, "has data offset");
  // The last tensor's data cut short by one byte.
  bad = good;
  bad.pop_back();
  ExpectError(bad, StatusCode::kDataLoss, "extends past end of file");
}

TEST(BadInput, AbsurdDimensionsAndCounts) {
  const std::vector<std::byte> good = TestGguf({});
  const int64_t info = TensorInfoFields(good, "blk.0.attn_q.weight");
  std::vector<std::byte> bad = good;
  Poke<uint32_t>(bad, info, 5);
  ExpectError(bad, StatusCode::kDataLoss, "has 5 dimensions");
  Poke<uint32_t>(bad, info, 0);
  ExpectError(bad, StatusCode::kDataLoss, "has 0 dimensions");
  bad = good;
  Poke<uint64_t>(bad, info + 4, 0);
  ExpectError(bad, StatusCode::kDataLoss, "dimension ne[0] = 0");
  Poke<uint64_t>(bad, info + 4, uint64_t{1} << 32);
  Poke<uint64_t>(bad, info + 12, uint64_t{1} << 32);
  ExpectError(bad, StatusCode::kDataLoss, "overflow 64 bits");
  Poke<uint64_t>(bad, info + 4, uint64_t{1} << 40);
  Poke<uint64_t>(bad, info + 12, 1);
  ExpectError(bad, StatusCode::kDataLoss, "extends past end of file");
  Poke<uint64_t>(bad, info + 4, ~uint64_t{0});
  ExpectError(bad, StatusCode::kDataLoss, "dimension ne[0]");

  bad = good;
  Poke<uint64_t>(bad, 8, uint64_t{1} << 60);
  ExpectError(bad, StatusCode::kDataLoss, "tensors but only");
  bad = good;
  Poke<uint64_t>(bad, 16, uint64_t{1} << 60);
  ExpectError(bad, StatusCode::kDataLoss, "metadata entries but only");
  bad = good;
  Poke<uint64_t>(bad, 8, 1000);  // more tensors than the table holds
  ExpectError(bad, StatusCode::kDataLoss, "");

  // String lengths and array counts beyond the file.
  bad = good;
  const int64_t key_len_at = 24;
  Poke<uint64_t>(bad, key_len_at, uint64_t{1} << 62);
  ExpectError(bad, StatusCode::kDataLoss, "has length");
  bad = good;
  const int64_t tokens = MetadataValue(good, "tokenizer.ggml.tokens");
  Poke<uint64_t>(bad, tokens + 4, uint64_t{1} << 61);
  ExpectError(bad, StatusCode::kDataLoss, "cannot fit");
  bad = good;
  Poke<uint64_t>(bad, tokens + 12, 1'000'000);  // the first token string's length
  ExpectError(bad, StatusCode::kDataLoss, "metadata key 'tokenizer.ggml.tokens'");
}

TEST(BadInput, DuplicateNamesAndKeys) {
  std::vector<std::byte> bad = TestGguf({});
  const int64_t v = testing::FindBytes(bad, "blk.0.attn_v.weight");
  ASSERT_GT(v, 0);
  bad[static_cast<size_t>(v + 11)] = std::byte{'k'};
  ExpectError(bad, StatusCode::kDataLoss, "duplicate tensor name 'blk.0.attn_k.weight'");

  bad = WithMetadata([](GgufWriter& w) {
    w.AddU32("dup.a1", 1);
    w.AddU32("dup.a2", 2);
  });
  const int64_t a2 = testing::FindBytes(bad, "dup.a2");
  bad[static_cast<size_t>(a2 + 5)] = std::byte{'1'};
  ExpectError(bad, StatusCode::kDataLoss, "duplicate metadata key 'dup.a1'");
}

TEST(BadInput, MalformedMetadataValues) {
  std::vector<std::byte> bad = WithMetadata([](GgufWriter& w) { w.AddU32("x.y", 5); });
  Poke<uint32_t>(bad, MetadataValue(bad, "x.y") - 4, 13);
  ExpectError(bad, StatusCode::kDataLoss, "metadata key 'x.y': unknown value type 13");

  bad = WithMetadata([](GgufWriter& w) { w.AddArray("x.y", std::vector<uint32_t>{1, 2}); });
  Poke<uint32_t>(bad, MetadataValue(bad, "x.y"), 9);  // element type: array
  ExpectError(bad, StatusCode::kUnimplemented, "arrays of arrays");
  Poke<uint32_t>(bad, MetadataValue(bad, "x.y"), 77);
  ExpectError(bad, StatusCode::kDataLoss, "unknown array element type 77");

  for (uint32_t alignment : {0u, 3u, 4u, 48u, 1u << 21}) {
    bad = WithMetadata([&](GgufWriter& w) { w.AddU32("general.alignment", alignment); });
    ExpectError(bad, StatusCode::kDataLoss, "general.alignment is " + std::to_string(alignment));
  }
  bad = WithMetadata([](GgufWriter& w) { w.AddString("general.alignment", "32"); });
  ExpectError(bad, StatusCode::kDataLoss, "general.alignment");
}

TEST(BadInput, InconsistentHyperparameters) {
  auto with_u32 = [](const std::string& key, uint32_t v) {
    TestModelSpec spec;
    spec.skip_keys = {key};
    spec.extra_metadata = [=](GgufWriter& w) { w.AddU32(key, v); };
    return TestGguf(spec);
  };
  ExpectError(with_u32("llama.attention.head_count_kv", 3), StatusCode::kInvalidArgument,
              "llama.attention.head_count 4 is not a multiple of llama.attention.head_count_kv 3");
  ExpectError(with_u32("llama.attention.head_count_kv", 8), StatusCode::kInvalidArgument,
              "llama.attention.head_count_kv is 8 (expected 1 to 4)");
  ExpectError(with_u32("llama.attention.head_count", 0), StatusCode::kInvalidArgument,
              "llama.attention.head_count is 0");
  ExpectError(with_u32("llama.attention.head_count", 8), StatusCode::kDataLoss,
              "but the hyperparameters imply");
  ExpectError(with_u32("llama.embedding_length", 0), StatusCode::kInvalidArgument,
              "llama.embedding_length is 0");
  ExpectError(with_u32("llama.embedding_length", 1u << 30), StatusCode::kInvalidArgument,
              "llama.embedding_length is 1073741824");
  ExpectError(with_u32("llama.embedding_length", 48), StatusCode::kDataLoss,
              "tensor 'token_embd.weight' has shape [300, 32] but the hyperparameters imply "
              "[300, 48]");
  ExpectError(with_u32("llama.block_count", 3), StatusCode::kDataLoss,
              "missing tensor 'blk.2.attn_norm.weight'");
  ExpectError(with_u32("llama.block_count", 100000), StatusCode::kInvalidArgument,
              "llama.block_count is 100000");
  ExpectError(with_u32("llama.context_length", 0), StatusCode::kInvalidArgument,
              "llama.context_length is 0");
  ExpectError(with_u32("llama.feed_forward_length", 65), StatusCode::kDataLoss,
              "blk.0.ffn_gate.weight");
  ExpectError(with_u32("llama.embedding_length", 31), StatusCode::kInvalidArgument,
              "even head size");

  TestModelSpec spec;
  spec.skip_keys = {"llama.attention.layer_norm_rms_epsilon"};
  spec.extra_metadata = [](GgufWriter& w) {
    w.AddF32("llama.attention.layer_norm_rms_epsilon", -1.0f);
  };
  ExpectError(TestGguf(spec), StatusCode::kInvalidArgument,
              "llama.attention.layer_norm_rms_epsilon is -1");
  spec.skip_keys = {"llama.rope.freq_base"};
  spec.extra_metadata = [](GgufWriter& w) { w.AddF32("llama.rope.freq_base", 0.0f); };
  ExpectError(TestGguf(spec), StatusCode::kInvalidArgument, "llama.rope.freq_base is 0");
  spec.skip_keys = {"llama.block_count"};
  spec.extra_metadata = [](GgufWriter& w) { w.AddString("llama.block_count", "two"); };
  ExpectError(TestGguf(spec), StatusCode::kDataLoss, "metadata key 'llama.block_count' is string");
  spec.extra_metadata = [](GgufWriter& w) {
    w.AddArray("llama.block_count", std::vector<uint32_t>{2, 2});
  };
  ExpectError(TestGguf(spec), StatusCode::kUnimplemented, "is an array");
  spec.extra_metadata = nullptr;
  ExpectError(TestGguf(spec), StatusCode::kDataLoss, "missing metadata key 'llama.block_count'");
  spec.skip_keys = {"general.architecture"};
  ExpectError(TestGguf(spec), StatusCode::kDataLoss, "missing metadata key 'general.architecture'");

  ExpectError(WithMetadata([](GgufWriter& w) { w.AddU32("llama.rope.dimension_count", 4); }),
              StatusCode::kUnimplemented, "partial rotary");
  ExpectError(
      WithMetadata([](GgufWriter& w) { w.AddString("llama.rope.scaling.type", "longrope"); }),
      StatusCode::kUnimplemented, "rope.scaling.type 'longrope'");
  ExpectError(WithMetadata([](GgufWriter& w) {
                w.AddString("llama.rope.scaling.type", "yarn");
                w.AddF32("llama.rope.scaling.factor", 4.0f);
                w.AddF32("llama.rope.scaling.yarn_beta_fast", 0.5f);
              }),
              StatusCode::kInvalidArgument, "yarn parameters out of range");
  ExpectError(WithMetadata([](GgufWriter& w) { w.AddU32("llama.vocab_size", 301); }),
              StatusCode::kDataLoss, "llama.vocab_size is 301");
}

TEST(BadInput, InconsistentTokenizer) {
  TestModelSpec spec;
  spec.skip_keys = {"tokenizer.ggml.bos_token_id"};
  spec.extra_metadata = [](GgufWriter& w) { w.AddU32("tokenizer.ggml.bos_token_id", 300); };
  ExpectError(TestGguf(spec), StatusCode::kDataLoss,
              "tokenizer.ggml.bos_token_id is 300 but the vocabulary has 300 tokens");
  spec.extra_metadata = [](GgufWriter& w) { w.AddI32("tokenizer.ggml.bos_token_id", -7); };
  ExpectError(TestGguf(spec), StatusCode::kDataLoss, "tokenizer.ggml.bos_token_id is -7");

  // Token list shorter than the embedding.
  std::vector<std::byte> bad = TestGguf({});
  const int64_t tokens = MetadataValue(bad, "tokenizer.ggml.tokens");
  // Shrinking the array count leaves the remaining strings to be read as the next key, so patch
  // the scores' count instead, which must match the tokens.
  const int64_t scores = MetadataValue(bad, "tokenizer.ggml.scores");
  ASSERT_GT(tokens, 0);
  Poke<uint64_t>(bad, scores + 4, 299);
  ExpectError(bad, StatusCode::kDataLoss, "");
  spec = {};
  spec.vocab = 300;
  spec.extra_metadata = [](GgufWriter& w) {
    w.AddArray("tokenizer.ggml.merges", std::vector<uint32_t>{1});
  };
  ExpectError(TestGguf(spec), StatusCode::kDataLoss, "expected an array of strings");

  bad = TestGguf({});
  const int64_t types = MetadataValue(bad, "tokenizer.ggml.token_type");
  Poke<int32_t>(bad, types + 12 + 4 * 10, 9);
  ExpectError(bad, StatusCode::kDataLoss, "tokenizer.ggml.token_type[10] is 9");
}

TEST(BadInput, RandomByteFlipsNeverCrash) {
  const std::vector<std::byte> good = TestGguf({});
  StatusOr<GgufFile> f = ParseGguf(good, kName);
  ASSERT_TRUE(f.ok());
  std::mt19937_64 rng(42);
  int failures = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<std::byte> bad = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % static_cast<size_t>(f->data_offset);
      bad[at] = static_cast<std::byte>(rng());
    }
    StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bad, kName);
    if (!m.ok()) {
      ++failures;
      EXPECT_EQ(m.status().message().rfind(kName, 0), 0u) << m.status().message();
    }
  }
  EXPECT_GT(failures, 100);
}

}  // namespace
}  // namespace loom::model
