// Download progress on a terminal (a bar redrawn in place: bytes, rate, ETA) or, when the output is
// not a terminal, one line per finished file (for logs).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace loom::fetch {

// "1.50 GiB", "512 B".
std::string FormatBytes(int64_t bytes);
// "0:07", "1:02:03"; "?" for a negative or absurd time.
std::string FormatDuration(double seconds);

// One redraw of the bar, `width` columns at most, e.g.
//   model.safetensors  42% [########           ] 1.02/2.41 GiB  85.3 MiB/s  ETA 0:17
// `total` < 0: size unknown (no percentage, bar or ETA).  `rate` in bytes/s (<= 0: not known yet).
std::string FormatProgressLine(const std::string& name, int64_t done, int64_t total, double rate,
                               int width);

class TransferProgress {
 public:
  // `out` null: silent.  `interactive`: redraw a bar in place (stderr is a terminal).
  // `clock` returns seconds (monotonic); tests pass their own.
  TransferProgress(FILE* out, bool interactive, std::function<double()> clock = {});

  // Progress on `out` = stderr, interactive when stderr is a terminal.
  static TransferProgress ForStderr();

  // A file starts: `total` bytes (-1 unknown), of which `resumed` are already on disk.
  void Begin(const std::string& name, int64_t total, int64_t resumed);
  // `done` bytes of the file are on disk now (redraws at most every 100 ms).
  void Update(int64_t done);
  // The file is complete (`ok`) or failed; ends the bar, or prints the file's line.
  void End(bool ok);
  // A file that needed no transfer.
  void Cached(const std::string& name, int64_t size);
  // A line of its own (ends a bar in progress first).
  void Message(const std::string& text);

 private:
  double Now() const;
  int Width() const;
  void Draw();

  FILE* out_;
  bool interactive_;
  std::function<double()> clock_;
  std::string name_;
  int64_t total_ = -1;
  int64_t resumed_ = 0;
  int64_t done_ = 0;
  double start_ = 0;      // seconds, when the file began
  double last_draw_ = 0;  // seconds
  bool active_ = false;
};

}  // namespace loom::fetch
