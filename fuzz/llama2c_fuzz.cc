// Fuzzes the llama2.c checkpoint reader (legacy and "ak42" version 1 headers) and the format
// sniffing of OpenModelFromBytes.  Accepted models have every tensor touched at both ends.
#include <cstddef>
#include <cstdint>
#include <span>

#include "loom/model/llama2c.h"
#include "loom/model/model_file.h"

namespace {
volatile uint8_t g_sink;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  g_sink = loom::model::LooksLikeLlama2cLegacy(bytes) ? 1 : 0;
  loom::model::ModelFile direct;
  direct.path = "fuzz.bin";
  if (loom::model::Llama2cToModel(bytes, &direct).ok()) {
    for (const auto& [name, t] : direct.tensors) {
      g_sink = static_cast<uint8_t>(t.data[0]);
      g_sink = static_cast<uint8_t>(t.data[t.size_bytes - 1]);
    }
  }
  auto model = loom::model::OpenModelFromBytes(bytes, "fuzz.bin");
  if (model.ok()) {
    for (const auto& [name, t] : (*model)->tensors) {
      g_sink = static_cast<uint8_t>(t.data[0]);
      g_sink = static_cast<uint8_t>(t.data[t.size_bytes - 1]);
    }
  }
  return 0;
}
