// Status and StatusOr<T>: the return values of every operation that can fail for reasons outside
// the program (files, sockets, user requests).  Exceptions are not used for expected failures.
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace loom {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,    // the caller (or user) asked for something malformed
  kNotFound,           // a file, key, tensor or peer does not exist
  kOutOfRange,         // an index or size beyond what is allowed
  kDataLoss,           // bytes from a file or socket are corrupt or truncated
  kUnimplemented,      // a valid but unsupported feature (tensor type, architecture)
  kResourceExhausted,  // out of memory, queue full, context full
  kUnavailable,        // a peer or service cannot be reached
  kDeadlineExceeded,   // a bounded wait ran out
  kFailedPrecondition, // the system is not in a state where the operation can run
  kPermissionDenied,   // authentication failed
  kCancelled,          // the operation was stopped on request
  kInternal,           // a bug: an invariant did not hold
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NOT_FOUND: gguf: tensor 'x' missing" style text for logs and CLI errors.
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: ` (for adding a file name etc.).
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }

// StrCat(a, b, ...) concatenates anything that streams into an ostream.
template <class... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

#define LOOM_DEFINE_ERROR(Name, Code)                   \
  template <class... Args>                              \
  Status Name(const Args&... args) {                    \
    return Status(StatusCode::Code, StrCat(args...));   \
  }
LOOM_DEFINE_ERROR(InvalidArgumentError, kInvalidArgument)
LOOM_DEFINE_ERROR(NotFoundError, kNotFound)
LOOM_DEFINE_ERROR(OutOfRangeError, kOutOfRange)
LOOM_DEFINE_ERROR(DataLossError, kDataLoss)
LOOM_DEFINE_ERROR(UnimplementedError, kUnimplemented)
LOOM_DEFINE_ERROR(ResourceExhaustedError, kResourceExhausted)
LOOM_DEFINE_ERROR(UnavailableError, kUnavailable)
LOOM_DEFINE_ERROR(DeadlineExceededError, kDeadlineExceeded)
LOOM_DEFINE_ERROR(FailedPreconditionError, kFailedPrecondition)
LOOM_DEFINE_ERROR(PermissionDeniedError, kPermissionDenied)
LOOM_DEFINE_ERROR(CancelledError, kCancelled)
LOOM_DEFINE_ERROR(InternalError, kInternal)
#undef LOOM_DEFINE_ERROR

// Holds either a value or a non-OK Status.
template <class T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : rep_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(rep_).ok()) rep_ = Status(StatusCode::kInternal, "StatusOr from OK status");
  }
  StatusOr(T value) : rep_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(rep_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(rep_);
  }
  T& value() & { return std::get<T>(rep_); }
  const T& value() const& { return std::get<T>(rep_); }
  T&& value() && { return std::get<T>(std::move(rep_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> rep_;
};

#define LOOM_CONCAT_INNER(a, b) a##b
#define LOOM_CONCAT(a, b) LOOM_CONCAT_INNER(a, b)

// Returns from the current function if `expr` yields a non-OK Status.
#define LOOM_RETURN_IF_ERROR(expr)          \
  do {                                      \
    ::loom::Status loom_status_ = (expr);   \
    if (!loom_status_.ok()) return loom_status_; \
  } while (0)

// LOOM_ASSIGN_OR_RETURN(auto x, F()); assigns the value or returns the error.
#define LOOM_ASSIGN_OR_RETURN(lhs, expr) \
  LOOM_ASSIGN_OR_RETURN_IMPL(LOOM_CONCAT(loom_statusor_, __LINE__), lhs, expr)
#define LOOM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

}  // namespace loom
