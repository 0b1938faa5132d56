// Supervised child processes: their own process group, killed at a deadline or when the caller
// dies, so a run-time compile can neither hang a call nor outlive it.
#include "cache/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "tessel/error.hpp"

namespace tessel::detail {

namespace {

constexpr size_t kCaptureLimit = 1u << 20;

// fork() without the pthread_atfork handlers of the libraries in the caller (OpenMP, CUDA, ...):
// the child only makes plain system calls until it execs or exits.
pid_t fork_bare() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  return ::_Fork();
#else
  return ::fork();
#endif
}

// Closes a file descriptor at scope exit (parent side only).
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// Moves fd above the standard streams (a caller with a closed stdin may get fd 0 from open), so
// that the child's dup2() onto 0, 1, 2 never overwrites another of its sources.
int lift(int fd) {
  if (fd < 0 || fd >= 10) return fd;
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  ::close(fd);
  return moved;
}

// Everything the supervisor needs, computed before fork: after it only system calls are safe.
struct Plan {
  std::vector<char*> argv;
  bool search_path = false;
  int in_fd = -1, out_fd = -1, err_fd = -1, report_fd = -1;
  pid_t parent = 0;
  int max_fd = 1024;
};

void close_from(int first, int max_fd) {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, first, ~0u, 0) == 0) return;
#endif
  for (int fd = first; fd < max_fd; ++fd) ::close(fd);
}

void report_errno_and_exit(int fd) {
  int e = errno;
  ssize_t ignored = ::write(fd, &e, sizeof e);
  (void)ignored;
  ::_exit(127);
}

// The supervisor: a process group leader that starts the program, passes its exit status on, and
// kills the group when the caller dies (death signal) or asks it to stop.
[[noreturn]] void supervise(const Plan& p) {
  ::setpgid(0, 0);
  sigset_t all;
  ::sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGCHLD, &dfl, nullptr);  // a caller that ignores SIGCHLD would make waitpid fail
#ifdef __linux__
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
  if (::getppid() != p.parent) ::_exit(125);  // the caller died before the death signal was set
  if (::dup2(p.in_fd, 0) < 0 || ::dup2(p.out_fd, 1) < 0 || ::dup2(p.err_fd, 2) < 0 ||
      ::dup2(p.report_fd, 3) < 0)
    report_errno_and_exit(p.report_fd);
  ::fcntl(3, F_SETFD, FD_CLOEXEC);
  close_from(4, p.max_fd);  // among others, the caller's cache lock files
  const pid_t child = fork_bare();
  if (child < 0) report_errno_and_exit(3);
  if (child == 0) {
    ::sigaction(SIGPIPE, &dfl, nullptr);  // Python ignores SIGPIPE; a compiler expects the default
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (p.search_path)
      ::execvp(p.argv[0], p.argv.data());
    else
      ::execv(p.argv[0], p.argv.data());
    report_errno_and_exit(3);
  }
  ::close(3);
  sigset_t wanted;
  ::sigemptyset(&wanted);
  for (int s : {SIGCHLD, SIGTERM, SIGHUP, SIGINT, SIGQUIT}) ::sigaddset(&wanted, s);
  for (;;) {
    const int s = ::sigwaitinfo(&wanted, nullptr);
    if (s < 0) continue;
    if (s != SIGCHLD) {
      ::kill(0, SIGKILL);  // the whole group, this process included
      continue;
    }
    int st = 0;
    if (::waitpid(child, &st, WNOHANG) != child) continue;
    if (WIFEXITED(st)) ::_exit(WEXITSTATUS(st));
    // Die of the same signal, so the caller's message names it.
    const int sig = WTERMSIG(st);
    ::sigaction(sig, &dfl, nullptr);
    ::kill(::getpid(), sig);
    sigset_t one;
    ::sigemptyset(&one);
    ::sigaddset(&one, sig);
    ::sigprocmask(SIG_UNBLOCK, &one, nullptr);
    ::_exit(128 + sig);
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Reads what is available from a non-blocking pipe; false at end of file or on error.
bool drain(int fd, std::string* out) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      if (out && out->size() < kCaptureLimit) out->append(buf, static_cast<size_t>(n));
      continue;  // keep reading past the cap so the child never blocks on a full pipe
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
}

}  // namespace

std::string describe_wait_status(int status) {
  if (status < 0) return "unknown status (waitpid failed)";
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return "signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "wait status " + std::to_string(status);
}

ChildResult run_child(const char* function, const std::vector<std::string>& argv,
                      const ChildIo& io, double timeout_s, std::string* captured) {
  if (argv.empty() || argv[0].empty()) fail(function, "argv is empty (expected a program)");
  const std::string& prog = argv[0];
  Fd in(lift(::open("/dev/null", O_RDONLY | O_CLOEXEC)));
  Fd out, cap_read, err, report_read, report_write;
  if (!io.stdout_path.empty()) {
    out.reset(lift(::open(io.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)));
    if (out.get() < 0)
      fail(function, "cannot write the log file '", io.stdout_path, "' for '", prog,
           "': ", std::strerror(errno));
  } else {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      fail(function, "cannot create a pipe to run '", prog, "': ", std::strerror(errno));
    cap_read.reset(lift(fds[0]));
    out.reset(lift(fds[1]));
    ::fcntl(cap_read.get(), F_SETFL, O_NONBLOCK);
  }
  if (!io.stderr_to_stdout) err.reset(lift(::open("/dev/null", O_WRONLY | O_CLOEXEC)));
  int rep[2];
  if (::pipe2(rep, O_CLOEXEC) != 0)
    fail(function, "cannot create a pipe to run '", prog, "': ", std::strerror(errno));
  report_read.reset(lift(rep[0]));
  report_write.reset(lift(rep[1]));
  if (in.get() < 0 || out.get() < 0 || report_read.get() < 0 || report_write.get() < 0 ||
      (!io.stderr_to_stdout && err.get() < 0))
    fail(function, "cannot open the files to run '", prog, "': ", std::strerror(errno));

  Plan plan;
  for (const std::string& a : argv) plan.argv.push_back(const_cast<char*>(a.c_str()));
  plan.argv.push_back(nullptr);
  plan.search_path = prog.find('/') == std::string::npos;
  plan.in_fd = in.get();
  plan.out_fd = out.get();
  plan.err_fd = io.stderr_to_stdout ? out.get() : err.get();
  plan.report_fd = report_write.get();
  plan.parent = ::getpid();
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    plan.max_fd = static_cast<int>(std::min<rlim_t>(lim.rlim_cur, 1 << 16));

  const auto t0 = std::chrono::steady_clock::now();
  const pid_t sup = fork_bare();
  if (sup < 0) fail(function, "cannot start '", prog, "': ", std::strerror(errno));
  if (sup == 0) supervise(plan);
  ::setpgid(sup, sup);  // also here, so a kill of the group can never miss it
  in.reset();
  out.reset();
  err.reset();
  report_write.reset();

  // The report pipe closes on a successful exec, or carries the errno of a failed one.
  int exec_errno = 0;
  ssize_t got;
  do got = ::read(report_read.get(), &exec_errno, sizeof exec_errno);
  while (got < 0 && errno == EINTR);
  ChildResult res;
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    while (::waitpid(sup, &res.status, 0) < 0 && errno == EINTR) {
    }
    fail(function, "cannot start '", prog, "': ", std::strerror(exec_errno));
  }

  if (captured) captured->clear();
  int pause_ms = 1;
  for (;;) {
    if (cap_read.get() >= 0) {
      struct pollfd pf {cap_read.get(), POLLIN, 0};
      ::poll(&pf, 1, 20);
      if (!drain(cap_read.get(), captured)) cap_read.reset();
    }
    const pid_t w = ::waitpid(sup, &res.status, WNOHANG);
    if (w == sup) break;
    if (w < 0 && errno != EINTR) {
      res.status = -1;
      break;
    }
    if (timeout_s > 0 && seconds_since(t0) >= timeout_s) {
      ::kill(-sup, SIGKILL);
      ::kill(sup, SIGKILL);
      while (::waitpid(sup, &res.status, 0) < 0 && errno == EINTR) {
      }
      res.timed_out = true;
      break;
    }
    if (cap_read.get() < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      pause_ms = std::min(pause_ms * 2, 20);
    }
  }
  if (cap_read.get() >= 0) drain(cap_read.get(), captured);  // what was written before exit
  res.seconds = seconds_since(t0);
  return res;
}

}  // namespace tessel::detail
