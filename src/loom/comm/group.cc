#include "loom/comm/group.h"

namespace loom::comm {

int64_t ElementSize(ElementType type) {
  switch (type) {
    case ElementType::kF32:
      return 4;
    case ElementType::kF16:
      return 2;
    case ElementType::kBF16:
      return 2;
  }
  return 0;
}

std::string_view ElementTypeName(ElementType type) {
  switch (type) {
    case ElementType::kF32:
      return "f32";
    case ElementType::kF16:
      return "f16";
    case ElementType::kBF16:
      return "bf16";
  }
  return "invalid";
}

bool IsValidElementType(uint8_t raw) { return raw >= 1 && raw <= 3; }

}  // namespace loom::comm
