#include "loom/fetch/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "loom/base/clock.h"

namespace loom::fetch {

namespace {
constexpr double kRedrawSeconds = 0.1;
constexpr int kBarCells = 20;
constexpr int kDefaultWidth = 80;

std::string Printf(const char* format, double a, const char* unit) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), format, a, unit);
  return buf;
}

// The unit FormatBytes would choose for `bytes`, as (divisor, name).
std::pair<double, const char*> Unit(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double div = 1;
  int u = 0;
  while (static_cast<double>(bytes) / div >= 1024.0 && u < 4) {
    div *= 1024.0;
    ++u;
  }
  return {div, kUnits[u]};
}
}  // namespace

std::string FormatBytes(int64_t bytes) {
  if (bytes < 0) return "?";
  const auto [div, unit] = Unit(bytes);
  if (div == 1) return Printf("%.0f %s", static_cast<double>(bytes), unit);
  return Printf("%.2f %s", static_cast<double>(bytes) / div, unit);
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e8) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}

std::string FormatProgressLine(const std::string& name, int64_t done, int64_t total, double rate,
                               int width) {
  std::string tail;
  if (total > 0) {
    const double frac =
        std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0);
    const int filled = static_cast<int>(frac * kBarCells);
    char pct[8];
    std::snprintf(pct, sizeof(pct), "%3d%% ", static_cast<int>(frac * 100));
    tail += pct;
    tail += "[" + std::string(filled, '#') + std::string(kBarCells - filled, ' ') + "] ";
    const auto [div, unit] = Unit(total);
    char amount[64];
    if (div == 1) {
      std::snprintf(amount, sizeof(amount), "%lld/%lld B", static_cast<long long>(done),
                    static_cast<long long>(total));
    } else {
      std::snprintf(amount, sizeof(amount), "%.2f/%.2f %s", static_cast<double>(done) / div,
                    static_cast<double>(total) / div, unit);
    }
    tail += amount;
  } else {
    tail += FormatBytes(done);
  }
  if (rate > 0) {
    tail += "  " + FormatBytes(static_cast<int64_t>(rate)) + "/s";
    if (total > 0 && done < total) {
      tail += "  ETA " + FormatDuration(static_cast<double>(total - done) / rate);
    }
  }
  // The name gives way first: shortened with "..." in the middle of what room is left.
  const int room = width - static_cast<int>(tail.size()) - 2;
  std::string shown = name;
  if (room < static_cast<int>(name.size())) {
    if (room <= 5) {
      shown.clear();
    } else {
      const size_t keep = static_cast<size_t>(room - 3);
      shown = name.substr(0, keep / 2) + "..." + name.substr(name.size() - (keep - keep / 2));
    }
  }
  std::string line = shown.empty() ? tail : shown + "  " + tail;
  if (static_cast<int>(line.size()) > width && width > 0) line.resize(static_cast<size_t>(width));
  return line;
}

TransferProgress::TransferProgress(FILE* out, bool interactive, std::function<double()> clock)
    : out_(out), interactive_(interactive), clock_(std::move(clock)) {}

TransferProgress TransferProgress::ForStderr() {
  return TransferProgress(stderr, ::isatty(STDERR_FILENO) == 1);
}

double TransferProgress::Now() const { return clock_ ? clock_() : base::NowSeconds(); }

int TransferProgress::Width() const {
  if (out_ == nullptr || !interactive_) return kDefaultWidth;
  winsize ws{};
  if (::ioctl(::fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col - 1;
  return kDefaultWidth - 1;
}

void TransferProgress::Begin(const std::string& name, int64_t total, int64_t resumed) {
  if (active_) End(false);
  name_ = name;
  total_ = total;
  resumed_ = resumed;
  done_ = resumed;
  start_ = Now();
  last_draw_ = -1;
  active_ = true;
  if (interactive_) Draw();
}

void TransferProgress::Update(int64_t done) {
  done_ = done;
  if (!interactive_ || !active_) return;
  const double now = Now();
  if (now - last_draw_ >= kRedrawSeconds) Draw();
}

void TransferProgress::Draw() {
  if (out_ == nullptr) return;
  last_draw_ = Now();
  const double elapsed = last_draw_ - start_;
  const double rate = elapsed > 0.2 ? static_cast<double>(done_ - resumed_) / elapsed : 0;
  std::fprintf(out_, "\r%s\x1b[K", FormatProgressLine(name_, done_, total_, rate, Width()).c_str());
  std::fflush(out_);
}

void TransferProgress::End(bool ok) {
  if (!active_) return;
  active_ = false;
  if (out_ == nullptr) return;
  const double elapsed = Now() - start_;
  const int64_t moved = done_ - resumed_;
  if (interactive_) {
    Draw();
    std::fprintf(out_, "%s\n", ok ? "" : "  (incomplete)");
  } else {
    std::string line = name_ + "  " + FormatBytes(done_);
    if (ok) {
      line += " in " + FormatDuration(elapsed);
      if (elapsed > 0 && moved > 0) {
        line +=
            " (" + FormatBytes(static_cast<int64_t>(static_cast<double>(moved) / elapsed)) + "/s)";
      }
      if (resumed_ > 0) line += ", resumed at " + FormatBytes(resumed_);
    } else {
      line += " of " + FormatBytes(total_) + ", incomplete";
    }
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void TransferProgress::Cached(const std::string& name, int64_t size) {
  if (active_) End(false);
  if (out_ == nullptr) return;
  std::fprintf(out_, "%s  %s, already in the cache\n", name.c_str(), FormatBytes(size).c_str());
  std::fflush(out_);
}

void TransferProgress::Message(const std::string& text) {
  if (out_ == nullptr) return;
  if (active_ && interactive_) std::fprintf(out_, "\n");
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
}

}  // namespace loom::fetch
