// Fuzzes the hostfile parser (JSON from the user): any input is a hostfile or an error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/comm/hostfile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto hf = loom::comm::ParseHostfile(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (hf.ok()) {
    if (hf->hosts.empty() || hf->total_slots() < 1) __builtin_trap();
    for (const auto& h : hf->hosts) {
      if (h.slots < 1 || (!h.local() && h.ips.empty())) __builtin_trap();
    }
  }
  return 0;
}
