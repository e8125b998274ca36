// The safetensors reader and writer: round trips, the layout the writer chooses, and malformed
// headers, each rejected with an error that names the file and the problem.
#include "loom/model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "loom/model/hf_test_util.h"
#include "loom/model/safetensors_writer.h"

namespace loom::model {
namespace {

using testing::SafetensorsBytes;
using testing::TestTensor;

// A file from a header text (padded as given) and `data` bytes of data section.
std::vector<std::byte> Raw(const std::string& header, int64_t data = 0, uint64_t n_override = 0) {
  std::vector<std::byte> out(8);
  const uint64_t n = n_override != 0 ? n_override : header.size();
  std::memcpy(out.data(), &n, 8);
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  for (int64_t i = 0; i < data; ++i) out.push_back(static_cast<std::byte>(i));
  return out;
}

Status Parse(const std::vector<std::byte>& bytes) {
  return ParseSafetensors(bytes, "bad.safetensors").status();
}

TEST(SafetensorsTest, WriterOutputParsesBackWithAlignedTensors) {
  std::map<std::string, TestTensor> tensors;
  tensors["b.bf16"] = {StDType::kBF16, {3}, {1.0f, -2.0f, 0.5f}, {}};
  tensors["a.f32"] = {StDType::kF32, {2, 2}, {1, 2, 3, 4}, {}};
  tensors["c.u32"] = {StDType::kU32, {1, 3}, {}, {7, 8, 0xFFFFFFFFu}};
  tensors["d.f16"] = {StDType::kF16, {1}, {0.25f}, {}};
  const std::vector<std::byte> bytes = SafetensorsBytes(tensors);
  auto f = ParseSafetensors(bytes, "ok.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->data_offset % 8, 0);  // header padded with spaces
  ASSERT_EQ(f->tensors.size(), 4u);
  const SafetensorsTensor* a = f->Find("a.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, StDType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 2}));
  float v[4];
  std::memcpy(v, a->data.data(), 16);
  EXPECT_EQ(v[3], 4.0f);
  EXPECT_EQ(a->file_offset, f->data_offset + a->begin);
  const SafetensorsTensor* c = f->Find("c.u32");
  uint32_t w[3];
  std::memcpy(w, c->data.data(), 12);
  EXPECT_EQ(w[2], 0xFFFFFFFFu);
  // 4-byte types first, then 2-byte ones: every tensor is aligned to its element size.
  for (const auto& [name, t] : f->tensors) {
    EXPECT_EQ(t.file_offset % StDTypeSize(t.dtype), 0) << name;
  }
  EXPECT_LT(f->Find("a.f32")->begin, f->Find("b.bf16")->begin);
  EXPECT_EQ(f->Find("nope"), nullptr);
}

TEST(SafetensorsTest, ReadsMetadataScalarsAndEmptyTensors) {
  const std::string h =
      R"({"__metadata__":{"format":"pt"},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
      R"("e":{"dtype":"I64","shape":[0,3],"data_offsets":[4,4]}})";
  auto f = ParseSafetensors(Raw(h, 4), "m.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->metadata.at("format"), "pt");
  EXPECT_EQ(f->Find("s")->elements(), 1);
  EXPECT_EQ(f->Find("e")->elements(), 0);
  EXPECT_EQ(f->Find("e")->dtype, StDType::kI64);
}

struct BadCase {
  const char* what;
  std::string header;
  int64_t data;
  uint64_t n_override;
  const char* expect;  // part of the message
};

class MalformedSafetensorsTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(MalformedSafetensorsTest, IsRejectedWithAClearError) {
  const BadCase& c = GetParam();
  const Status s = Parse(Raw(c.header, c.data, c.n_override));
  ASSERT_FALSE(s.ok()) << c.what;
  EXPECT_NE(s.message().find("bad.safetensors"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.what << ": " << s.ToString();
}

const std::string kT = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

INSTANTIATE_TEST_SUITE_P(
    Cases, MalformedSafetensorsTest,
    ::testing::Values(
        BadCase{"bad json", R"({"t":{"dtype":"F32",)", 0, 0, "not valid JSON"},
        BadCase{"trailing garbage", "{" + kT + "}x", 8, 0, "not valid JSON"},
        BadCase{"not an object", "[1,2]", 0, 0, "does not start with '{'"},
        BadCase{"huge header length", "{}", 0, uint64_t{1} << 40, "exceeds the limit"},
        BadCase{"header past end", "{}", 0, 1000, "runs past the end"},
        BadCase{"tensor not object", R"({"t":[1]})", 0, 0, "expected an object"},
        BadCase{"missing dtype", R"({"t":{"shape":[1],"data_offsets":[0,4]}})", 4, 0,
                "lacks \"dtype\""},
        BadCase{"unknown dtype", R"({"t":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}})", 4, 0,
                "dtype 'F7'"},
        BadCase{"negative dim", R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, 0,
                "shape[0] = -1"},
        BadCase{"float dim", R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4, 0,
                "shape[0] = 1.5"},
        BadCase{"shape overflow",
                R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4,
                0, "overflows"},
        BadCase{"too many dims",
                R"({"t":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})", 1, 0,
                "dimensions"},
        BadCase{"offsets past end", R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4,
                0, "past the end of the 4-byte data section"},
        BadCase{"offsets reversed", R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8,
                0, "end before they begin"},
        BadCase{"huge offset",
                R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", 8,
                0, "two non-negative integers"},
        BadCase{"dtype shape mismatch",
                R"({"t":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", 8, 0,
                "BF16 [2] (4 bytes) but its data_offsets [0, 8] hold 8 bytes"},
        BadCase{"overlap",
                R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                12, 0, "overlap"},
        BadCase{"gap",
                R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                12, 0, "no tensor covers bytes [4, 8)"},
        BadCase{"trailing data", "{" + kT + "}", 12, 0, "end at byte 8"},
        BadCase{"metadata not strings", R"({"__metadata__":{"a":1}})", 0, 0,
                "__metadata__ value 'a'"},
        BadCase{"offsets wrong arity",
                R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 4, 0,
                "expected [begin, end]"}));

TEST(SafetensorsTest, ShortFilesAreRejected) {
  EXPECT_NE(Parse({}).message().find("too short"), std::string::npos);
  const std::vector<std::byte> four(4);
  EXPECT_NE(Parse(four).message().find("too short"), std::string::npos);
}

TEST(SafetensorsWriterTest, RejectsDuplicateNamesAndShortData) {
  SafetensorsWriter w;
  EXPECT_TRUE(w.AddTensor("x", StDType::kF32, {2}).ok());
  EXPECT_FALSE(w.AddTensor("x", StDType::kF32, {2}).ok());
  std::vector<std::byte> out;
  EXPECT_FALSE(w.BeginMemory(&out).ok());  // the declaration error sticks

  SafetensorsWriter w2;
  ASSERT_TRUE(w2.AddTensor("x", StDType::kF32, {2}).ok());
  ASSERT_TRUE(w2.BeginMemory(&out).ok());
  const std::byte four[4] = {};
  ASSERT_TRUE(w2.WriteTensorData(four).ok());
  EXPECT_EQ(w2.Finish().code(), StatusCode::kFailedPrecondition);
  const std::byte twelve[12] = {};
  EXPECT_FALSE(w2.WriteTensorData(twelve).ok());  // runs past the tensor
}

}  // namespace
}  // namespace loom::model
