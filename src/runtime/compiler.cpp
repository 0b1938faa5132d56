// Spawns the system C++ compiler (no shell, so paths with spaces or quotes are safe) and reports
// its failures in plain words.
#include "runtime/compiler.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tessel/error.hpp"
#include "tessel/runtime.hpp"

extern char** environ;

namespace tessel {

namespace {

constexpr int kLogLinesShown = 20;

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (const std::string& a : argv) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

// Owns the posix_spawn attribute objects so every exit path destroys them.
class SpawnSetup {
 public:
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
    // The caller may block signals (e.g. a thread pool); the compiler should start clean.
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
};

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

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

std::string describe_wait_status(int status) {
  if (status < 0) return "unknown status (waitpid failed)";
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return "signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "wait status " + std::to_string(status);
}

int run_capture(const std::vector<std::string>& argv, std::string& out) {
  if (argv.empty() || argv[0].empty()) fail("run_capture", "argv is empty (expected a program)");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    fail("run_capture", "cannot create a pipe to run '", argv[0], "': ", std::strerror(errno));
  pid_t pid = 0;
  int rc;
  {
    SpawnSetup s;
    posix_spawn_file_actions_adddup2(&s.actions, fds[1], 1);
    posix_spawn_file_actions_addopen(&s.actions, 2, "/dev/null", O_WRONLY, 0);
    std::vector<char*> args = c_argv(argv);
    rc = ::posix_spawnp(&pid, argv[0].c_str(), &s.actions, &s.attr, args.data(), environ);
  }
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    fail("run_capture", "cannot start '", argv[0], "': ", std::strerror(rc));
  }
  out.clear();
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    // Keep reading to EOF even past the cap, so the child never blocks on a full pipe.
    if (out.size() < (1u << 20)) out.append(buf, n);
  }
  ::close(fds[0]);
  return wait_for(pid);
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
  pid_t pid = 0;
  int rc;
  {
    SpawnSetup s;
    posix_spawn_file_actions_addopen(&s.actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&s.actions, 1, 2);
    posix_spawn_file_actions_addopen(&s.actions, 0, "/dev/null", O_RDONLY, 0);
    std::vector<char*> c = c_argv(argv);
    rc = ::posix_spawnp(&pid, cxx.c_str(), &s.actions, &s.attr, c.data(), environ);
  }
  if (rc != 0)
    detail::fail("run_compiler", "cannot start the C++ compiler '", cxx, "' (log file '", log_path,
                 "'): ", std::strerror(rc), " (set TESSEL_CXX to a working compiler)");
  int status = wait_for(pid);
  if (status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  detail::fail("run_compiler", "the C++ compiler '", cxx, "' failed with ",
               detail::describe_wait_status(status), "; first lines of its output:\n",
               log_head(log_path, kLogLinesShown), "full compiler log: ", log_path);
}

}  // namespace tessel
