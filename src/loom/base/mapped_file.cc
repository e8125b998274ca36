#include "loom/base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "loom/base/fd.h"

namespace loom::base {

namespace {
std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return NotFoundError(path, ": no such file");
    return UnavailableError(path, ": cannot open: ", ErrnoText());
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return UnavailableError(path, ": cannot stat: ", ErrnoText());
  if (S_ISDIR(st.st_mode)) return InvalidArgumentError(path, ": is a directory, expected a file");
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError(path, ": not a regular file");
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<int64_t>(st.st_size);
  if (file.size_ == 0) return file;  // mmap of 0 bytes is invalid; an empty file maps to nothing
  void* p = ::mmap(nullptr, static_cast<size_t>(file.size_), PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) return ResourceExhaustedError(path, ": mmap failed: ", ErrnoText());
  file.data_ = static_cast<std::byte*>(p);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ != nullptr) ::munmap(data_, static_cast<size_t>(size_));
  data_ = nullptr;
  size_ = 0;
}

void MappedFile::WillNeed(int64_t offset, int64_t size) const {
  if (data_ == nullptr || offset < 0 || size <= 0 || offset >= size_) return;
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  const int64_t begin = offset / page * page;
  const int64_t end = std::min(size_, offset + size);
  ::madvise(data_ + begin, static_cast<size_t>(end - begin), MADV_WILLNEED);
}

StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path, ": cannot open: ", ErrnoText());
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return DataLossError(path, ": read failed");
  return out.str();
}

StatusOr<AtomicFileWriter> AtomicFileWriter::Create(const std::string& path) {
  AtomicFileWriter w;
  w.path_ = path;
  const std::string tmp = path + ".tmp";
  w.fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0) return UnavailableError(tmp, ": cannot create: ", ErrnoText());
  return w;
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept { *this = std::move(other); }

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    written_ = other.written_;
    other.fd_ = -1;
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink((path_ + ".tmp").c_str());
  fd_ = -1;
}

Status AtomicFileWriter::Write(std::span<const std::byte> bytes) {
  if (fd_ < 0) return FailedPreconditionError(path_, ": write after commit or failure");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string err = ErrnoText();
      Abandon();
      return UnavailableError(path_, ".tmp: write failed: ", err);
    }
    done += static_cast<size_t>(n);
  }
  written_ += static_cast<int64_t>(bytes.size());
  return OkStatus();
}

Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return FailedPreconditionError(path_, ": commit after commit or failure");
  if (::fsync(fd_) != 0) {
    const std::string err = ErrnoText();
    Abandon();
    return UnavailableError(path_, ".tmp: fsync failed: ", err);
  }
  ::close(fd_);
  fd_ = -1;
  const std::string tmp = path_ + ".tmp";
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string err = ErrnoText();
    ::unlink(tmp.c_str());
    return UnavailableError(path_, ": rename failed: ", err);
  }
  return OkStatus();
}

Status WriteFileAtomically(const std::string& path, std::span<const std::byte> bytes) {
  LOOM_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::Create(path));
  LOOM_RETURN_IF_ERROR(w.Write(bytes));
  return w.Commit();
}

}  // namespace loom::base
