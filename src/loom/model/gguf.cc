#include "loom/model/gguf.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

namespace loom::model {

namespace {

using kernels::DType;

// Block geometry of every ggml type id defined so far (ggml.h / ggml-common.h).  Ids 4, 5 and
// 31-33 were removed from ggml and are unknown here.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "f32", 1, 4, DType::kF32},          {1, "f16", 1, 2, DType::kF16},
    {2, "q4_0", 32, 18, DType::kQ4_0},      {3, "q4_1", 32, 20, std::nullopt},
    {6, "q5_0", 32, 22, std::nullopt},      {7, "q5_1", 32, 24, std::nullopt},
    {8, "q8_0", 32, 34, DType::kQ8_0},      {9, "q8_1", 32, 36, std::nullopt},
    {10, "q2_k", 256, 84, std::nullopt},    {11, "q3_k", 256, 110, std::nullopt},
    {12, "q4_k", 256, 144, DType::kQ4_K},   {13, "q5_k", 256, 176, DType::kQ5_K},
    {14, "q6_k", 256, 210, DType::kQ6_K},   {15, "q8_k", 256, 292, std::nullopt},
    {16, "iq2_xxs", 256, 66, std::nullopt}, {17, "iq2_xs", 256, 74, std::nullopt},
    {18, "iq3_xxs", 256, 98, std::nullopt}, {19, "iq1_s", 256, 50, std::nullopt},
    {20, "iq4_nl", 32, 18, std::nullopt},   {21, "iq3_s", 256, 110, std::nullopt},
    {22, "iq2_s", 256, 82, std::nullopt},   {23, "iq4_xs", 256, 136, std::nullopt},
    {24, "i8", 1, 1, std::nullopt},         {25, "i16", 1, 2, std::nullopt},
    {26, "i32", 1, 4, std::nullopt},        {27, "i64", 1, 8, std::nullopt},
    {28, "f64", 1, 8, std::nullopt},        {29, "iq1_m", 256, 56, std::nullopt},
    {30, "bf16", 1, 2, DType::kBF16},       {34, "tq1_0", 256, 54, std::nullopt},
    {35, "tq2_0", 256, 66, std::nullopt},   {39, "mxfp4", 32, 17, std::nullopt},
};

template <class T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Appends s to out with control characters escaped, cut after `max_bytes`.
void AppendQuoted(const std::string& s, size_t max_bytes, std::string* out) {
  out->push_back('"');
  const size_t n = s.size() < max_bytes ? s.size() : max_bytes;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      *out += "\\n";
    } else if (c == '\t') {
      *out += "\\t";
    } else if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      *out += buf;
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
  if (n < s.size()) *out += "... (" + std::to_string(s.size()) + " bytes)";
}

}  // namespace

std::string GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
      return "u8";
    case GgufType::kInt8:
      return "i8";
    case GgufType::kUint16:
      return "u16";
    case GgufType::kInt16:
      return "i16";
    case GgufType::kUint32:
      return "u32";
    case GgufType::kInt32:
      return "i32";
    case GgufType::kFloat32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "u64";
    case GgufType::kInt64:
      return "i64";
    case GgufType::kFloat64:
      return "f64";
  }
  return "type#" + std::to_string(static_cast<uint32_t>(type));
}

int64_t GgufTypeSize(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

const GgmlTypeInfo* FindGgmlType(uint32_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

uint32_t GgmlTypeId(kernels::DType type) {
  switch (type) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ8_0:
      return 8;
    case DType::kBF16:
      return 30;
    case DType::kQ4_K:
      return 12;
    case DType::kQ5_K:
      return 13;
    case DType::kQ6_K:
      return 14;
    default:  // MLX types have no GGUF form
      return 0;
  }
}

bool GgufValue::is_integer() const {
  switch (elem_type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kBool:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const {
  return elem_type == GgufType::kFloat32 || elem_type == GgufType::kFloat64;
}

std::optional<int64_t> GgufValue::IntAt(int64_t i) const {
  if (!is_integer() || i < 0 || i >= count) return std::nullopt;
  const int64_t size = GgufTypeSize(elem_type);
  if (static_cast<int64_t>(raw.size()) < (i + 1) * size) return std::nullopt;
  const std::byte* p = raw.data() + i * size;
  switch (elem_type) {
    case GgufType::kUint8:
      return Load<uint8_t>(p);
    case GgufType::kInt8:
      return Load<int8_t>(p);
    case GgufType::kBool:
      return Load<uint8_t>(p) != 0 ? 1 : 0;
    case GgufType::kUint16:
      return Load<uint16_t>(p);
    case GgufType::kInt16:
      return Load<int16_t>(p);
    case GgufType::kUint32:
      return Load<uint32_t>(p);
    case GgufType::kInt32:
      return Load<int32_t>(p);
    case GgufType::kInt64:
      return Load<int64_t>(p);
    case GgufType::kUint64: {
      const uint64_t v = Load<uint64_t>(p);
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(v);
    }
    default:
      return std::nullopt;
  }
}

std::optional<double> GgufValue::FloatAt(int64_t i) const {
  if (i < 0 || i >= count) return std::nullopt;
  if (elem_type == GgufType::kFloat32 || elem_type == GgufType::kFloat64) {
    const int64_t size = GgufTypeSize(elem_type);
    if (static_cast<int64_t>(raw.size()) < (i + 1) * size) return std::nullopt;
    const std::byte* p = raw.data() + i * size;
    if (elem_type == GgufType::kFloat32) return Load<float>(p);
    return Load<double>(p);
  }
  if (elem_type == GgufType::kUint64) {
    if (static_cast<int64_t>(raw.size()) < (i + 1) * 8) return std::nullopt;
    return static_cast<double>(Load<uint64_t>(raw.data() + i * 8));
  }
  const std::optional<int64_t> v = IntAt(i);
  if (!v) return std::nullopt;
  return static_cast<double>(*v);
}

std::string GgufValue::Summary() const {
  constexpr int64_t kShownElements = 4;
  constexpr size_t kScalarStringBytes = 160;
  constexpr size_t kElementStringBytes = 32;
  auto element = [&](int64_t i, size_t max_string) {
    std::string s;
    if (is_string()) {
      if (i < static_cast<int64_t>(strings.size()))
        AppendQuoted(strings[static_cast<size_t>(i)], max_string, &s);
    } else if (elem_type == GgufType::kBool) {
      const std::optional<int64_t> v = IntAt(i);
      s = v && *v != 0 ? "true" : "false";
    } else if (is_float()) {
      const std::optional<double> v = FloatAt(i);
      std::ostringstream out;
      out.precision(elem_type == GgufType::kFloat32 ? 7 : 15);
      out << (v ? *v : std::nan(""));
      s = out.str();
    } else if (elem_type == GgufType::kUint64) {
      uint64_t v = 0;
      if (static_cast<int64_t>(raw.size()) >= (i + 1) * 8) std::memcpy(&v, raw.data() + i * 8, 8);
      s = std::to_string(v);
    } else {
      const std::optional<int64_t> v = IntAt(i);
      s = v ? std::to_string(*v) : "?";
    }
    return s;
  };
  if (!is_array()) return element(0, kScalarStringBytes);
  std::string s = GgufTypeName(elem_type) + "[" + std::to_string(count) + "] [";
  for (int64_t i = 0; i < count && i < kShownElements; ++i) {
    if (i > 0) s += ", ";
    s += element(i, kElementStringBytes);
  }
  if (count > kShownElements) s += ", ...";
  s += "]";
  return s;
}

}  // namespace loom::model
