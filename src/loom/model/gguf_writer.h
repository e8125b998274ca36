// Writing GGUF files (version 3 by default, or 2) in a stream: declare the metadata and the tensor
// table, then Begin() writes the header and the tensor data follows tensor by tensor, in pieces if
// wanted, so a multi-gigabyte model never has to be held in memory.  Files go through
// base::AtomicFileWriter (a .tmp renamed on Finish), or into a byte vector (tests, fuzz seeds).
//
//   GgufWriter w;
//   w.AddString("general.architecture", "llama");
//   w.AddU32("llama.block_count", 2);
//   LOOM_RETURN_IF_ERROR(w.AddTensor("token_embd.weight", DType::kQ8_0, {vocab, dim}));
//   LOOM_RETURN_IF_ERROR(w.BeginFile("model.gguf"));
//   LOOM_RETURN_IF_ERROR(w.WriteTensorData(bytes));   // as many pieces as needed, in order
//   LOOM_RETURN_IF_ERROR(w.Finish());
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "loom/base/mapped_file.h"
#include "loom/base/status.h"
#include "loom/kernels/dtype.h"
#include "loom/model/gguf.h"

namespace loom::model {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3);
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;
  ~GgufWriter();

  // Metadata, written in the order added.  A key added twice makes Begin*() fail.
  void AddU8(const std::string& key, uint8_t v);
  void AddI8(const std::string& key, int8_t v);
  void AddU16(const std::string& key, uint16_t v);
  void AddI16(const std::string& key, int16_t v);
  void AddU32(const std::string& key, uint32_t v);
  void AddI32(const std::string& key, int32_t v);
  void AddU64(const std::string& key, uint64_t v);
  void AddI64(const std::string& key, int64_t v);
  void AddF32(const std::string& key, float v);
  void AddF64(const std::string& key, double v);
  void AddBool(const std::string& key, bool v);
  void AddString(const std::string& key, const std::string& v);
  void AddArray(const std::string& key, std::span<const uint8_t> v);
  void AddArray(const std::string& key, std::span<const int8_t> v);
  void AddArray(const std::string& key, std::span<const uint16_t> v);
  void AddArray(const std::string& key, std::span<const int16_t> v);
  void AddArray(const std::string& key, std::span<const uint32_t> v);
  void AddArray(const std::string& key, std::span<const int32_t> v);
  void AddArray(const std::string& key, std::span<const uint64_t> v);
  void AddArray(const std::string& key, std::span<const int64_t> v);
  void AddArray(const std::string& key, std::span<const float> v);
  void AddArray(const std::string& key, std::span<const double> v);
  void AddBoolArray(const std::string& key, std::span<const bool> v);
  void AddStringArray(const std::string& key, std::span<const std::string> v);

  // Tensor alignment (a power of two, 8 to 1 MiB); also writes general.alignment unless it is the
  // default 32.  Call before AddTensor.
  Status SetAlignment(int64_t alignment);

  // Declares the next tensor: `shape` outermost first (rows, cols), stored in `type`.  The raw ggml
  // type id form also accepts types the kernels do not support (tests of the reader).
  Status AddTensor(const std::string& name, kernels::DType type, std::vector<int64_t> shape);
  Status AddTensorRaw(const std::string& name, uint32_t ggml_type, std::vector<int64_t> shape);

  // Writes the header, metadata and tensor table to `path` (through `path`.tmp), or to *out.
  Status BeginFile(const std::string& path);
  Status BeginMemory(std::vector<std::byte>* out);

  // Appends bytes of the tensor data, in declaration order; a tensor may be written in any number
  // of pieces, and pieces may not straddle two tensors.  Alignment padding is added automatically.
  Status WriteTensorData(std::span<const std::byte> bytes);

  // Checks that every tensor was written in full, then commits the file (fsync + rename).
  Status Finish();

  // Bytes of the whole file as declared (header + data), valid once every tensor is declared.
  int64_t planned_file_size() const;
  int64_t tensor_size(size_t index) const { return tensors_[index].size_bytes; }
  size_t tensor_count() const { return tensors_.size(); }

 private:
  struct Tensor {
    std::string name;
    uint32_t ggml_type;
    std::vector<int64_t> shape;
    int64_t offset;  // relative to the data section
    int64_t size_bytes;
  };

  void BeginKey(const std::string& key, GgufType type);
  template <class T>
  void Put(const T& v);
  void PutString(const std::string& s);
  template <class T>
  void AddNumberArray(const std::string& key, GgufType type, std::span<const T> v);
  std::vector<std::byte> Header() const;
  Status Begin();
  Status Emit(std::span<const std::byte> bytes);

  uint32_t version_;
  int64_t alignment_ = kGgufDefaultAlignment;
  std::vector<std::byte> meta_;  // serialized metadata entries
  int64_t kv_count_ = 0;
  std::set<std::string> keys_;
  std::string duplicate_key_;
  std::vector<Tensor> tensors_;
  std::set<std::string> tensor_names_;
  int64_t data_size_ = 0;  // bytes of the data section (with padding between tensors)

  // Output state.
  std::unique_ptr<base::AtomicFileWriter> file_;
  std::vector<std::byte>* memory_ = nullptr;
  bool begun_ = false;
  size_t current_ = 0;        // tensor being written
  int64_t current_done_ = 0;  // bytes of it written so far
  int64_t data_written_ = 0;  // bytes of the data section written so far
  std::string where_;         // path for errors
};

}  // namespace loom::model
