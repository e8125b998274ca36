// Fuzzes the GGUF reader: the structural parse, value accessors and summaries, and the conversion
// to a validated ModelFile (hyperparameters, tokenizer, tensor table).  Every tensor of an accepted
// model is touched at both ends, so AddressSanitizer catches a table that points outside the input.
#include <cstddef>
#include <cstdint>
#include <span>

#include "loom/model/gguf_reader.h"
#include "loom/model/model_file.h"

namespace {

volatile uint8_t g_sink;

void Touch(const loom::model::ModelFile& m) {
  for (const auto& [name, t] : m.tensors) {
    g_sink = static_cast<uint8_t>(t.data[0]);
    g_sink = static_cast<uint8_t>(t.data[t.size_bytes - 1]);
    const loom::kernels::MatrixView v = t.matrix();
    if (v.rows * v.row_stride != t.size_bytes) __builtin_trap();
  }
  for (const auto& [key, value] : m.metadata) g_sink = static_cast<uint8_t>(value.size());
  const loom::model::HParams& hp = m.hparams;
  if (hp.dim <= 0 || hp.n_layers <= 0 || hp.n_heads <= 0 || hp.head_dim <= 0) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto gguf = loom::model::ParseGguf(bytes, "fuzz.gguf");
  if (gguf.ok()) {
    for (const auto& [key, value] : gguf->metadata) {
      g_sink = static_cast<uint8_t>(value.Summary().size());
      for (int64_t i = 0; i < value.count && i < 64; ++i) {
        g_sink = static_cast<uint8_t>(value.IntAt(i).value_or(0));
        g_sink = static_cast<uint8_t>(value.FloatAt(i).value_or(0.0) != 0.0);
      }
    }
    loom::model::ModelFile m;
    m.path = "fuzz.gguf";
    (void)loom::model::GgufToModel(*gguf, bytes, &m);
  }
  auto model = loom::model::OpenModelFromBytes(bytes, "fuzz.gguf");
  if (model.ok()) Touch(**model);
  return 0;
}
