#include "loom/model/gguf_writer.h"

#include <algorithm>
#include <cstring>

namespace loom::model {

GgufWriter::GgufWriter(uint32_t version) : version_(version) {}
GgufWriter::~GgufWriter() = default;

template <class T>
void GgufWriter::Put(const T& v) {
  const size_t at = meta_.size();
  meta_.resize(at + sizeof(T));
  std::memcpy(meta_.data() + at, &v, sizeof(T));
}

void GgufWriter::PutString(const std::string& s) {
  Put<uint64_t>(s.size());
  const size_t at = meta_.size();
  meta_.resize(at + s.size());
  if (!s.empty()) std::memcpy(meta_.data() + at, s.data(), s.size());
}

void GgufWriter::BeginKey(const std::string& key, GgufType type) {
  if (!keys_.insert(key).second && duplicate_key_.empty()) duplicate_key_ = key;
  ++kv_count_;
  PutString(key);
  Put<uint32_t>(static_cast<uint32_t>(type));
}

void GgufWriter::AddU8(const std::string& k, uint8_t v) {
  BeginKey(k, GgufType::kUint8);
  Put(v);
}
void GgufWriter::AddI8(const std::string& k, int8_t v) {
  BeginKey(k, GgufType::kInt8);
  Put(v);
}
void GgufWriter::AddU16(const std::string& k, uint16_t v) {
  BeginKey(k, GgufType::kUint16);
  Put(v);
}
void GgufWriter::AddI16(const std::string& k, int16_t v) {
  BeginKey(k, GgufType::kInt16);
  Put(v);
}
void GgufWriter::AddU32(const std::string& k, uint32_t v) {
  BeginKey(k, GgufType::kUint32);
  Put(v);
}
void GgufWriter::AddI32(const std::string& k, int32_t v) {
  BeginKey(k, GgufType::kInt32);
  Put(v);
}
void GgufWriter::AddU64(const std::string& k, uint64_t v) {
  BeginKey(k, GgufType::kUint64);
  Put(v);
}
void GgufWriter::AddI64(const std::string& k, int64_t v) {
  BeginKey(k, GgufType::kInt64);
  Put(v);
}
void GgufWriter::AddF32(const std::string& k, float v) {
  BeginKey(k, GgufType::kFloat32);
  Put(v);
}
void GgufWriter::AddF64(const std::string& k, double v) {
  BeginKey(k, GgufType::kFloat64);
  Put(v);
}
void GgufWriter::AddBool(const std::string& k, bool v) {
  BeginKey(k, GgufType::kBool);
  Put<uint8_t>(v ? 1 : 0);
}
void GgufWriter::AddString(const std::string& k, const std::string& v) {
  BeginKey(k, GgufType::kString);
  PutString(v);
}

template <class T>
void GgufWriter::AddNumberArray(const std::string& key, GgufType type, std::span<const T> v) {
  BeginKey(key, GgufType::kArray);
  Put<uint32_t>(static_cast<uint32_t>(type));
  Put<uint64_t>(v.size());
  const size_t at = meta_.size();
  meta_.resize(at + v.size_bytes());
  if (!v.empty()) std::memcpy(meta_.data() + at, v.data(), v.size_bytes());
}

void GgufWriter::AddArray(const std::string& k, std::span<const uint8_t> v) {
  AddNumberArray(k, GgufType::kUint8, v);
}
void GgufWriter::AddArray(const std::string& k, std::span<const int8_t> v) {
  AddNumberArray(k, GgufType::kInt8, v);
}
void GgufWriter::AddArray(const std::string& k, std::span<const uint16_t> v) {
  AddNumberArray(k, GgufType::kUint16, v);
}
void GgufWriter::AddArray(const std::string& k, std::span<const int16_t> v) {
  AddNumberArray(k, GgufType::kInt16, v);
}
void GgufWriter::AddArray(const std::string& k, std::span<const uint32_t> v) {
  AddNumberArray(k, GgufType::kUint32, v);
}
void GgufWriter::AddArray(const std::string& k, std::span<const int32_t> v) {
  AddNumberArray(k, GgufType::kInt32, v);
}
void GgufWriter::AddArray(const std::string& k, std::span<const uint64_t> v) {
  AddNumberArray(k, GgufType::kUint64, v);
}
void GgufWriter::AddArray(const std::string& k, std::span<const int64_t> v) {
  AddNumberArray(k, GgufType::kInt64, v);
}
void GgufWriter::AddArray(const std::string& k, std::span<const float> v) {
  AddNumberArray(k, GgufType::kFloat32, v);
}
void GgufWriter::AddArray(const std::string& k, std::span<const double> v) {
  AddNumberArray(k, GgufType::kFloat64, v);
}

void GgufWriter::AddBoolArray(const std::string& key, std::span<const bool> v) {
  BeginKey(key, GgufType::kArray);
  Put<uint32_t>(static_cast<uint32_t>(GgufType::kBool));
  Put<uint64_t>(v.size());
  for (bool b : v) Put<uint8_t>(b ? 1 : 0);
}

void GgufWriter::AddStringArray(const std::string& key, std::span<const std::string> v) {
  BeginKey(key, GgufType::kArray);
  Put<uint32_t>(static_cast<uint32_t>(GgufType::kString));
  Put<uint64_t>(v.size());
  for (const std::string& s : v) PutString(s);
}

Status GgufWriter::SetAlignment(int64_t alignment) {
  if (alignment < 8 || alignment > (int64_t{1} << 20) || (alignment & (alignment - 1)) != 0) {
    return InvalidArgumentError("gguf writer: alignment ", alignment,
                                " is not a power of two from 8 to 1 MiB");
  }
  if (!tensors_.empty()) {
    return FailedPreconditionError("gguf writer: SetAlignment after AddTensor");
  }
  alignment_ = alignment;
  if (alignment != kGgufDefaultAlignment)
    AddU32("general.alignment", static_cast<uint32_t>(alignment));
  return OkStatus();
}

Status GgufWriter::AddTensor(const std::string& name, kernels::DType type,
                             std::vector<int64_t> shape) {
  return AddTensorRaw(name, GgmlTypeId(type), std::move(shape));
}

Status GgufWriter::AddTensorRaw(const std::string& name, uint32_t ggml_type,
                                std::vector<int64_t> shape) {
  if (begun_) return FailedPreconditionError("gguf writer: AddTensor '", name, "' after Begin");
  const GgmlTypeInfo* info = FindGgmlType(ggml_type);
  if (info == nullptr) {
    return InvalidArgumentError("gguf writer: tensor '", name, "' has unknown type ", ggml_type);
  }
  if (name.empty() || !tensor_names_.insert(name).second) {
    return InvalidArgumentError("gguf writer: tensor name '", name, "' is empty or repeated");
  }
  if (shape.empty() || shape.size() > 4) {
    return InvalidArgumentError("gguf writer: tensor '", name, "' has ", shape.size(),
                                " dimensions (1 to 4 allowed)");
  }
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d <= 0 || __builtin_mul_overflow(elements, d, &elements)) {
      return InvalidArgumentError("gguf writer: tensor '", name, "' has a bad shape");
    }
  }
  if (shape.back() % info->block_elems != 0) {
    return InvalidArgumentError("gguf writer: tensor '", name, "' rows of ", shape.back(),
                                " values are not whole ", info->name, " blocks");
  }
  Tensor t;
  t.name = name;
  t.ggml_type = ggml_type;
  t.shape = std::move(shape);
  t.size_bytes = elements / info->block_elems * info->block_bytes;
  t.offset = (data_size_ + alignment_ - 1) / alignment_ * alignment_;
  data_size_ = t.offset + t.size_bytes;
  tensors_.push_back(std::move(t));
  return OkStatus();
}

std::vector<std::byte> GgufWriter::Header() const {
  std::vector<std::byte> out;
  auto put = [&out](const void* p, size_t n) {
    const size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, p, n);
  };
  const uint32_t magic = kGgufMagic;
  const uint64_t n_tensors = tensors_.size();
  const uint64_t n_kv = static_cast<uint64_t>(kv_count_);
  put(&magic, 4);
  put(&version_, 4);
  put(&n_tensors, 8);
  put(&n_kv, 8);
  put(meta_.data(), meta_.size());
  for (const Tensor& t : tensors_) {
    const uint64_t len = t.name.size();
    put(&len, 8);
    put(t.name.data(), t.name.size());
    const uint32_t n_dims = static_cast<uint32_t>(t.shape.size());
    put(&n_dims, 4);
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) {  // GGUF: innermost first
      const uint64_t d = static_cast<uint64_t>(*it);
      put(&d, 8);
    }
    put(&t.ggml_type, 4);
    const uint64_t off = static_cast<uint64_t>(t.offset);
    put(&off, 8);
  }
  out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, std::byte{0});
  return out;
}

int64_t GgufWriter::planned_file_size() const {
  return static_cast<int64_t>(Header().size()) + data_size_;
}

Status GgufWriter::Begin() {
  if (begun_) return FailedPreconditionError("gguf writer: Begin called twice");
  if (!duplicate_key_.empty()) {
    return InvalidArgumentError("gguf writer: metadata key '", duplicate_key_, "' added twice");
  }
  begun_ = true;
  const std::vector<std::byte> header = Header();
  return Emit(header);
}

Status GgufWriter::BeginFile(const std::string& path) {
  where_ = path;
  LOOM_ASSIGN_OR_RETURN(base::AtomicFileWriter w, base::AtomicFileWriter::Create(path));
  file_ = std::make_unique<base::AtomicFileWriter>(std::move(w));
  return Begin();
}

Status GgufWriter::BeginMemory(std::vector<std::byte>* out) {
  where_ = "(memory)";
  memory_ = out;
  memory_->clear();
  return Begin();
}

Status GgufWriter::Emit(std::span<const std::byte> bytes) {
  if (file_) return file_->Write(bytes);
  if (memory_ != nullptr) {
    memory_->insert(memory_->end(), bytes.begin(), bytes.end());
    return OkStatus();
  }
  return FailedPreconditionError("gguf writer: no output");
}

Status GgufWriter::WriteTensorData(std::span<const std::byte> bytes) {
  if (!begun_) return FailedPreconditionError("gguf writer: tensor data before Begin");
  int64_t n = static_cast<int64_t>(bytes.size());
  if (n == 0) return OkStatus();
  if (current_ >= tensors_.size()) {
    return FailedPreconditionError(where_, ": tensor data after the last tensor");
  }
  const Tensor& t = tensors_[current_];
  if (current_done_ + n > t.size_bytes) {
    return InvalidArgumentError(where_, ": ", n, " bytes for tensor '", t.name,
                                "' would exceed its ", t.size_bytes, " bytes (", current_done_,
                                " written)");
  }
  if (current_done_ == 0 && data_written_ < t.offset) {
    static constexpr std::byte kZeros[256] = {};
    while (data_written_ < t.offset) {
      const int64_t pad = std::min<int64_t>(t.offset - data_written_, sizeof(kZeros));
      LOOM_RETURN_IF_ERROR(Emit({kZeros, static_cast<size_t>(pad)}));
      data_written_ += pad;
    }
  }
  LOOM_RETURN_IF_ERROR(Emit(bytes));
  current_done_ += n;
  data_written_ += n;
  if (current_done_ == t.size_bytes) {
    ++current_;
    current_done_ = 0;
  }
  return OkStatus();
}

Status GgufWriter::Finish() {
  if (!begun_) return FailedPreconditionError("gguf writer: Finish before Begin");
  if (current_ < tensors_.size()) {
    return FailedPreconditionError(where_, ": tensor '", tensors_[current_].name, "' got ",
                                   current_done_, " of ", tensors_[current_].size_bytes, " bytes (",
                                   tensors_.size() - current_, " tensors unwritten)");
  }
  if (file_) {
    Status s = file_->Commit();
    file_.reset();
    return s;
  }
  memory_ = nullptr;
  return OkStatus();
}

}  // namespace loom::model
