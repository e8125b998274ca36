#include "loom/model/model_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "loom/base/mapped_file.h"
#include "loom/model/model_test_util.h"

namespace loom::model {
namespace {

namespace fs = std::filesystem;
using kernels::DType;

class ModelFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom_model_file_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::vector<std::byte>& bytes) {
    const std::string path = (dir_ / name).string();
    EXPECT_TRUE(base::WriteFileAtomically(path, bytes).ok());
    return path;
  }
  fs::path dir_;
};

TEST_F(ModelFileTest, SniffsGgufAndBothLlama2cFormats) {
  const std::string gguf = Write("a.model", testing::TestGguf({}));
  const std::string legacy = Write("b.model", testing::TestLlama2c({}));
  testing::Llama2cSpec v1;
  v1.v1 = true;
  const std::string ak42 = Write("c.model", testing::TestLlama2c(v1));
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModel(gguf);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->format, "gguf");
  m = OpenModel(legacy);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->format, "llama2c");
  EXPECT_EQ((*m)->metadata.at("llama2c.version"), "0");
  m = OpenModel(ak42);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->metadata.at("llama2c.version"), "1");
}

TEST_F(ModelFileTest, PathProblemsAreClearErrors) {
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModel(dir_.string());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find(dir_.string() + ": is a directory without config.json"),
            std::string::npos);
  m = OpenModel((dir_ / "missing.gguf").string());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("missing.gguf"), std::string::npos);
  const std::string empty = Write("empty.gguf", {});
  m = OpenModel(empty);
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("empty.gguf: empty file"), std::string::npos);
  const std::string text = "hello, this is not a model at all, just some text in a file\n";
  std::vector<std::byte> text_bytes(text.size());
  std::memcpy(text_bytes.data(), text.data(), text.size());
  m = OpenModel(Write("notes.txt", text_bytes));
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("notes.txt: not a model file I know"), std::string::npos)
      << m.status().message();
}

TEST_F(ModelFileTest, FindChecksNamesAndShapes) {
  const std::vector<std::byte> bytes = testing::TestGguf({});
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, "t.gguf");
  ASSERT_TRUE(m.ok());
  const ModelFile& mf = **m;
  EXPECT_TRUE(mf.Find("output.weight").ok());
  StatusOr<const TensorInfo*> t = mf.Find("nope.weight");
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("t.gguf: tensor 'nope.weight' not found"), std::string::npos);
  t = mf.Find("blk.0.attn_k.weight", {16, 32});
  EXPECT_TRUE(t.ok());
  t = mf.Find("blk.0.attn_k.weight", {32, 32});
  EXPECT_EQ(t.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(t.status().message().find("shape [16, 32], expected [32, 32]"), std::string::npos);

  const kernels::MatrixView v = mf.tensors.at("output_norm.weight").matrix();
  EXPECT_EQ(v.rows, 1);
  EXPECT_EQ(v.cols, 32);
  EXPECT_EQ(v.row_stride, 128);
  int64_t total = 0;
  for (const auto& [name, info] : mf.tensors) total += info.size_bytes;
  EXPECT_EQ(mf.total_tensor_bytes(), total);
  EXPECT_EQ(total, 2 * 300 * 32 * 4 + 32 * 4 +
                       2 * (2 * 32 * 4 + (32 * 32 * 2 + 16 * 32 * 2 + 3 * 64 * 32) * 4));
}

TEST_F(ModelFileTest, QuantizedMatricesHaveBlockStrides) {
  testing::TestModelSpec spec;
  spec.type = DType::kQ4_0;
  const std::vector<std::byte> bytes = testing::TestGguf(spec);
  StatusOr<std::unique_ptr<ModelFile>> m = OpenModelFromBytes(bytes, "t.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const kernels::MatrixView v = (*m)->tensors.at("blk.0.ffn_down.weight").matrix();
  EXPECT_EQ(v.rows, 32);
  EXPECT_EQ(v.cols, 64);
  EXPECT_EQ(v.row_stride, 2 * 18);
  EXPECT_EQ(v.type, DType::kQ4_0);
}

}  // namespace
}  // namespace loom::model
