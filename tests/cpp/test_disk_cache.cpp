// Kernel disk cache (build, hit, corruption, failure, several processes and threads) and the
// run-time facts: compiler probing and spawning, thread count, SIMD level, cache folder.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cache/compiler.hpp"
#include "cache/disk_cache.hpp"
#include "temp_env.hpp"
#include "tessel/error.hpp"
#include "tessel/runtime.hpp"

using namespace tessel;
using namespace tessel::test_env;  // TempDir, ScopedEnv, slurp, spit, cache_key, manifest_of

namespace {

const std::string kKey = cache_key();
const std::string kKey2 = cache_key('f');

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// A stand-in for the compiler: counts its calls and writes known bytes.
struct FakeBuild {
  std::string bytes = "fake shared library bytes\n";
  std::atomic<int> calls{0};
  void operator()(const std::string& source_path, const std::string& so_path) {
    ++calls;
    EXPECT_TRUE(exists(source_path)) << source_path;
    spit(so_path, bytes);
  }
};

std::function<void(const std::string&, const std::string&)> ref(FakeBuild& b) {
  return [&b](const std::string& s, const std::string& o) { b(s, o); };
}

int count_lines(const std::string& path) {
  std::string text = slurp(path);
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

// ---- single caller ------------------------------------------------------------------------------

TEST(DiskCache, BuildsOnceThenHits) {
  TempDir tmp;
  DiskCache cache(tmp.path());
  FakeBuild build;
  std::string so = cache.get_or_build(kKey, "int x;", ref(build));
  EXPECT_EQ(build.calls, 1);
  EXPECT_EQ(so, tmp.path() + "/kernels/01/" + kKey + ".so");
  EXPECT_EQ(slurp(so), build.bytes);
  EXPECT_TRUE(exists(manifest_of(so)));
  EXPECT_EQ(slurp(cache.files(kKey).source_path), "int x;");

  EXPECT_EQ(cache.get_or_build(kKey, "int x;", ref(build)), so);
  EXPECT_EQ(build.calls, 1) << "second call must be a hit";

  // A second DiskCache object on the same folder (as another process would) also hits.
  DiskCache again(tmp.path());
  EXPECT_EQ(again.get_or_build(kKey, "int x;", ref(build)), so);
  EXPECT_EQ(build.calls, 1);
}

// A cache that has built kKey once; each test spoils what it published in one way.
class DiskCacheRepair : public ::testing::Test {
 protected:
  // The next lookup must notice the damage, build again (the `calls`-th build) and republish.
  void expect_rebuilt(int calls) {
    EXPECT_EQ(cache.get_or_build(kKey, "src", ref(build)), so);
    EXPECT_EQ(build.calls, calls);
    EXPECT_EQ(slurp(so), build.bytes);
  }

  TempDir tmp;
  DiskCache cache{tmp.path()};
  FakeBuild build;
  const std::string so = cache.get_or_build(kKey, "src", ref(build));
};

TEST_F(DiskCacheRepair, TruncatedLibraryIsDetectedAndRebuilt) {
  ASSERT_EQ(::truncate(so.c_str(), 5), 0);
  expect_rebuilt(2);
}

TEST_F(DiskCacheRepair, SameSizeCorruptionIsDetectedByChecksum) {
  std::string damaged = build.bytes;
  damaged[3] ^= 0x20;
  spit(so, damaged);
  expect_rebuilt(2);
}

TEST_F(DiskCacheRepair, DamagedOrMissingManifestIsDetectedAndRebuilt) {
  const std::string manifest = slurp(manifest_of(so));
  spit(manifest_of(so), manifest.substr(0, manifest.size() / 2));
  expect_rebuilt(2);
  EXPECT_EQ(slurp(manifest_of(so)), manifest);

  ASSERT_EQ(::unlink(manifest_of(so).c_str()), 0);  // as if a publish died half-way
  expect_rebuilt(3);
  EXPECT_EQ(slurp(manifest_of(so)), manifest);
}

TEST(DiskCache, StaleTempFilesFromACrashedBuilderAreRemoved) {
  TempDir tmp;
  DiskCache cache(tmp.path());
  FakeBuild build;
  std::string dir = tmp.path() + "/kernels/01";
  std::filesystem::create_directories(dir);
  std::string stale = dir + "/" + kKey + ".tmp-99999-1.so";
  spit(stale, "half");
  cache.get_or_build(kKey, "src", ref(build));
  EXPECT_FALSE(exists(stale));
}

TEST(DiskCache, FailingBuildPropagatesUnchangedAndPublishesNothing) {
  TempDir tmp;
  DiskCache cache(tmp.path());
  std::string tmp_so;
  try {
    cache.get_or_build(kKey, "src", [&](const std::string&, const std::string& so) {
      tmp_so = so;
      spit(so, "partial");  // a compiler that died after writing some output
      throw Error("tessel::compile: boom");
    });
    FAIL() << "expected tessel::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tessel::compile: boom");
  }
  EXPECT_FALSE(tmp_so.empty());
  EXPECT_FALSE(exists(tmp_so));
  EXPECT_FALSE(exists(cache.files(kKey).so_path));
  EXPECT_TRUE(cache.list().empty());

  // Other exception types also pass through as they are.
  struct Custom {
    int code;
  };
  try {
    cache.get_or_build(kKey, "src",
                       [](const std::string&, const std::string&) { throw Custom{7}; });
    FAIL() << "expected Custom";
  } catch (const Custom& c) {
    EXPECT_EQ(c.code, 7);
  }

  // The lock was released: another process could take it now, and a retry builds.
  std::string lock = tmp.path() + "/kernels/01/" + kKey + ".lock";
  int fd = ::open(lock.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  ::close(fd);
  FakeBuild build;
  EXPECT_EQ(cache.get_or_build(kKey, "src", ref(build)), cache.files(kKey).so_path);
  EXPECT_EQ(build.calls, 1);
}

TEST(DiskCache, BuildThatWritesNothingIsAnError) {
  TempDir tmp;
  DiskCache cache(tmp.path());
  try {
    cache.get_or_build(kKey, "src", [](const std::string&, const std::string&) {});
    FAIL() << "expected tessel::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("produced no shared library"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(cache.list().empty());
}

TEST(DiskCache, RejectsKeysThatAreNot32LowercaseHex) {
  TempDir tmp;
  DiskCache cache(tmp.path());
  FakeBuild build;
  for (const std::string& bad :
       std::vector<std::string>{"", "abc", "../../../../etc/passwd/aaaaaaaaaa",
                                "0123456789ABCDEF0123456789ABCDEF", kKey + "0"}) {
    try {
      cache.get_or_build(bad, "src", ref(build));
      FAIL() << "accepted key " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("32 lowercase hex"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(build.calls, 0);
}

TEST(DiskCache, ListAndClear) {
  TempDir tmp;
  DiskCache cache(tmp.path());
  EXPECT_TRUE(cache.list().empty());  // the folder does not even exist yet
  EXPECT_EQ(cache.clear(), 0);
  FakeBuild build;
  std::string so2 = cache.get_or_build(kKey2, "b", ref(build));
  std::string so1 = cache.get_or_build(kKey, "a", ref(build));
  std::vector<CacheEntry> entries = cache.list();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].key, kKey);
  EXPECT_EQ(entries[0].path, so1);
  EXPECT_EQ(entries[0].bytes, static_cast<int64_t>(build.bytes.size()));
  EXPECT_EQ(entries[1].key, kKey2);
  EXPECT_EQ(entries[1].path, so2);

  EXPECT_EQ(cache.clear(), 2);
  EXPECT_TRUE(cache.list().empty());
  EXPECT_FALSE(exists(so1));
  EXPECT_FALSE(exists(cache.files(kKey).source_path));
  EXPECT_EQ(cache.clear(), 0);

  cache.get_or_build(kKey, "a", ref(build));  // usable again after clear
  EXPECT_EQ(build.calls, 3);
  EXPECT_EQ(cache.list().size(), 1u);
}

TEST(DiskCache, UnwritableFolderNamesItAndTheVariable) {
  TempDir tmp;
  spit(tmp / "not-a-folder", "x");
  DiskCache cache(tmp / "not-a-folder/cache");
  FakeBuild build;
  try {
    cache.get_or_build(kKey, "src", ref(build));
    FAIL() << "expected tessel::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(tmp / "not-a-folder"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Not a directory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("TESSEL_CACHE_DIR"), std::string::npos) << msg;
  }
  EXPECT_EQ(build.calls, 0);
}

// ---- several callers at once --------------------------------------------------------------------

TEST(DiskCacheConcurrency, SeveralProcessesBuildExactlyOnce) {
  TempDir tmp;
  const std::string counter = tmp / "builds.txt";
  const int kChildren = 4;
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: wait for the start signal (EOF on the pipe) so all ask at the same moment.
      ::close(go[1]);
      char byte;
      while (::read(go[0], &byte, 1) > 0) {
      }
      int rc = 0;
      try {
        DiskCache cache(tmp.path() + "/cache");
        std::string so =
            cache.get_or_build(kKey, "src", [&](const std::string&, const std::string& so_path) {
              std::this_thread::sleep_for(std::chrono::milliseconds(200));
              int fd = ::open(counter.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
              std::string line = "built by " + std::to_string(::getpid()) + "\n";
              if (::write(fd, line.data(), line.size()) < 0) rc = 3;
              ::close(fd);
              spit(so_path, "library bytes");
            });
        spit(tmp / ("child-" + std::to_string(c) + ".out"), so);
      } catch (...) {
        rc = 2;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_EQ(count_lines(counter), 1) << slurp(counter);
  std::string expected = tmp.path() + "/cache/kernels/01/" + kKey + ".so";
  for (int c = 0; c < kChildren; ++c)
    EXPECT_EQ(slurp(tmp / ("child-" + std::to_string(c) + ".out")), expected);
  EXPECT_EQ(slurp(expected), "library bytes");
  EXPECT_EQ(DiskCache(tmp.path() + "/cache").list().size(), 1u);
}

TEST(DiskCacheConcurrency, SeveralThreadsBuildExactlyOnce) {
  TempDir tmp;
  DiskCache cache(tmp.path());
  std::atomic<int> builds{0}, ready{0};
  const int kThreads = 8;
  std::vector<std::string> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ++ready;
      while (ready < kThreads) std::this_thread::yield();
      results[t] = cache.get_or_build(kKey, "src", [&](const std::string&, const std::string& so) {
        ++builds;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        spit(so, "bytes");
      });
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(builds, 1);
  for (const std::string& r : results) EXPECT_EQ(r, cache.files(kKey).so_path);
}

TEST(DiskCacheConcurrency, DifferentKeysBuildInParallel) {
  TempDir tmp;
  DiskCache cache(tmp.path());
  // Each build waits (up to 5 s) for the other to be inside its build too: only possible if one
  // key's lock does not block another key.
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  auto build = [&](const std::string&, const std::string& so) {
    ++inside;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (inside < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (inside == 2) overlapped = true;
    spit(so, "bytes");
  };
  std::thread a([&] { cache.get_or_build(kKey, "a", build); });
  std::thread b([&] { cache.get_or_build(kKey2, "b", build); });
  a.join();
  b.join();
  EXPECT_TRUE(overlapped) << "one key's lock must not block another key";
  EXPECT_EQ(cache.list().size(), 2u);
}

// ---- compiler -----------------------------------------------------------------------------------

TEST(RuntimeCompiler, CompilesAValidSourceIntoASharedLibrary) {
  TempDir tmp;
  spit(tmp / "ok.cpp", "extern \"C\" int tessel_answer() { return 42; }\n");
  run_compiler(TESSEL_CXX_COMPILER,
               {"-shared", "-fPIC", "-O1", "-o", tmp / "ok.so", tmp / "ok.cpp"}, tmp / "ok.log");
  struct stat st;
  ASSERT_EQ(::stat((tmp / "ok.so").c_str(), &st), 0);
  EXPECT_GT(st.st_size, 0);
}

TEST(RuntimeCompiler, InvalidSourceThrowsWithTheLogAndItsPath) {
  TempDir tmp;
  spit(tmp / "bad.cpp", "int f( { return }\n");
  try {
    run_compiler(TESSEL_CXX_COMPILER, {"-shared", "-fPIC", "-o", tmp / "bad.so", tmp / "bad.cpp"},
                 tmp / "bad.log");
    FAIL() << "expected tessel::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("tessel::run_compiler"), std::string::npos) << msg;
    EXPECT_NE(msg.find("failed with exit code"), std::string::npos) << msg;
    EXPECT_NE(msg.find("error"), std::string::npos) << msg;
    EXPECT_NE(msg.find(tmp / "bad.log"), std::string::npos) << msg;
  }
  EXPECT_NE(slurp(tmp / "bad.log").find("error"), std::string::npos);
}

TEST(RuntimeCompiler, MissingCompilerThrows) {
  TempDir tmp;
  EXPECT_THROW(run_compiler(tmp / "no-such-compiler", {"--version"}, tmp / "log"), Error);
}

TEST(RuntimeCompiler, CompilerInfoFindsAUsableCompiler) {
  ScopedEnv cxx("TESSEL_CXX", std::nullopt);
  CompilerInfo info = compiler_info();
  EXPECT_TRUE(info.usable) << info.problem;
  EXPECT_FALSE(info.path.empty());
  EXPECT_FALSE(info.version.empty());
  EXPECT_TRUE(info.problem.empty());
  std::string id = compiler_identity();
  EXPECT_NE(id.find(info.path), std::string::npos);
  EXPECT_NE(id.find(info.version), std::string::npos);
}

TEST(RuntimeCompiler, CompilerInfoExplainsABadTesselCxx) {
  {
    ScopedEnv cxx("TESSEL_CXX", "/x/y");
    CompilerInfo info = compiler_info();
    EXPECT_FALSE(info.usable);
    EXPECT_EQ(info.problem, "TESSEL_CXX=/x/y is not executable");
  }
  {
    ScopedEnv cxx("TESSEL_CXX", "/bin/false");  // runs, but --version fails
    CompilerInfo info = compiler_info();
    EXPECT_FALSE(info.usable);
    EXPECT_EQ(info.problem, "/bin/false --version failed with exit code 1");
  }
  {
    ScopedEnv cxx("TESSEL_CXX", TESSEL_CXX_COMPILER);
    EXPECT_TRUE(compiler_info().usable);
  }
}

// ---- threads, SIMD, cache folder ----------------------------------------------------------------

TEST(RuntimeInfo, NumThreadsFromEnvironment) {
  {
    ScopedEnv n("TESSEL_NUM_THREADS", "3");
    EXPECT_EQ(num_threads(), 3);
  }
  for (const char* bad : {"abc", "0", "-2", "3x", "99999999999999"}) {
    ScopedEnv n("TESSEL_NUM_THREADS", bad);
    try {
      num_threads();
      FAIL() << "accepted " << bad;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("TESSEL_NUM_THREADS"), std::string::npos) << msg;
      EXPECT_NE(msg.find(bad), std::string::npos) << msg;
    }
  }
  ScopedEnv n("TESSEL_NUM_THREADS", std::nullopt);
  EXPECT_GE(num_threads(), 1);
}

TEST(RuntimeInfo, SimdLevelAndItsOverride) {
  ScopedEnv unset("TESSEL_SIMD", std::nullopt);
  std::string native = simd_level();
  // This architecture's levels, lowest first, and one of the other architecture's.
#if defined(__aarch64__)
  const std::vector<std::string> order = {"scalar", "neon"};
  const char* foreign = "avx2";
#else
  const std::vector<std::string> order = {"scalar", "sse2", "avx2", "avx512"};
  const char* foreign = "neon";
#endif
  auto pos = std::find(order.begin(), order.end(), native);
  ASSERT_NE(pos, order.end()) << native;
  for (auto it = order.begin(); it <= pos; ++it) {
    ScopedEnv s("TESSEL_SIMD", *it);
    EXPECT_EQ(simd_level(), *it);
  }
  for (auto it = pos + 1; it < order.end(); ++it) {  // asking for more than the CPU has
    ScopedEnv s("TESSEL_SIMD", *it);
    EXPECT_THROW(simd_level(), Error);
  }
  ScopedEnv s("TESSEL_SIMD", foreign);
  try {
    simd_level();
    FAIL() << "accepted " << foreign;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::string("TESSEL_SIMD='") + foreign + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("expected one of: scalar"), std::string::npos) << what;
  }
}

TEST(RuntimeInfo, CacheDirPrecedence) {
  ScopedEnv a("TESSEL_CACHE_DIR", "/c/tessel-dir");
  ScopedEnv b("XDG_CACHE_HOME", "/c/xdg");
  ScopedEnv c("HOME", "/c/home");
  EXPECT_EQ(cache_dir(), "/c/tessel-dir");
  {
    ScopedEnv u("TESSEL_CACHE_DIR", std::nullopt);
    EXPECT_EQ(cache_dir(), "/c/xdg/tessel");
    ScopedEnv v("XDG_CACHE_HOME", std::nullopt);
    EXPECT_EQ(cache_dir(), "/c/home/.cache/tessel");
    ScopedEnv w("HOME", std::nullopt);
    EXPECT_EQ(cache_dir(), "/tmp/tessel-cache-" + std::to_string(::getuid()));
  }
}

TEST(RuntimeInfo, CacheListAndClearUseTheCacheFolder) {
  TempDir tmp;
  ScopedEnv dir("TESSEL_CACHE_DIR", tmp.path());
  EXPECT_EQ(DiskCache::instance().root(), tmp.path());
  EXPECT_TRUE(cache_list().empty());
  FakeBuild build;
  DiskCache::instance().get_or_build(kKey, "src", ref(build));
  ASSERT_EQ(cache_list().size(), 1u);
  EXPECT_EQ(cache_list()[0].key, kKey);
  EXPECT_EQ(cache_clear(), 1);
  EXPECT_TRUE(cache_list().empty());
}
