// Runs the system C++ compiler (no shell, so paths with spaces or quotes are safe) under a time
// limit, and reports its failures in plain words.
#include "cache/compiler.hpp"

#include <sys/wait.h>

#include <fstream>
#include <sstream>

#include "cache/subprocess.hpp"
#include "tessel/error.hpp"
#include "tessel/runtime.hpp"

namespace tessel {

namespace {

constexpr int kLogLinesShown = 20;

// The first `max_lines` lines of the log, indented, plus how many were left out.
std::string log_head(const std::string& log_path, int max_lines) {
  std::ifstream in(log_path);
  if (!in) return "  (the log could not be read)\n";
  std::string line, out;
  int shown = 0, skipped = 0;
  while (std::getline(in, line)) {
    if (shown < max_lines) {
      if (line.size() > 400) line = line.substr(0, 400) + "...";
      out += "  " + line + "\n";
      ++shown;
    } else {
      ++skipped;
    }
  }
  if (shown == 0) return "  (the log is empty)\n";
  if (skipped > 0) out += "  ... (" + std::to_string(skipped) + " more lines)\n";
  return out;
}

}  // namespace

namespace detail {

int run_capture(const std::vector<std::string>& argv, std::string& out) {
  // A malformed TESSEL_COMPILE_TIMEOUT is reported by the compile itself; probing the compiler
  // must not turn it into "no usable compiler", which Backend::Auto would hide.
  double limit = 60;
  try {
    limit = compile_timeout_s();
  } catch (const Error&) {
  }
  ChildResult r = run_child("run_capture", argv, ChildIo{"", false}, limit, &out);
  if (r.timed_out)
    fail("run_capture", "'", argv[0], "' did not finish within ", limit,
         " s and was stopped (TESSEL_COMPILE_TIMEOUT sets this limit)");
  return r.status;
}

}  // namespace detail

std::string compiler_identity() {
  CompilerInfo c = compiler_info();
  return c.path + "\n" + (c.usable ? c.version : "unusable: " + c.problem);
}

void run_compiler(const std::string& cxx, const std::vector<std::string>& args,
                  const std::string& log_path) {
  if (cxx.empty()) detail::fail("run_compiler", "cxx is empty (expected a compiler path)");
  std::vector<std::string> argv;
  argv.push_back(cxx);
  argv.insert(argv.end(), args.begin(), args.end());
  const double limit = compile_timeout_s();
  detail::ChildResult r;
  try {
    r = detail::run_child("run_compiler", argv, detail::ChildIo{log_path, true}, limit);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (the C++ compiler; set TESSEL_CXX to a working one)");
  }
  if (r.timed_out) {
    std::ostringstream os;
    os << "tessel::run_compiler: the C++ compiler '" << cxx << "' was stopped after " << limit
       << " s, the compile time limit (set TESSEL_COMPILE_TIMEOUT=<seconds> to raise it, 0 for "
       << "no limit, or use the interpreter backend for this formula); its log: " << log_path;
    throw CompileTimeout(os.str());
  }
  const int status = r.status;
  if (status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  detail::fail("run_compiler", "the C++ compiler '", cxx, "' failed with ",
               detail::describe_wait_status(status), "; first lines of its output:\n",
               log_head(log_path, kLogLinesShown), "full compiler log: ", log_path);
}

}  // namespace tessel
