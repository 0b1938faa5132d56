// Warnings: one line per distinct event per process, to stderr or to a handler the caller installs
// (the Python module turns them into Python warnings).
#include "support/warning.hpp"

#include <cstdio>
#include <mutex>
#include <set>

#include "tessel/runtime.hpp"

namespace tessel {

namespace {

// Keys of the warnings given, forgotten all at once past kMaxSeen (a key names a kernel or a
// folder, and a long process may meet many): after that a warning may be given once more.
constexpr size_t kMaxSeen = 4096;

struct Sink {
  std::mutex mu;
  std::set<std::string> seen;
  std::function<void(const std::string&)> handler;
};

Sink& sink() {
  static Sink* s = new Sink;  // warnings may come from static destructors of other objects
  return *s;
}

}  // namespace

void set_warning_handler(std::function<void(const std::string&)> handler) {
  Sink& s = sink();
  std::lock_guard lk(s.mu);
  s.handler = std::move(handler);
}

namespace detail {

void warn_once(const std::string& key, const std::string& message) noexcept {
  Sink& s = sink();
  std::function<void(const std::string&)> handler;
  {
    std::lock_guard lk(s.mu);
    if (s.seen.count(key)) return;
    if (s.seen.size() >= kMaxSeen) s.seen.clear();
    s.seen.insert(key);
    handler = s.handler;
  }
  // Outside the lock: a handler may take its own locks (Python's GIL) or warn again. Warnings
  // never throw: they are issued with locks and files open, and a handler that fails (Python
  // with warnings turned into errors) still leaves the text on stderr.
  if (handler) {
    try {
      handler(message);
      return;
    } catch (...) {
    }
  }
  std::fprintf(stderr, "tessel: warning: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace detail

}  // namespace tessel
