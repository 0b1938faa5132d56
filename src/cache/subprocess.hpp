// Child processes (the run-time C++ compiler) that never outlive their caller nor a deadline.
#pragma once

#include <string>
#include <vector>

namespace tessel::detail {

// How one child run ended.
struct ChildResult {
  int status = -1;          // raw wait status (see describe_wait_status)
  bool timed_out = false;   // stopped (with its whole process group) at the deadline
  double seconds = 0;       // wall-clock time it ran
};

// What the child's standard streams are: stdin is always /dev/null. stdout goes to the file
// `stdout_path` (truncated) or, when that is empty, is captured into ChildResult's caller string;
// stderr goes with stdout when `stderr_to_stdout`, else to /dev/null.
struct ChildIo {
  std::string stdout_path;
  bool stderr_to_stdout = true;
};

// Runs argv (argv[0] searched in PATH when it has no '/'). The child runs in its own process
// group under a small supervisor process that kills the whole group when the caller dies (even by
// SIGKILL), so a compiler and the tools it starts (cc1plus, as, ld) never run on without us.
// With timeout_s > 0 the group is killed once that many seconds have passed. `captured` receives
// stdout (at most 1 MiB) when io.stdout_path is empty. Throws tessel::Error, naming `function`,
// when the child cannot be started (e.g. no such program).
ChildResult run_child(const char* function, const std::vector<std::string>& argv,
                      const ChildIo& io, double timeout_s, std::string* captured = nullptr);

// "exit code N" or "signal N (name)" for a raw wait status.
std::string describe_wait_status(int status);

}  // namespace tessel::detail
