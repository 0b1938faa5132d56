// Bounded compiles and a guarded kernel cache: compile time limit and the interpreter fallback, a
// killed caller takes its compiler along, bounded lock waits, folders other users could write.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "reduction_helpers.hpp"
#include "cache/disk_cache.hpp"
#include "temp_env.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;
using tessel::test_env::ScopedEnv;
using tessel::test_env::TempDir;
using tessel::testing::expect_error;
using tessel::testing::random_array;
using tessel::testing::with;

namespace {

const std::string kKey = test_env::cache_key();
const std::string kLockKey = test_env::cache_key('1');

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Collects the library's warnings for one scope, then restores the default (stderr).
class Warnings {
 public:
  Warnings() {
    set_warning_handler([this](const std::string& m) {
      std::lock_guard lk(mu_);
      seen_.push_back(m);
    });
  }
  ~Warnings() { set_warning_handler(nullptr); }
  std::vector<std::string> all() {
    std::lock_guard lk(mu_);
    return seen_;
  }
  bool any_contains(const std::string& part) {
    for (const std::string& m : all())
      if (m.find(part) != std::string::npos) return true;
    return false;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> seen_;
};

// A "compiler" that answers --version, writes part of its output file, then hangs in a child
// process (as g++ does in cc1plus) and records both pids in `pid_file`.
std::string hanging_compiler(const TempDir& dir, const std::string& pid_file) {
  const std::string cc = dir / "hanging-cc";
  std::ofstream f(cc);
  f << "#!/bin/sh\nif [ \"$1\" = --version ]; then echo hanging-cc 1.0; exit 0; fi\n"
       "prev=; for a in \"$@\"; do [ \"$prev\" = -o ] && echo partial > \"$a\"; prev=$a; done\n"
       "sleep 120 &\necho \"$$ $!\" > '"
    << pid_file << ".tmp'\nmv '" << pid_file << ".tmp' '" << pid_file << "'\nwait\n";
  f.close();
  ::chmod(cc.c_str(), 0755);
  return cc;
}

bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  // A zombie waits for a parent that may never reap it (pid 1 in a container): it runs no more.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

bool all_gone_within(const std::vector<pid_t>& pids, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    bool gone = true;
    for (pid_t p : pids) gone = gone && process_gone(p);
    if (gone) return true;
    if (seconds_since(t0) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<pid_t> read_pids(const std::string& path, double wait_s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < wait_s) {
    std::ifstream in(path);
    long a = 0, b = 0;
    if (in >> a >> b) return {static_cast<pid_t>(a), static_cast<pid_t>(b)};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {};
}

std::vector<std::string> temp_files_under(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    if (it->path().filename().string().find(".tmp-") != std::string::npos)
      out.push_back(it->path().string());
  return out;
}

Reduction unique_gauss(double scale) {
  return Reduction(ReductionOp::Sum, exp(-scale * sqdist(vi(0, 3), vj(1, 3))) * vj(2, 1));
}

std::vector<Array> gauss_inputs() {
  return {random_array(DType::Float32, {6, 3}, 1), random_array(DType::Float32, {9, 3}, 2),
          random_array(DType::Float32, {9, 1}, 3)};
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Publishes `key` in `cache` and returns its path; counts builds in `builds`.
std::string publish(DiskCache& cache, int& builds, const std::string& key = kKey) {
  return cache.get_or_build(key, "// source\n", [&](const std::string&, const std::string& so) {
    ++builds;
    std::ofstream(so) << "library bytes " << builds;
  });
}

}  // namespace

TEST(CompileLimit, AutoFallsBackToTheInterpreterAndSaysSoOnce) {
  TempDir dir;
  const std::string pid_file = dir / "pids";
  ScopedEnv cxx("TESSEL_CXX", hanging_compiler(dir, pid_file));
  ScopedEnv cache("TESSEL_CACHE_DIR", dir / "cache");
  ScopedEnv limit("TESSEL_COMPILE_TIMEOUT", "1");
  Warnings warnings;
  const Reduction r = unique_gauss(1.0625);
  const auto in = gauss_inputs();
  const auto t0 = std::chrono::steady_clock::now();
  const Array got = evaluate(r, in)[0];
  EXPECT_LT(seconds_since(t0), 15) << "the compile limit did not stop the compiler";
  const Array want = evaluate(r, in, with(Backend::Interpreter))[0];
  for (int64_t q = 0; q < want.size(); ++q) EXPECT_EQ(got.at(q), want.at(q));
  ASSERT_EQ(warnings.all().size(), 1u);
  EXPECT_TRUE(warnings.any_contains("TESSEL_COMPILE_TIMEOUT")) << warnings.all()[0];
  EXPECT_TRUE(warnings.any_contains("interpreter")) << warnings.all()[0];
  // The compiler and the process it started were killed, not left behind.
  EXPECT_TRUE(all_gone_within(read_pids(pid_file, 1), 5));
  // Later calls neither wait again nor repeat the warning.
  std::filesystem::remove(pid_file);
  const auto t1 = std::chrono::steady_clock::now();
  evaluate(r, in);
  EXPECT_LT(seconds_since(t1), 0.9);
  EXPECT_EQ(warnings.all().size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(pid_file)) << "auto compiled the same kernel again";
  // Asked for explicitly, the compiled backend reports the limit instead of falling back.
  expect_error([&] { evaluate(r, in, with(Backend::Compiled)); },
               {"run_compiler", "stopped after 1 s", "TESSEL_COMPILE_TIMEOUT", ".log"});
  EXPECT_TRUE(temp_files_under(dir / "cache").empty());
}

TEST(CompileLimit, BadLimitValueIsNamed) {
  ScopedEnv limit("TESSEL_COMPILE_TIMEOUT", "soon");
  expect_error([] { compile_timeout_s(); }, {"TESSEL_COMPILE_TIMEOUT='soon'", "seconds"});
  ScopedEnv lock("TESSEL_CACHE_LOCK_TIMEOUT", "-3");
  ScopedEnv fine("TESSEL_COMPILE_TIMEOUT", "0");
  EXPECT_EQ(compile_timeout_s(), 0);
  expect_error([] { cache_lock_timeout_s(); }, {"TESSEL_CACHE_LOCK_TIMEOUT='-3'"});
}

TEST(CompileLimit, KilledCallerTakesItsCompilerAlongAndLeavesNoTemporaries) {
  TempDir dir;
  const std::string pid_file = dir / "pids", root = dir / "cache";
  const std::string cc = hanging_compiler(dir, pid_file);
  const pid_t caller = fork();
  if (caller == 0) {
    setenv("TESSEL_CXX", cc.c_str(), 1);
    setenv("TESSEL_CACHE_DIR", root.c_str(), 1);
    setenv("TESSEL_COMPILE_TIMEOUT", "0", 1);
    try {
      evaluate(unique_gauss(1.1875), gauss_inputs(), with(Backend::Compiled));
    } catch (...) {
    }
    _exit(3);
  }
  const std::vector<pid_t> pids = read_pids(pid_file, 20);
  ASSERT_EQ(pids.size(), 2u) << "the fake compiler never started";
  EXPECT_FALSE(temp_files_under(root).empty()) << "expected the half-written output";
  ::kill(caller, SIGKILL);
  int status = 0;
  ::waitpid(caller, &status, 0);
  EXPECT_TRUE(all_gone_within(pids, 5)) << "the compiler outlived its killed caller";
  // The next build in that cache (any key) removes the dead builder's leftovers.
  DiskCache cache(root);
  int builds = 0;
  publish(cache, builds);
  EXPECT_EQ(builds, 1);
  EXPECT_TRUE(temp_files_under(root).empty());
}

TEST(CacheLock, HeldLockIsWaitedOnForABoundedTimeNamingItsHolder) {
  TempDir dir;
  DiskCache cache(dir / "cache");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t holder = fork();
  if (holder == 0) {
    // Holds the key's lock: its build "compiles" for a long time.
    cache.get_or_build(kLockKey, "// src\n", [&](const std::string&, const std::string&) {
      char c = 1;
      if (write(ready[1], &c, 1) != 1) _exit(4);
      sleep(60);
    });
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ScopedEnv wait("TESSEL_CACHE_LOCK_TIMEOUT", "2.5");
  Warnings warnings;
  int builds = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = publish(cache, builds, kLockKey);
  const double waited = seconds_since(t0);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  EXPECT_GE(waited, 2.4);
  EXPECT_LT(waited, 10);
  EXPECT_EQ(builds, 1);
  EXPECT_FALSE(starts_with(path, cache.root())) << "expected a private folder, got " << path;
  EXPECT_TRUE(std::filesystem::exists(path));
  const std::string pid = "process " + std::to_string(holder);
  EXPECT_TRUE(warnings.any_contains("waiting for the kernel cache lock")) << warnings.all().size();
  EXPECT_TRUE(warnings.any_contains(pid));
  EXPECT_TRUE(warnings.any_contains("TESSEL_CACHE_LOCK_TIMEOUT"));
  // Once the holder is gone the shared cache is used again.
  std::string again = publish(cache, builds, kLockKey);
  EXPECT_TRUE(starts_with(again, cache.root())) << again;
}

TEST(CacheSafety, FolderWritableByOthersIsNeverLoadedFrom) {
  TempDir dir;
  const std::string root = dir / "cache";
  DiskCache cache(root);
  int builds = 0;
  const std::string good = publish(cache, builds);
  ASSERT_EQ(builds, 1);
  for (const std::string& folder : {root, root + "/kernels", good.substr(0, good.rfind('/'))}) {
    for (mode_t mode : {0777, 0775, 01777}) {
      SCOPED_TRACE(folder + " " + std::to_string(mode));
      ASSERT_EQ(::chmod(folder.c_str(), mode), 0);
      Warnings warnings;
      const std::string path = publish(cache, builds);
      EXPECT_FALSE(starts_with(path, root)) << "loaded from an unsafe folder: " << path;
      EXPECT_TRUE(warnings.any_contains("chmod go-w '" + folder + "'") ||
                  warnings.all().empty());  // said once per cache and process
      ASSERT_EQ(::chmod(folder.c_str(), 0755), 0);
    }
  }
  // Made private again, the published entry is trusted without a rebuild.
  const int before = builds;
  EXPECT_EQ(publish(cache, builds), good);
  EXPECT_EQ(builds, before);
}

TEST(CacheSafety, FirstWarningNamesTheFolderAndTheFix) {
  TempDir dir;
  const std::string root = dir / "open-cache";
  DiskCache cache(root);
  int builds = 0;
  publish(cache, builds);
  ASSERT_EQ(::chmod(root.c_str(), 0777), 0);
  Warnings warnings;
  publish(cache, builds);
  ASSERT_EQ(warnings.all().size(), 1u);
  const std::string m = warnings.all()[0];
  EXPECT_NE(m.find("'" + root + "'"), std::string::npos) << m;
  EXPECT_NE(m.find("writable by all users"), std::string::npos) << m;
  EXPECT_NE(m.find("chmod go-w"), std::string::npos) << m;
  EXPECT_NE(m.find("private"), std::string::npos) << m;
}

TEST(CacheSafety, FolderAboveTheCacheWritableByOthersWithoutStickyBit) {
  TempDir dir;
  const std::string open = dir / "shared";
  ASSERT_EQ(::mkdir(open.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  DiskCache cache(open + "/cache");
  int builds = 0;
  EXPECT_FALSE(starts_with(publish(cache, builds), cache.root()));
  ASSERT_EQ(::chmod(open.c_str(), 01777), 0);  // sticky, like /tmp: others cannot rename it
  EXPECT_TRUE(starts_with(publish(cache, builds), cache.root()));
}

TEST(CacheSafety, EntryFileWritableByOthersIsRebuilt) {
  TempDir dir;
  DiskCache cache(dir / "cache");
  int builds = 0;
  const std::string path = publish(cache, builds);
  const std::string manifest = test_env::manifest_of(path);
  for (const std::string& file : {path, manifest}) {
    ASSERT_EQ(::chmod(file.c_str(), 0666), 0);
    const int before = builds;
    EXPECT_EQ(publish(cache, builds), path);
    EXPECT_EQ(builds, before + 1) << file << " was trusted although others may write it";
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);
  }
}

TEST(CacheSafety, FolderOrEntryOfAnotherUserIsNotTrusted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give files to another user";
  TempDir dir;
  const std::string root = dir / "cache";
  DiskCache cache(root);
  int builds = 0;
  const std::string path = publish(cache, builds);
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  EXPECT_EQ(publish(cache, builds), path);
  EXPECT_EQ(builds, 2) << "a library owned by another user was loaded";
  ASSERT_EQ(::chown(root.c_str(), 65534, 65534), 0);
  Warnings warnings;
  EXPECT_FALSE(starts_with(publish(cache, builds), root));
  EXPECT_TRUE(warnings.any_contains("belongs to user id 65534"));
}
