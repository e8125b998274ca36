// Fuzzes the safetensors header parser (every accepted tensor is touched at both ends, so
// AddressSanitizer catches a table that points outside the input, and the tiling is re-checked),
// and, on the same bytes read as text, the config.json parser of model directories.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "loom/model/hf_model.h"
#include "loom/model/safetensors.h"

namespace {

volatile uint8_t g_sink;

void Touch(const loom::model::SafetensorsFile& f, int64_t size) {
  int64_t total = 0;
  for (const auto& [name, t] : f.tensors) {
    const int64_t n = static_cast<int64_t>(t.data.size());
    if (n != t.end - t.begin || n != t.elements() * loom::model::StDTypeSize(t.dtype)) {
      __builtin_trap();
    }
    if (n > 0) {
      g_sink = static_cast<uint8_t>(t.data[0]);
      g_sink = static_cast<uint8_t>(t.data[static_cast<size_t>(n - 1)]);
    }
    total += n;
  }
  if (f.data_offset + total != size) __builtin_trap();
  for (const auto& [k, v] : f.metadata) g_sink = static_cast<uint8_t>(k.size() + v.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto f = loom::model::ParseSafetensors(bytes, "fuzz.safetensors");
  if (f.ok()) Touch(*f, static_cast<int64_t>(size));
  if (size > 0 && data[0] == '{') {
    auto c = loom::model::ParseHfConfig(std::string_view(reinterpret_cast<const char*>(data), size),
                                        "config.json");
    if (c.ok() && c->hp.vocab_size <= 0) __builtin_trap();
  }
  return 0;
}
