#include "loom/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace loom::model {

namespace {

using Json = nlohmann::json;

struct DTypeEntry {
  StDType type;
  std::string_view name;
  int64_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {StDType::kBool, "BOOL", 1},      {StDType::kU8, "U8", 1},          {StDType::kI8, "I8", 1},
    {StDType::kF8E5M2, "F8_E5M2", 1}, {StDType::kF8E4M3, "F8_E4M3", 1}, {StDType::kI16, "I16", 2},
    {StDType::kU16, "U16", 2},        {StDType::kF16, "F16", 2},        {StDType::kBF16, "BF16", 2},
    {StDType::kI32, "I32", 4},        {StDType::kU32, "U32", 4},        {StDType::kF32, "F32", 4},
    {StDType::kF64, "F64", 8},        {StDType::kI64, "I64", 8},        {StDType::kU64, "U64", 8},
};

// Printable form of a key from the file (which may hold any bytes): quoted, shortened.
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += '?';
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMax) out += "...";
  return out + "'";
}

// A JSON value that must be a non-negative integer in int64 range.
bool ToInt64(const Json& v, int64_t* out) {
  if (!v.is_number_unsigned()) return false;
  const uint64_t u = v.get<uint64_t>();
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = static_cast<int64_t>(u);
  return true;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Status ParseTensorEntry(const std::string& file, const std::string& key, const Json& v,
                        int64_t data_size, SafetensorsTensor* t) {
  const std::string where = StrCat(file, ": tensor ", Quote(key));
  if (!v.is_object()) {
    return DataLossError(where, " is a JSON ", v.type_name(), ", expected an object");
  }
  const auto dtype_it = v.find("dtype");
  const auto shape_it = v.find("shape");
  const auto offsets_it = v.find("data_offsets");
  if (dtype_it == v.end() || shape_it == v.end() || offsets_it == v.end()) {
    return DataLossError(where, " lacks ",
                         dtype_it == v.end()   ? "\"dtype\""
                         : shape_it == v.end() ? "\"shape\""
                                               : "\"data_offsets\"");
  }
  if (!dtype_it->is_string()) {
    return DataLossError(where, " has a dtype that is a JSON ", dtype_it->type_name(),
                         ", expected a string");
  }
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  const std::optional<StDType> dtype = ParseStDType(dtype_name);
  if (!dtype) {
    return UnimplementedError(where, " has dtype ", Quote(dtype_name),
                              ", which is not supported (known: BOOL, U8, I8, F8_E5M2, F8_E4M3, "
                              "I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64)");
  }
  t->name = key;
  t->dtype = *dtype;

  if (!shape_it->is_array()) {
    return DataLossError(where, " has a shape that is a JSON ", shape_it->type_name(),
                         ", expected an array of sizes");
  }
  if (static_cast<int64_t>(shape_it->size()) > kSafetensorsMaxRank) {
    return DataLossError(where, " has ", shape_it->size(), " dimensions (at most ",
                         kSafetensorsMaxRank, " are accepted)");
  }
  int64_t elements = 1;
  for (size_t i = 0; i < shape_it->size(); ++i) {
    int64_t d = 0;
    if (!ToInt64((*shape_it)[i], &d)) {
      return DataLossError(where, " has shape[", i, "] = ", (*shape_it)[i].dump(),
                           ", expected a non-negative integer");
    }
    t->shape.push_back(d);
    if (__builtin_mul_overflow(elements, d, &elements)) {
      return DataLossError(where, " has shape ", shape_it->dump(),
                           ", whose size overflows 64 bits");
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(elements, StDTypeSize(*dtype), &bytes)) {
    return DataLossError(where, " has shape ", ShapeText(t->shape), " of ", dtype_name,
                         ", whose byte size overflows 64 bits");
  }

  if (!offsets_it->is_array() || offsets_it->size() != 2) {
    return DataLossError(where, " has data_offsets ", offsets_it->dump(),
                         ", expected [begin, end]");
  }
  if (!ToInt64((*offsets_it)[0], &t->begin) || !ToInt64((*offsets_it)[1], &t->end)) {
    return DataLossError(where, " has data_offsets ", offsets_it->dump(),
                         ", expected two non-negative integers");
  }
  if (t->begin > t->end) {
    return DataLossError(where, " has data_offsets [", t->begin, ", ", t->end,
                         "] that end before they begin");
  }
  if (t->end > data_size) {
    return DataLossError(where, " has data_offsets [", t->begin, ", ", t->end,
                         "] past the end of the ", data_size, "-byte data section");
  }
  if (t->end - t->begin != bytes) {
    return DataLossError(where, " is ", dtype_name, " ", ShapeText(t->shape), " (", bytes,
                         " bytes) but its data_offsets [", t->begin, ", ", t->end, "] hold ",
                         t->end - t->begin, " bytes");
  }
  return OkStatus();
}

Status ParseMetadata(const std::string& file, const Json& v, SafetensorsFile* out) {
  if (v.is_null()) return OkStatus();
  if (!v.is_object()) {
    return DataLossError(file, ": __metadata__ is a JSON ", v.type_name(), ", expected an object");
  }
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) {
      return DataLossError(file, ": __metadata__ value ", Quote(key), " is a JSON ",
                           value.type_name(), ", expected a string");
    }
    out->metadata[key] = value.get<std::string>();
  }
  return OkStatus();
}

// The tensors must cover [0, data_size) exactly, as the reference implementation requires.
Status CheckTiling(const std::string& file, const SafetensorsFile& f, int64_t data_size) {
  std::vector<const SafetensorsTensor*> order;
  order.reserve(f.tensors.size());
  for (const auto& [name, t] : f.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const SafetensorsTensor* a, const SafetensorsTensor* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  int64_t covered = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor* t : order) {
    if (t->begin < covered) {
      return DataLossError(file, ": tensors ", Quote(prev->name), " [", prev->begin, ", ",
                           prev->end, ") and ", Quote(t->name), " [", t->begin, ", ", t->end,
                           ") overlap");
    }
    if (t->begin > covered) {
      return DataLossError(file, ": no tensor covers bytes [", covered, ", ", t->begin,
                           ") of the data section (before ", Quote(t->name), ")");
    }
    covered = t->end;
    prev = t;
  }
  if (covered != data_size) {
    return DataLossError(file, ": the tensors end at byte ", covered,
                         " of the data section but it has ", data_size, " bytes");
  }
  return OkStatus();
}

}  // namespace

std::string_view StDTypeName(StDType type) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.type == type) return e.name;
  }
  return "?";
}

int64_t StDTypeSize(StDType type) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.type == type) return e.size;
  }
  return 1;
}

std::optional<StDType> ParseStDType(std::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.name == name) return e.type;
  }
  return std::nullopt;
}

int64_t SafetensorsTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

StatusOr<SafetensorsFile> ParseSafetensors(std::span<const std::byte> bytes,
                                           const std::string& name) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size < 8) {
    return DataLossError(name, ": ", size,
                         " bytes is too short for a safetensors file (8-byte header length)");
  }
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), sizeof(n));
  if (n > static_cast<uint64_t>(kSafetensorsMaxHeaderBytes)) {
    return DataLossError(name, ": header length ", n, " exceeds the limit of ",
                         kSafetensorsMaxHeaderBytes, " bytes (not a safetensors file?)");
  }
  if (static_cast<int64_t>(n) > size - 8) {
    return DataLossError(name, ": header length ", n, " runs past the end of the ", size,
                         "-byte file");
  }
  SafetensorsFile f;
  f.header_bytes = static_cast<int64_t>(n);
  f.data_offset = 8 + f.header_bytes;
  const int64_t data_size = size - f.data_offset;
  const auto* header = reinterpret_cast<const char*>(bytes.data() + 8);
  if (n < 2 || header[0] != '{') {
    return DataLossError(name, ": the header does not start with '{' (not a safetensors file?)");
  }
  Json root;
  try {
    root = Json::parse(header, header + n);
  } catch (const Json::exception& e) {
    return DataLossError(name, ": the header is not valid JSON: ", e.what());
  }
  if (!root.is_object()) {
    return DataLossError(name, ": the header is a JSON ", root.type_name(), ", expected an object");
  }
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      LOOM_RETURN_IF_ERROR(ParseMetadata(name, value, &f));
      continue;
    }
    SafetensorsTensor t;
    LOOM_RETURN_IF_ERROR(ParseTensorEntry(name, key, value, data_size, &t));
    t.file_offset = f.data_offset + t.begin;
    t.data =
        bytes.subspan(static_cast<size_t>(t.file_offset), static_cast<size_t>(t.end - t.begin));
    f.tensors.emplace(key, std::move(t));
  }
  LOOM_RETURN_IF_ERROR(CheckTiling(name, f, data_size));
  return f;
}

}  // namespace loom::model
