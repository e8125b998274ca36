#include "loom/base/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

namespace loom::base {
namespace {

std::string TempPath(const char* name) {
  return (std::filesystem::temp_directory_path() /
          (std::string("loom_") + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(MappedFileTest, MapsWhatWasWrittenAtomically) {
  const std::string path = TempPath("mapped");
  const std::string text = "hello, loom";
  ASSERT_TRUE(WriteFileAtomically(path, std::as_bytes(std::span(text))).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ(file->size(), static_cast<int64_t>(text.size()));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file->data()), text.size()), text);
  std::remove(path.c_str());
}

TEST(MappedFileTest, MissingFileIsNotFoundAndNamesThePath) {
  auto file = MappedFile::Open("/nonexistent/loom/model.gguf");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find("/nonexistent/loom/model.gguf"), std::string::npos);
}

TEST(MappedFileTest, DirectoryIsRejected) {
  auto file = MappedFile::Open(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("directory"), std::string::npos);
}

TEST(MappedFileTest, AbandonedWriterLeavesNoFile) {
  const std::string path = TempPath("abandoned");
  {
    auto w = AtomicFileWriter::Create(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Write("abc", 3).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

}  // namespace
}  // namespace loom::base
