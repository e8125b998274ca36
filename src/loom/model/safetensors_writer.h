// Writing safetensors files in a stream: declare every tensor, then Begin() writes the header and
// the tensor data follows tensor by tensor (in pieces if wanted), in the order WriteOrder() gives,
// so a large model never has to be held in memory.  Like the reference writer, tensors are laid
// out by decreasing element size (then name) and the header is padded with spaces to a multiple of
// 8 bytes, so every tensor is aligned to its element size when the file is mapped.
//
//   SafetensorsWriter w;
//   LOOM_RETURN_IF_ERROR(w.AddTensor("model.norm.weight", StDType::kF32, {dim}));
//   LOOM_RETURN_IF_ERROR(w.BeginFile("model.safetensors"));
//   for (size_t i : w.WriteOrder()) LOOM_RETURN_IF_ERROR(w.WriteTensorData(bytes of tensor i));
//   LOOM_RETURN_IF_ERROR(w.Finish());
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "loom/base/mapped_file.h"
#include "loom/base/status.h"
#include "loom/model/safetensors.h"

namespace loom::model {

class SafetensorsWriter {
 public:
  SafetensorsWriter() = default;
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  ~SafetensorsWriter();

  // "__metadata__" entries.
  void AddMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  // Declares a tensor (`shape` outermost first).  Names must be unique and not "__metadata__".
  Status AddTensor(const std::string& name, StDType dtype, std::vector<int64_t> shape);

  // Writes the header to `path` (through `path`.tmp), or to *out.
  Status BeginFile(const std::string& path);
  Status BeginMemory(std::vector<std::byte>* out);

  // Indices (declaration order) of the tensors in the order their data must be written.
  const std::vector<size_t>& WriteOrder() const { return order_; }
  int64_t tensor_size(size_t index) const { return tensors_[index].size_bytes; }
  size_t tensor_count() const { return tensors_.size(); }

  // Appends bytes of the tensor data in WriteOrder(); a piece may not straddle two tensors.
  Status WriteTensorData(std::span<const std::byte> bytes);

  // Checks that every tensor was written in full, then commits the file (fsync + rename).
  Status Finish();

 private:
  struct Tensor {
    std::string name;
    StDType dtype;
    std::vector<int64_t> shape;
    int64_t size_bytes = 0;
    int64_t begin = 0;  // offset in the data section
  };

  Status Begin();
  Status Emit(std::span<const std::byte> bytes);

  std::map<std::string, std::string> metadata_;
  std::vector<Tensor> tensors_;
  std::set<std::string> names_;
  Status declare_error_;
  std::vector<size_t> order_;

  std::unique_ptr<base::AtomicFileWriter> file_;
  std::vector<std::byte>* memory_ = nullptr;
  bool begun_ = false;
  size_t current_ = 0;        // position in order_ of the tensor being written
  int64_t current_done_ = 0;  // bytes of it written so far
  std::string where_;
};

}  // namespace loom::model
