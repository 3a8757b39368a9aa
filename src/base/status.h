// Status and Result<T>: recoverable errors that a user or a file can cause.
// Broken invariants use CHECK (base/check.h) instead. Every error carries a
// message that says what went wrong and where, and an optional hint that says
// what to do about it. Used at I/O, parse and API boundaries.
#ifndef DSV4_BASE_STATUS_H_
#define DSV4_BASE_STATUS_H_

#include <string>
#include <utility>
#include <variant>

#include "base/check.h"

namespace dsv4 {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad flag, bad request, bad value
  kNotFound,           // missing file, tensor or key
  kDataLoss,           // corrupt or truncated file
  kOutOfRange,         // offsets or sizes past the end, absurd counts
  kUnimplemented,      // valid but unsupported (dtype, architecture, version)
  kResourceExhausted,  // out of memory / cache space
  kIo,                 // the operating system refused (open, mmap, read)
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message, std::string hint = {})
      : code_(code), message_(std::move(message)), hint_(std::move(hint)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }

  // Prepends context ("while loading X") to the message.
  Status WithContext(const std::string& context) const;
  // One line: "message (hint: ...)".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string hint_;
};

// Shorthands: return InvalidArgument("bad x", "use y").
inline Status InvalidArgument(std::string m, std::string h = {}) {
  return Status(StatusCode::kInvalidArgument, std::move(m), std::move(h));
}
inline Status NotFound(std::string m, std::string h = {}) {
  return Status(StatusCode::kNotFound, std::move(m), std::move(h));
}
inline Status DataLoss(std::string m, std::string h = {}) {
  return Status(StatusCode::kDataLoss, std::move(m), std::move(h));
}
inline Status OutOfRange(std::string m, std::string h = {}) {
  return Status(StatusCode::kOutOfRange, std::move(m), std::move(h));
}
inline Status Unimplemented(std::string m, std::string h = {}) {
  return Status(StatusCode::kUnimplemented, std::move(m), std::move(h));
}
inline Status ResourceExhausted(std::string m, std::string h = {}) {
  return Status(StatusCode::kResourceExhausted, std::move(m), std::move(h));
}
inline Status IoError(std::string m, std::string h = {}) {
  return Status(StatusCode::kIo, std::move(m), std::move(h));
}

// Result<T>: a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    CHECK(!std::get<Status>(v_).ok(), "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    CHECK(ok(), "Result::value() on error: %s", std::get<Status>(v_).ToString().c_str());
    return std::get<T>(v_);
  }
  const T& value() const& {
    CHECK(ok(), "Result::value() on error: %s", std::get<Status>(v_).ToString().c_str());
    return std::get<T>(v_);
  }
  T&& value() && {
    CHECK(ok(), "Result::value() on error: %s", std::get<Status>(v_).ToString().c_str());
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace dsv4

#define DSV4_CONCAT_INNER_(a, b) a##b
#define DSV4_CONCAT_(a, b) DSV4_CONCAT_INNER_(a, b)

// RETURN_IF_ERROR(expr): expr yields a Status; returns it from the caller when not ok.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::dsv4::Status dsv4_status_ = (expr);        \
    if (!dsv4_status_.ok()) return dsv4_status_; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): expr yields a Result<T>; on error returns its
// Status, else moves the value into lhs (which may be a declaration).
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(DSV4_CONCAT_(dsv4_result_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#endif  // DSV4_BASE_STATUS_H_
