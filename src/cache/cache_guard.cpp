// Kernel cache guards: bounded lock waits that name the holder, ssh-style ownership and mode checks
// before anything is loaded, and the private folder used when the shared one cannot be.
#include "cache/cache_guard.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>

#include "support/warning.hpp"

namespace tessel::detail {

namespace {

constexpr const char* kDirHint = " (set TESSEL_CACHE_DIR to a writable folder)";
constexpr double kSayWaitingAfterS = 2;

// The pid a lock holder wrote into the lock file, when that process still exists; else 0.
long holder_pid(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return 0;
  long pid = 0;
  if (std::fscanf(f, "%ld", &pid) != 1) pid = 0;
  std::fclose(f);
  if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) return 0;
  return pid;
}

std::string holder_text(const std::string& path) {
  const long pid = holder_pid(path);
  return pid > 0 ? "process " + std::to_string(pid) : "another process";
}

std::string octal_mode(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

bool trusted_owner(uid_t uid) { return uid == ::geteuid() || uid == 0; }

}  // namespace

void fail_folder(const char* function, const char* what, const std::string& path, int err) {
  fail(function, what, " '", path, "': ", std::strerror(err), kDirHint);
}

KeyLock::KeyLock(const char* function, const std::string& dir, const std::string& path,
                 double wait_s) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  int pause_ms = 1;
  bool said = false;
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fail_folder(function, "cannot write in the kernel cache folder", dir, errno);
    for (;;) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) break;
      const int err = errno;
      if (err == EINTR) continue;
      if (err != EWOULDBLOCK) {
        ::close(fd);
        fail_folder(function, "cannot lock a file in the kernel cache folder", dir, err);
      }
      if (wait_s < 0) {
        ::close(fd);
        return;
      }
      const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
      if (wait_s > 0 && waited >= wait_s) {
        ::close(fd);
        std::ostringstream os;
        os << "tessel::" << function << ": the kernel cache lock '" << path << "' is held by "
           << holder_text(path) << " and was not released within " << wait_s
           << " s (TESSEL_CACHE_LOCK_TIMEOUT sets this wait)";
        throw LockTimeout(os.str());
      }
      if (!said && waited >= kSayWaitingAfterS) {
        said = true;
        std::ostringstream os;
        os << "waiting for the kernel cache lock '" << path << "', held by " << holder_text(path)
           << " (most likely compiling the same kernel)";
        if (wait_s > 0) os << "; giving up after " << wait_s << " s";
        warn_once("lock-wait:" + path, os.str());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      pause_ms = std::min(pause_ms * 2, 50);
    }
    struct stat held, now;
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino) {
      fd_ = fd;
      break;
    }
    ::close(fd);
  }
  // Name the holder for whoever waits next; a failure here only makes that message vaguer.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    const ssize_t ignored = ::pwrite(fd_, pid.data(), pid.size(), 0);
    (void)ignored;
  }
}

KeyLock::~KeyLock() {
  if (fd_ < 0) return;
  // Explicit unlock: a child forked before it could close the descriptor may still share it.
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

std::string unsafe_folder_reason(const std::string& root, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path abs_root = fs::absolute(root, ec).lexically_normal();
  const fs::path abs_dir = fs::absolute(dir, ec).lexically_normal();
  const std::string advice = "; tessel will not load kernels from it. Fix it with `chmod go-w '";
  // From `dir` up to `root`: ours, and writable by nobody else.
  for (fs::path p = abs_dir;; p = p.parent_path()) {
    struct stat st;
    if (::stat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        return "the kernel cache path '" + p.string() + "' is not a folder";
      if (!trusted_owner(st.st_uid))
        return "the kernel cache folder '" + p.string() + "' belongs to user id " +
               std::to_string(st.st_uid) + ", not to you (user id " +
               std::to_string(::geteuid()) + "), so its owner could plant libraries in it; " +
               "tessel will not load kernels from it. Set TESSEL_CACHE_DIR to a folder of your own";
      if (st.st_mode & (S_IWGRP | S_IWOTH))
        return "the kernel cache folder '" + p.string() + "' (mode " + octal_mode(st.st_mode) +
               ") is writable by " + (st.st_mode & S_IWOTH ? "all users" : "its group") +
               advice + p.string() + "'` or set TESSEL_CACHE_DIR to a private folder";
    }
    if (p == abs_root || p == p.parent_path()) break;
  }
  // Above `root`: others may not rename our folders away, unless a sticky bit forbids it (/tmp).
  for (fs::path p = abs_root.parent_path();; p = p.parent_path()) {
    struct stat st;
    if (::stat(p.c_str(), &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) &&
        !(st.st_mode & S_ISVTX))
      return "the folder '" + p.string() + "' above the kernel cache (mode " +
             octal_mode(st.st_mode) + ") is writable by other users, who could replace the cache" +
             advice + p.string() + "'` or set TESSEL_CACHE_DIR to a private folder";
    if (p == p.parent_path()) break;
  }
  return "";
}

bool trusted_file(const struct stat& st) {
  return S_ISREG(st.st_mode) && trusted_owner(st.st_uid) && !(st.st_mode & (S_IWGRP | S_IWOTH));
}

std::string private_cache_root() {
  static std::once_flag once;
  static std::string* root = nullptr;
  static pid_t creator = 0;
  std::call_once(once, [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/tessel-private-XXXXXX";
    if (!::mkdtemp(templ.data()))
      fail_folder("DiskCache", "cannot create a private kernel folder", templ, errno);
    root = new std::string(templ);
    creator = ::getpid();
    std::atexit([] {
      if (::getpid() != creator) return;  // a forked child exiting: the folder is its parent's
      std::error_code ec;
      std::filesystem::remove_all(*root, ec);
    });
  });
  return *root;
}

}  // namespace tessel::detail
