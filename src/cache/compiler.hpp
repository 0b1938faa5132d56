// Running the system C++ compiler for run-time kernels: identity for cache keys, and the call
// itself.
#pragma once

#include <string>
#include <vector>

#include "tessel/error.hpp"

namespace tessel {

// Compiler path and its --version line: part of every kernel cache key, so that changing or
// upgrading the compiler never reuses a library it did not build.
std::string compiler_identity();

// A compile stopped at the time limit (compile_timeout_s()): Backend::Auto catches it and runs
// the interpreter instead; everyone else sees a tessel::Error.
class CompileTimeout : public Error {
 public:
  using Error::Error;
};

// Runs `cxx args...` without a shell, stdout and stderr both going to log_path (truncated), killed
// with the tools it starts when it runs past compile_timeout_s() or when the caller dies.
// Throws CompileTimeout at the limit, tessel::Error when it cannot start or exits non-zero; the
// message gives the exit status, the first lines of the log and the full log path.
void run_compiler(const std::string& cxx, const std::vector<std::string>& args,
                  const std::string& log_path);

namespace detail {
// Runs argv[0] (searched in PATH when it has no '/') with stdout captured into `out` and stderr
// discarded. Returns the raw wait status; throws tessel::Error if the process cannot start or
// runs past compile_timeout_s().
int run_capture(const std::vector<std::string>& argv, std::string& out);
}  // namespace detail

}  // namespace tessel
