// Fuzzes what `loom plan` reads from files a user hands it: machine and link profiles (JSON) and
// a Hugging Face config.json planned without weights.  Any input either parses into values the
// planner accepts or fails with a Status, never a crash or an exception.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "loom/cluster/profiles.h"
#include "loom/cluster/shape_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)loom::cluster::ParseMachineProfile(in, "fuzz");
  (void)loom::cluster::ParseLinkProfile(in, "fuzz");
  auto m = loom::cluster::ShapeFromConfig(std::string(in), "fuzz", "");
  if (m.ok() && ((*m)->hparams.dim <= 0 || (*m)->hparams.n_layers <= 0)) __builtin_trap();
  return 0;
}
