// The structural GGUF parse.  Every count, length and offset read from the file is checked against
// the bytes that remain before it is used, in ordinary code (this runs on untrusted input).
#include "loom/model/gguf_reader.h"

#include <cinttypes>
#include <cstdio>
#include <limits>
#include <set>

#include "loom/base/byte_reader.h"

namespace loom::model {

namespace {

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08" PRIx32, v);
  return buf;
}

// Reads a u64 length-prefixed string of at most `max_bytes` bytes.
Status ReadGgufString(base::ByteReader& r, int64_t max_bytes, std::string* out) {
  const int64_t at = r.offset();
  uint64_t len = 0;
  LOOM_RETURN_IF_ERROR(r.Read(&len));
  if (len > static_cast<uint64_t>(r.remaining())) {
    return DataLossError("string at offset ", at, " has length ", len, " but only ", r.remaining(),
                         " bytes remain");
  }
  if (static_cast<int64_t>(len) > max_bytes) {
    return DataLossError("string at offset ", at, " has length ", len, " (limit ", max_bytes, ")");
  }
  return r.ReadString(static_cast<int64_t>(len), out);
}

Status ReadValue(base::ByteReader& r, GgufType type, GgufValue* v) {
  v->type = type;
  v->elem_type = type;
  v->count = 1;
  if (type == GgufType::kString) {
    v->strings.resize(1);
    return ReadGgufString(r, r.remaining(), &v->strings[0]);
  }
  if (type == GgufType::kArray) {
    uint32_t elem = 0;
    uint64_t count = 0;
    LOOM_RETURN_IF_ERROR(r.Read(&elem));
    LOOM_RETURN_IF_ERROR(r.Read(&count));
    v->elem_type = static_cast<GgufType>(elem);
    if (v->elem_type == GgufType::kArray) {
      return UnimplementedError("arrays of arrays are not supported");
    }
    // The smallest element: a fixed-size number, or an empty string (its u64 length).
    const int64_t elem_size = GgufTypeSize(v->elem_type);
    if (elem_size == 0 && v->elem_type != GgufType::kString) {
      return DataLossError("unknown array element type ", elem);
    }
    const int64_t min_bytes = elem_size > 0 ? elem_size : 8;
    if (count > static_cast<uint64_t>(r.remaining() / min_bytes)) {
      return DataLossError("array of ", count, " ", GgufTypeName(v->elem_type),
                           " elements cannot fit in the ", r.remaining(), " bytes that remain");
    }
    v->count = static_cast<int64_t>(count);
    if (v->elem_type == GgufType::kString) {
      v->strings.resize(static_cast<size_t>(count));
      for (std::string& s : v->strings) {
        LOOM_RETURN_IF_ERROR(ReadGgufString(r, r.remaining(), &s));
      }
      return OkStatus();
    }
    return r.ReadSpan(v->count * elem_size, &v->raw);
  }
  const int64_t size = GgufTypeSize(type);
  if (size == 0) return DataLossError("unknown value type ", static_cast<uint32_t>(type));
  return r.ReadSpan(size, &v->raw);
}

// a * b, or an error when it overflows int64.
bool MulOk(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

Status ReadTensorInfo(base::ByteReader& r, GgufTensor* t) {
  const int64_t at = r.offset();
  Status s = ReadGgufString(r, kGgufMaxTensorNameBytes, &t->name);
  if (!s.ok()) return s.WithContext(StrCat("tensor info at offset ", at));
  if (t->name.empty()) return DataLossError("tensor info at offset ", at, " has an empty name");
  const std::string where = "tensor '" + t->name + "'";
  uint32_t n_dims = 0;
  LOOM_RETURN_IF_ERROR(r.Read(&n_dims).WithContext(where));
  if (n_dims < 1 || n_dims > kGgufMaxDims) {
    return DataLossError(where, " has ", n_dims, " dimensions (expected 1 to ", kGgufMaxDims, ")");
  }
  t->ne.resize(n_dims);
  int64_t elements = 1;
  for (uint32_t i = 0; i < n_dims; ++i) {
    uint64_t d = 0;
    LOOM_RETURN_IF_ERROR(r.Read(&d).WithContext(where));
    if (d == 0 || d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return DataLossError(where, " has dimension ne[", i, "] = ", d);
    }
    t->ne[i] = static_cast<int64_t>(d);
    if (!MulOk(elements, t->ne[i], &elements)) {
      return DataLossError(where, " has too many elements (dimensions overflow 64 bits)");
    }
  }
  t->elements = elements;
  uint32_t type_id = 0;
  uint64_t offset = 0;
  LOOM_RETURN_IF_ERROR(r.Read(&type_id).WithContext(where));
  LOOM_RETURN_IF_ERROR(r.Read(&offset).WithContext(where));
  t->type = FindGgmlType(type_id);
  if (t->type == nullptr) return DataLossError(where, " has unknown tensor type id ", type_id);
  if (t->ne[0] % t->type->block_elems != 0) {
    return DataLossError(where, " has rows of ", t->ne[0], " values, not a whole number of ",
                         t->type->block_elems, "-value ", t->type->name, " blocks");
  }
  if (!MulOk(elements / t->type->block_elems, t->type->block_bytes, &t->size_bytes)) {
    return DataLossError(where, " is too large (its size overflows 64 bits)");
  }
  if (offset > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return DataLossError(where, " has data offset ", offset);
  }
  t->offset = static_cast<int64_t>(offset);
  return OkStatus();
}

}  // namespace

StatusOr<GgufFile> ParseGguf(std::span<const std::byte> bytes, std::string_view name_view) {
  const std::string name(name_view);
  base::ByteReader r(bytes);
  GgufFile f;
  f.file_size = static_cast<int64_t>(bytes.size());
  if (f.file_size == 0) return DataLossError(name, ": empty file");

  uint32_t magic = 0;
  Status s = r.Read(&magic);
  if (!s.ok()) return s.WithContext(name + ": reading the GGUF header");
  if (magic != kGgufMagic) {
    return InvalidArgumentError(name, ": not a GGUF file (magic ", Hex32(magic), ", expected ",
                                Hex32(kGgufMagic), " \"GGUF\")");
  }
  uint32_t version = 0;
  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
  s = r.Read(&version);
  if (!s.ok()) return s.WithContext(name + ": reading the GGUF header");
  if (version == 1) {
    return UnimplementedError(name, ": GGUF version 1 is not supported (only versions 2 and 3)");
  }
  if (version == 0x02000000u || version == 0x03000000u) {
    return UnimplementedError(name, ": big-endian GGUF files are not supported");
  }
  if (version != 2 && version != 3) {
    return DataLossError(name, ": unknown GGUF version ", version, " (expected 2 or 3)");
  }
  f.version = version;
  s = r.Read(&tensor_count);
  if (s.ok()) s = r.Read(&kv_count);
  if (!s.ok()) return s.WithContext(name + ": reading the GGUF header");
  // Each metadata entry takes at least 13 bytes (key length, type, one byte of value) and each
  // tensor info at least 32 (name length, n_dims, one dimension, type, offset).
  if (kv_count > static_cast<uint64_t>(r.remaining() / 13)) {
    return DataLossError(name, ": header claims ", kv_count, " metadata entries but only ",
                         r.remaining(), " bytes follow");
  }
  if (tensor_count > static_cast<uint64_t>(r.remaining() / 32)) {
    return DataLossError(name, ": header claims ", tensor_count, " tensors but only ",
                         r.remaining(), " bytes follow");
  }

  for (uint64_t i = 0; i < kv_count; ++i) {
    const int64_t at = r.offset();
    std::string key;
    s = ReadGgufString(r, kGgufMaxKeyBytes, &key);
    if (!s.ok()) return s.WithContext(StrCat(name, ": metadata entry ", i, " at offset ", at));
    if (key.empty()) return DataLossError(name, ": metadata entry ", i, " has an empty key");
    uint32_t type = 0;
    GgufValue value;
    s = r.Read(&type);
    if (s.ok()) s = ReadValue(r, static_cast<GgufType>(type), &value);
    if (!s.ok()) return s.WithContext(StrCat(name, ": metadata key '", key, "'"));
    if (f.metadata.count(key) != 0) {
      return DataLossError(name, ": duplicate metadata key '", key, "'");
    }
    f.metadata.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* a = f.Find("general.alignment"); a != nullptr) {
    const std::optional<int64_t> v = a->is_array() ? std::nullopt : a->IntAt(0);
    if (!v || *v < kGgufMinAlignment || *v > kGgufMaxAlignment || (*v & (*v - 1)) != 0) {
      return DataLossError(name, ": general.alignment is ", a->Summary(),
                           "; expected a power of two from ", kGgufMinAlignment, " to ",
                           kGgufMaxAlignment);
    }
    f.alignment = *v;
  }

  f.tensors.resize(static_cast<size_t>(tensor_count));
  std::set<std::string_view> names;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor& t = f.tensors[static_cast<size_t>(i)];
    s = ReadTensorInfo(r, &t);
    if (!s.ok()) return s.WithContext(name);
    if (!names.insert(t.name).second) {
      return DataLossError(name, ": duplicate tensor name '", t.name, "'");
    }
  }

  // The data section starts at the next multiple of the alignment (alignment <= 1 MiB and the
  // offset is below the file size, so this cannot overflow).
  f.data_offset = (r.offset() + f.alignment - 1) / f.alignment * f.alignment;
  for (const GgufTensor& t : f.tensors) {
    if (t.offset % f.alignment != 0) {
      return DataLossError(name, ": tensor '", t.name, "' has data offset ", t.offset,
                           ", not a multiple of the alignment ", f.alignment);
    }
    int64_t begin = 0;
    int64_t end = 0;
    if (__builtin_add_overflow(f.data_offset, t.offset, &begin)) {
      return DataLossError(name, ": tensor '", t.name, "' has data offset ", t.offset,
                           " beyond the end of file (file size ", f.file_size, ")");
    }
    if (__builtin_add_overflow(begin, t.size_bytes, &end) || end > f.file_size) {
      return DataLossError(name, ": tensor '", t.name, "' extends past end of file (offset ", begin,
                           ", size ", t.size_bytes, ", file size ", f.file_size, ")");
    }
  }
  return f;
}

}  // namespace loom::model
