// The one exception type users see: every bad input names the function, the argument and what was expected.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tessel {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <class... Args>
[[noreturn]] void fail(const char* function, Args&&... parts) {
  std::ostringstream os;
  os << "tessel::" << function << ": ";
  (os << ... << parts);
  throw Error(os.str());
}
}  // namespace detail

}  // namespace tessel
