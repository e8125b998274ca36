// Test-only helpers (included by *_test.cc files, never by library code).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace loom::testing {

// The team's shared data folder (models, golden outputs): $LOOM_SHARED_DIR, else ../shared next to
// the source tree.  Returns "" when it does not exist; tests then GTEST_SKIP with
// kSharedMissingMessage so that a missing folder is reported, not silently passed.
inline std::string SharedDir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("LOOM_SHARED_DIR"); env != nullptr && *env != '\0') {
    return fs::is_directory(env) ? std::string(env) : std::string();
  }
#ifdef LOOM_SOURCE_DIR
  const fs::path p = fs::path(LOOM_SOURCE_DIR) / ".." / "shared";
  if (fs::is_directory(p)) return fs::weakly_canonical(p).string();
#endif
  return {};
}

inline constexpr const char* kSharedMissingMessage =
    "SHARED DATA MISSING: ../shared (or $LOOM_SHARED_DIR) not found; the real-model and golden "
    "tests did not run";

}  // namespace loom::testing

// Skips the current test, loudly, when the shared folder is missing; otherwise defines `shared`.
#define LOOM_REQUIRE_SHARED_DIR(shared)                                   \
  const std::string shared = ::loom::testing::SharedDir();                \
  if (shared.empty()) GTEST_SKIP() << ::loom::testing::kSharedMissingMessage
