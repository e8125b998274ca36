// OpenStore's dispatch by URL, state names, and the helpers of sql.h shared by both engines.
#include "loom/network/store/store.h"

#include <charconv>

#include "loom/network/store/postgres/postgres_store.h"
#include "loom/network/store/sql.h"
#include "loom/network/store/sqlite/sqlite_store.h"

namespace loom::network::store {

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kRunning:
      return "running";
    case JobState::kCompleted:
      return "completed";
    case JobState::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string_view AttemptStateName(AttemptState state) {
  switch (state) {
    case AttemptState::kRunning:
      return "running";
    case AttemptState::kCompleted:
      return "completed";
    case AttemptState::kFailed:
      return "failed";
    case AttemptState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

std::optional<JobState> ParseJobState(std::string_view name) {
  for (JobState s : {JobState::kRunning, JobState::kCompleted, JobState::kFailed}) {
    if (JobStateName(s) == name) return s;
  }
  return std::nullopt;
}

std::optional<AttemptState> ParseAttemptState(std::string_view name) {
  for (AttemptState s : {AttemptState::kRunning, AttemptState::kCompleted, AttemptState::kFailed,
                         AttemptState::kCancelled}) {
    if (AttemptStateName(s) == name) return s;
  }
  return std::nullopt;
}

std::string_view SlotStateName(SlotState state) {
  return state == SlotState::kActive ? "active" : "lost";
}

std::optional<SlotState> ParseSlotState(std::string_view name) {
  for (SlotState s : {SlotState::kActive, SlotState::kLost}) {
    if (SlotStateName(s) == name) return s;
  }
  return std::nullopt;
}

StatusOr<std::unique_ptr<Store>> OpenStore(std::string_view url) {
  if (url.starts_with("postgresql://") || url.starts_with("postgres://")) {
    return OpenPostgresStore(url);
  }
  return OpenSqliteStore(url);
}

// ---- sql.h ----

Transaction::~Transaction() {
  // The error is dropped: the caller is already returning the one that made us roll back, and a
  // connection that cannot roll back has lost its transaction anyway.
  if (open_) (void)ExecPlain(conn_, "ROLLBACK");
}

Status Transaction::Begin() {
  LOOM_RETURN_IF_ERROR(conn_.BeginWrite());
  open_ = true;
  return OkStatus();
}

Status Transaction::Commit() {
  auto result = ExecPlain(conn_, "COMMIT");
  if (!result.ok()) return result.status().WithContext("commit");
  open_ = false;
  return OkStatus();
}

StatusOr<SqlResult> ExecPlain(SqlConnection& conn, std::string_view sql) {
  return conn.Exec(sql, {});
}

namespace {

// The length of the UTF-8 sequence at text[at], or 0 when none starts there (a stray or
// overlong byte, a surrogate, beyond U+10FFFF, or cut short).
size_t Utf8Length(std::string_view text, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + at;
  const size_t left = text.size() - at;
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  // Sequence length and the smallest code point it may encode (which rejects overlong forms).
  size_t len = 0;
  uint32_t cp = 0, min = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (len > left) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((p[k] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[k] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

}  // namespace

Status CheckText(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '\0') return InvalidArgumentError("text contains a NUL byte at offset ", i);
    const size_t len = Utf8Length(text, i);
    if (len == 0) {
      return InvalidArgumentError("text is not UTF-8 (byte 0x", std::hex,
                                  int{static_cast<unsigned char>(text[i])}, std::dec, " at offset ",
                                  i, ")");
    }
    i += len;
  }
  return OkStatus();
}

std::string Quoted(std::string_view text) {
  constexpr size_t kMaxBytes = 80;
  std::string out = "'";
  for (size_t i = 0; i < text.size();) {
    if (i >= kMaxBytes) {
      out += StrCat("...' (", text.size(), " bytes)");
      return out;
    }
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t len = Utf8Length(text, i);
    if (len == 0 || c < 0x20 || c == 0x7f) {
      constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
      ++i;
    } else {
      out.append(text.substr(i, len));
      i += len;
    }
  }
  out += "'";
  return out;
}

int64_t RowReader::Int(size_t column) {
  if (!status_.ok()) return 0;
  if (column >= row_.size()) {
    status_ = DataLossError("result row has ", row_.size(), " columns, wanted column ", column);
    return 0;
  }
  const std::string& text = row_[column];
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    status_ = DataLossError("column ", column, " holds '", text, "', not a 64-bit integer");
    return 0;
  }
  return value;
}

std::string RowReader::Text(size_t column) {
  if (!status_.ok()) return {};
  if (column >= row_.size()) {
    status_ = DataLossError("result row has ", row_.size(), " columns, wanted column ", column);
    return {};
  }
  return row_[column];
}

}  // namespace loom::network::store
