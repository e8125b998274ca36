// A read-only memory mapping of a whole file (RAII).  Weights are used in place from here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "loom/base/status.h"

namespace loom::base {

class MappedFile {
 public:
  // Maps `path` read-only.  Errors name the path and the system error.
  static StatusOr<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return data_; }
  int64_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, static_cast<size_t>(size_)}; }
  const std::string& path() const { return path_; }

  // Hints the kernel to read the range [offset, offset + size) ahead (best effort).
  void WillNeed(int64_t offset, int64_t size) const;

 private:
  void Reset();

  std::string path_;
  std::byte* data_ = nullptr;
  int64_t size_ = 0;
};

// Reads a whole (small) file into a string.
StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes a file so that an interrupted write never leaves a truncated file under the final name:
// bytes go to `path.tmp`; Commit() fsyncs and renames it over `path`; destruction without Commit()
// removes the temporary file.
class AtomicFileWriter {
 public:
  static StatusOr<AtomicFileWriter> Create(const std::string& path);

  AtomicFileWriter() = default;
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  Status Write(std::span<const std::byte> bytes);
  Status Write(const void* data, int64_t size) {
    return Write({static_cast<const std::byte*>(data), static_cast<size_t>(size)});
  }
  int64_t bytes_written() const { return written_; }
  Status Commit();

 private:
  void Abandon();

  std::string path_;
  int fd_ = -1;
  int64_t written_ = 0;
};

// Writes `bytes` to `path` through an AtomicFileWriter.
Status WriteFileAtomically(const std::string& path, std::span<const std::byte> bytes);

}  // namespace loom::base
