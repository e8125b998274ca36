#include "loom/model/safetensors_writer.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

namespace loom::model {

SafetensorsWriter::~SafetensorsWriter() = default;

Status SafetensorsWriter::AddTensor(const std::string& name, StDType dtype,
                                    std::vector<int64_t> shape) {
  const std::string where = "safetensors writer: tensor '" + name + "'";
  Status s;
  if (begun_) {
    s = FailedPreconditionError(where, " declared after the header was written");
  } else if (name == "__metadata__" || !names_.insert(name).second) {
    s = InvalidArgumentError(where, " is declared twice (or uses a reserved name)");
  }
  int64_t bytes = StDTypeSize(dtype);
  for (int64_t d : shape) {
    if (s.ok() && (d < 0 || __builtin_mul_overflow(bytes, d, &bytes))) {
      s = InvalidArgumentError(where, " has a negative or overflowing dimension ", d);
    }
  }
  if (!s.ok()) {
    if (declare_error_.ok()) declare_error_ = s;
    return s;
  }
  tensors_.push_back({name, dtype, std::move(shape), bytes, 0});
  return OkStatus();
}

Status SafetensorsWriter::Begin() {
  LOOM_RETURN_IF_ERROR(declare_error_);
  if (begun_) return FailedPreconditionError("safetensors writer: Begin called twice");
  order_.resize(tensors_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
  std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
    const int64_t sa = StDTypeSize(tensors_[a].dtype), sb = StDTypeSize(tensors_[b].dtype);
    return sa != sb ? sa > sb : tensors_[a].name < tensors_[b].name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  int64_t offset = 0;
  for (size_t i : order_) {
    Tensor& t = tensors_[i];
    t.begin = offset;
    offset += t.size_bytes;
    header[t.name] = {{"dtype", std::string(StDTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {t.begin, offset}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  begun_ = true;
  LOOM_RETURN_IF_ERROR(Emit({reinterpret_cast<const std::byte*>(&n), sizeof(n)}));
  LOOM_RETURN_IF_ERROR(Emit({reinterpret_cast<const std::byte*>(text.data()), text.size()}));
  // Zero-byte tensors need no data: skip past them.
  while (current_ < order_.size() && tensors_[order_[current_]].size_bytes == 0) ++current_;
  return OkStatus();
}

Status SafetensorsWriter::BeginFile(const std::string& path) {
  where_ = path;
  LOOM_ASSIGN_OR_RETURN(base::AtomicFileWriter w, base::AtomicFileWriter::Create(path));
  file_ = std::make_unique<base::AtomicFileWriter>(std::move(w));
  return Begin();
}

Status SafetensorsWriter::BeginMemory(std::vector<std::byte>* out) {
  where_ = "memory";
  out->clear();
  memory_ = out;
  return Begin();
}

Status SafetensorsWriter::Emit(std::span<const std::byte> bytes) {
  if (file_ != nullptr) return file_->Write(bytes);
  memory_->insert(memory_->end(), bytes.begin(), bytes.end());
  return OkStatus();
}

Status SafetensorsWriter::WriteTensorData(std::span<const std::byte> bytes) {
  if (!begun_) return FailedPreconditionError("safetensors writer: data written before Begin");
  if (bytes.empty()) return OkStatus();
  if (current_ >= order_.size()) {
    return FailedPreconditionError(where_, ": ", bytes.size(),
                                   " bytes written after the last tensor");
  }
  const Tensor& t = tensors_[order_[current_]];
  const int64_t n = static_cast<int64_t>(bytes.size());
  if (current_done_ + n > t.size_bytes) {
    return InvalidArgumentError(where_, ": a piece of ", n, " bytes runs past tensor '", t.name,
                                "' (", t.size_bytes - current_done_, " bytes left)");
  }
  LOOM_RETURN_IF_ERROR(Emit(bytes));
  current_done_ += n;
  if (current_done_ == t.size_bytes) {
    current_done_ = 0;
    ++current_;
    while (current_ < order_.size() && tensors_[order_[current_]].size_bytes == 0) ++current_;
  }
  return OkStatus();
}

Status SafetensorsWriter::Finish() {
  if (!begun_) return FailedPreconditionError("safetensors writer: Finish before Begin");
  if (current_ < order_.size()) {
    const Tensor& t = tensors_[order_[current_]];
    return FailedPreconditionError(where_, ": tensor '", t.name, "' has ", current_done_, " of ",
                                   t.size_bytes, " bytes written");
  }
  if (file_ != nullptr) {
    LOOM_RETURN_IF_ERROR(file_->Commit());
    file_.reset();
  }
  return OkStatus();
}

}  // namespace loom::model
