// The one exception type users see: every bad input names the function, the argument and what was expected.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tessel {

class Error : public std::runtime_error {
 public:
  // Control characters (NUL included) and bytes that are not UTF-8 are shown as \xNN: a message
  // must survive a C string and a UTF-8 decoder (Python's) whole.
  explicit Error(const std::string& what);
};

namespace detail {
// `text` with control characters and invalid UTF-8 as \xNN; with ascii_only, other non-ASCII
// characters as U+XXXX too. For quoting user text, e.g. a formula, in messages.
std::string escape_text(std::string_view text, bool ascii_only);

template <class... Args>
[[noreturn]] void fail(const char* function, Args&&... parts) {
  std::ostringstream os;
  os << "tessel::" << function << ": ";
  (os << ... << parts);
  throw Error(os.str());
}

// Size arithmetic (element counts, byte counts, offsets) that reports an overflow as a user
// error naming `function`, instead of wrapping into a small allocation and a write past its end.
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
