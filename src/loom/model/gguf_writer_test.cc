#include "loom/model/gguf_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "loom/base/mapped_file.h"
#include "loom/model/gguf_reader.h"
#include "loom/model/model_test_util.h"

namespace loom::model {
namespace {

using kernels::DType;
namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() /
          ("loom_model_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(GgufWriter, StreamsTensorsInPiecesWithAlignmentPadding) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("x", DType::kF32, {3}).ok());       // 12 bytes, then 20 of padding
  ASSERT_TRUE(w.AddTensor("y", DType::kQ8_0, {2, 32}).ok());  // 68 bytes at offset 32
  std::vector<std::byte> out;
  ASSERT_TRUE(w.BeginMemory(&out).ok());
  const float x[3] = {1.0f, 2.0f, 3.0f};
  ASSERT_TRUE(w.WriteTensorData({reinterpret_cast<const std::byte*>(x), 4}).ok());
  ASSERT_TRUE(w.WriteTensorData({reinterpret_cast<const std::byte*>(x) + 4, 8}).ok());
  std::vector<std::byte> y(68);
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::byte>(i);
  ASSERT_TRUE(w.WriteTensorData({y.data(), 30}).ok());
  ASSERT_TRUE(w.WriteTensorData({y.data() + 30, 38}).ok());
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_EQ(static_cast<int64_t>(out.size()), w.planned_file_size());

  StatusOr<GgufFile> f = ParseGguf(out, "mem");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->tensors.size(), 2u);
  EXPECT_EQ(f->tensors[1].offset, 32);
  EXPECT_EQ(std::memcmp(out.data() + f->data_offset, x, 12), 0);
  for (int64_t i = 12; i < 32; ++i)
    EXPECT_EQ(out[static_cast<size_t>(f->data_offset + i)], std::byte{0});
  EXPECT_EQ(std::memcmp(out.data() + f->data_offset + 32, y.data(), 68), 0);
}

TEST(GgufWriter, RejectsMisuse) {
  {
    GgufWriter w;
    ASSERT_TRUE(w.AddTensor("x", DType::kF32, {4}).ok());
    EXPECT_EQ(w.AddTensor("x", DType::kF32, {4}).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(w.AddTensor("q", DType::kQ4_0, {2, 48}).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(w.AddTensor("z", DType::kF32, {0}).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(w.AddTensor("big", DType::kF32, {1, 2, 3, 4, 5}).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(w.AddTensorRaw("bad", 4, {4}).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(w.SetAlignment(64).code(), StatusCode::kFailedPrecondition);
    std::vector<std::byte> out;
    EXPECT_EQ(w.WriteTensorData(std::vector<std::byte>(4)).code(), StatusCode::kFailedPrecondition);
    ASSERT_TRUE(w.BeginMemory(&out).ok());
    EXPECT_EQ(w.WriteTensorData(std::vector<std::byte>(17)).code(), StatusCode::kInvalidArgument);
    ASSERT_TRUE(w.WriteTensorData(std::vector<std::byte>(8)).ok());
    const Status s = w.Finish();
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("'x' got 8 of 16 bytes"), std::string::npos) << s.message();
  }
  {
    GgufWriter w;
    w.AddU32("k", 1);
    w.AddString("k", "again");
    std::vector<std::byte> out;
    const Status s = w.BeginMemory(&out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("'k' added twice"), std::string::npos);
  }
  {
    GgufWriter w;
    EXPECT_EQ(w.SetAlignment(24).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(w.SetAlignment(4).code(), StatusCode::kInvalidArgument);
  }
}

TEST(GgufWriter, WritesFilesAtomically) {
  const std::string path = TempPath("atomic.gguf");
  {
    GgufWriter w;
    w.AddString("general.architecture", "none");
    ASSERT_TRUE(w.AddTensor("x", DType::kF16, {8}).ok());
    ASSERT_TRUE(w.BeginFile(path).ok());
    EXPECT_TRUE(fs::exists(path + ".tmp"));
    EXPECT_FALSE(fs::exists(path));
    ASSERT_TRUE(w.WriteTensorData(std::vector<std::byte>(16, std::byte{1})).ok());
    ASSERT_TRUE(w.Finish().ok());
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  StatusOr<base::MappedFile> file = base::MappedFile::Open(path);
  ASSERT_TRUE(file.ok());
  StatusOr<GgufFile> f = ParseGguf(file->bytes(), path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->Find("general.architecture")->strings[0], "none");
  EXPECT_EQ(f->tensors.at(0).size_bytes, 16);
  fs::remove(path);

  // Abandoned writes leave nothing behind.
  {
    GgufWriter w;
    ASSERT_TRUE(w.AddTensor("x", DType::kF32, {8}).ok());
    ASSERT_TRUE(w.BeginFile(path).ok());
    ASSERT_TRUE(w.WriteTensorData(std::vector<std::byte>(4)).ok());
    EXPECT_FALSE(w.Finish().ok());
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_FALSE(fs::exists(path));
}

TEST(GgufWriter, RoundTripsAWholeModelThroughAFile) {
  testing::TestModelSpec spec;
  spec.type = DType::kQ4_0;
  spec.alignment = 128;
  const std::vector<std::byte> bytes = testing::TestGguf(spec);
  const std::string path = TempPath("model.gguf");
  ASSERT_TRUE(base::WriteFileAtomically(path, bytes).ok());
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->path, path);
  EXPECT_EQ((*m)->mappings.size(), 1u);
  for (const auto& [name, t] : (*m)->tensors) {
    EXPECT_EQ(t.file_offset % 128, 0) << name;
    EXPECT_EQ(std::memcmp(t.data, bytes.data() + t.file_offset, static_cast<size_t>(t.size_bytes)),
              0)
        << name;
  }
  EXPECT_EQ((*m)->tensors.at("blk.0.ffn_down.weight").type, DType::kQ4_0);
  EXPECT_EQ((*m)->tensors.at("blk.0.ffn_norm.weight").type, DType::kF32);
  fs::remove(path);
}

}  // namespace
}  // namespace loom::model
