// Monotonic time for statistics and deadlines, and wall-clock time for records.
#pragma once

#include <chrono>
#include <cstdint>

namespace loom::base {

inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Milliseconds since the Unix epoch (the system clock: for timestamps that are stored or shown,
// never for measuring intervals).
inline int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Measures elapsed wall time since construction or the last Reset().
class Stopwatch {
 public:
  Stopwatch() : start_(NowSeconds()) {}
  void Reset() { start_ = NowSeconds(); }
  double Seconds() const { return NowSeconds() - start_; }

 private:
  double start_;
};

}  // namespace loom::base
