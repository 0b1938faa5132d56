// The exceptions tessel throws, in two tiers: user errors and broken internal invariants.
//
// 1. tessel::Error: the caller's mistake (or the environment's: no compiler, no GPU). The message
//    names the function, the argument and what was expected. Its kind() says which Python
//    exception it becomes: ErrorKind::Type (TypeError) when the argument has the wrong type (an
//    integer dtype where floats are needed, ...), ErrorKind::Value (ValueError) otherwise.
//    Thrown by detail::fail / detail::fail_type.
// 2. tessel::InternalError: a bug in tessel, never the caller's fault; Python's
//    tessel.InternalError (a RuntimeError). Thrown by TESSEL_ASSERT, in every build: a broken
//    invariant must stop the call, not run on into a wrong answer. Catching Error (to fall back,
//    to retry) never swallows one.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tessel {

enum class ErrorKind { Value, Type };

class Error : public std::runtime_error {
 public:
  /// Control characters (NUL included) and bytes that are not UTF-8 are shown as `\xNN`: a message
  /// must survive a C string and a UTF-8 decoder (Python's) whole.
  explicit Error(const std::string& what, ErrorKind kind = ErrorKind::Value);
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what);
};

namespace detail {
/// `text` with control characters and invalid UTF-8 as `\xNN`; with ascii_only, other non-ASCII
/// characters as U+XXXX too. For quoting user text, e.g. a formula, in messages.
std::string escape_text(std::string_view text, bool ascii_only);

template <class... Args>
[[noreturn]] void fail_kind(ErrorKind kind, const char* function, Args&&... parts) {
  std::ostringstream os;
  os << "tessel::" << function << ": ";
  (os << ... << parts);
  throw Error(os.str(), kind);
}

/// A wrong value or shape (ValueError).
template <class... Args>
[[noreturn]] void fail(const char* function, Args&&... parts) {
  fail_kind(ErrorKind::Value, function, std::forward<Args>(parts)...);
}

/// A wrong type, e.g. a dtype (TypeError).
template <class... Args>
[[noreturn]] void fail_type(const char* function, Args&&... parts) {
  fail_kind(ErrorKind::Type, function, std::forward<Args>(parts)...);
}

/// Throws InternalError "tessel: internal error in <function>: <what> (<file>:<line>); please
/// report it"; out of line so that a TESSEL_ASSERT costs one compare where it holds.
[[noreturn]] void internal_error(const char* function, const char* file, int line,
                                 const std::string& what);

template <class... Args>
[[noreturn]] void assert_failed(const char* function, const char* file, int line,
                                const char* condition, Args&&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  if constexpr (sizeof...(parts) == 0) os << condition << " does not hold";
  internal_error(function, file, line, os.str());
}

/// Size arithmetic (element counts, byte counts, offsets) that reports an overflow as a user
/// error naming `function`, instead of wrapping into a small allocation and a write past its end.
inline int64_t checked_mul(int64_t a, int64_t b, const char* function, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    fail(function, what, " is too large: ", a, " * ", b, " overflows a 64-bit size");
  return r;
}
inline int64_t checked_add(int64_t a, int64_t b, const char* function, const char* what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    fail(function, what, " is too large: ", a, " + ", b, " overflows a 64-bit size");
  return r;
}
}  // namespace detail

}  // namespace tessel

// An internal invariant, checked in every build: TESSEL_ASSERT(cond) or TESSEL_ASSERT(cond,
// message parts...). The parts are only formatted when `cond` fails.
#define TESSEL_ASSERT(cond, ...)                                         \
  do {                                                                   \
    if (!(cond)) [[unlikely]]                                            \
      ::tessel::detail::assert_failed(__func__, __FILE__, __LINE__,      \
                                      #cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

// A point that a correct tessel never reaches (e.g. a switch's default over a closed enum).
#define TESSEL_UNREACHABLE(...)                                 \
  ::tessel::detail::assert_failed(__func__, __FILE__, __LINE__, \
                                  "unreachable code" __VA_OPT__(, ) __VA_ARGS__)
