// The built-in profiles (share/profiles/*.json), compiled in: CMake writes profiles_builtin.cc
// from the files when it configures, so the binary needs nothing installed beside it.
#pragma once

#include <span>
#include <string_view>

namespace loom::cluster {

struct BuiltinProfile {
  std::string_view name;  // the file's name without ".json"
  std::string_view json;  // its text
};

std::span<const BuiltinProfile> BuiltinProfiles();

}  // namespace loom::cluster
