// Run-time facts read from the environment and the machine: cache folder, threads, SIMD level and
// the C++ compiler used for kernels.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "cache/cache_guard.hpp"
#include "cache/compiler.hpp"
#include "cache/disk_cache.hpp"
#include "cache/subprocess.hpp"
#include "tessel/error.hpp"
#include "tessel/runtime.hpp"

namespace tessel {

namespace {

// An empty variable counts as unset, as in most tools (`TESSEL_X= cmd` clears it).
const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// `name` itself when it contains '/', else the first executable match in $PATH; "" when none.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return is_executable_file(name) ? name : "";
  const char* path = env("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  for (;;) {
    size_t end = dirs.find(':', start);
    std::string dir =
        dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    if (end == std::string::npos) return "";
    start = end + 1;
  }
}

CompilerInfo probe_compiler(const std::string& requested) {
  CompilerInfo info;
  if (!requested.empty()) {
    info.path = find_program(requested);
    if (info.path.empty()) {
      info.path = requested;
      info.problem = requested.find('/') != std::string::npos
                         ? "TESSEL_CXX=" + requested + " is not executable"
                         : "TESSEL_CXX=" + requested + " was not found in PATH";
      return info;
    }
  } else {
#ifdef TESSEL_DEFAULT_CXX
    if (is_executable_file(TESSEL_DEFAULT_CXX)) info.path = TESSEL_DEFAULT_CXX;
#endif
    for (const char* name : {"c++", "g++", "clang++"}) {
      if (!info.path.empty()) break;
      info.path = find_program(name);
    }
    if (info.path.empty()) {
      info.problem = "no C++ compiler found: set TESSEL_CXX or install g++";
      return info;
    }
  }
  std::string out;
  int status;
  try {
    status = detail::run_capture({info.path, "--version"}, out);
  } catch (const Error& e) {
    info.problem = info.path + " could not be started: " + e.what();
    return info;
  }
  if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    info.problem = info.path + " --version failed with " + detail::describe_wait_status(status);
    return info;
  }
  info.version = out.substr(0, out.find('\n'));
  while (!info.version.empty() && (info.version.back() == '\r' || info.version.back() == ' '))
    info.version.pop_back();
  info.usable = true;
  return info;
}

// The SIMD levels of this architecture, lowest first: TESSEL_SIMD may name any up to the CPU's.
#if defined(__aarch64__)
// Advanced SIMD (NEON) is part of every ARMv8-A core; SVE's vector length is not known when the
// kernel is written, so the kernels use NEON's 128-bit vectors there too.
constexpr const char* kSimdNames[] = {"scalar", "neon"};
int detected_simd() { return 1; }
#else
enum SimdRank { kScalar = 0, kSse2 = 1, kAvx2 = 2, kAvx512 = 3 };
constexpr const char* kSimdNames[] = {"scalar", "sse2", "avx2", "avx512"};

int detected_simd() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return kAvx2;
  if (__builtin_cpu_supports("sse2")) return kSse2;
#endif
  return kScalar;
}
#endif

}  // namespace

std::string cache_dir() {
  if (const char* v = env("TESSEL_CACHE_DIR")) return v;
  if (const char* v = env("XDG_CACHE_HOME")) return std::string(v) + "/tessel";
  if (const char* v = env("HOME")) return std::string(v) + "/.cache/tessel";
  return "/tmp/tessel-cache-" + std::to_string(::getuid());
}

std::string cache_dir_problem() {
  const std::string root = cache_dir();
  for (const CacheKind* kind : {&DiskCache::kCpu, &DiskCache::kCuda}) {
    std::string why = detail::unsafe_folder_reason(root, root + "/" + kind->folder);
    if (!why.empty()) return why;
  }
  return "";
}

std::vector<CacheEntry> cache_list() {
  std::vector<CacheEntry> all = DiskCache::instance(DiskCache::kCpu).list();
  for (CacheEntry& e : DiskCache::instance(DiskCache::kCuda).list()) all.push_back(std::move(e));
  return all;
}

int64_t cache_clear() {
  return DiskCache::instance(DiskCache::kCpu).clear() +
         DiskCache::instance(DiskCache::kCuda).clear();
}

int num_threads() {
  if (const char* v = env("TESSEL_NUM_THREADS")) {
    std::string s = v;
    int n = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size() || n <= 0)
      detail::fail("num_threads", "TESSEL_NUM_THREADS='", s,
                   "' is not a positive integer (expected e.g. TESSEL_NUM_THREADS=4, or unset it ",
                   "to use all cores)");
    return n;
  }
  // Read once: glibc answers hardware_concurrency() by reading sysfs (an open, a read and a close
  // on every call), which was most of a small reduction's fixed cost.
  static const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return cores;
}

namespace {

// A non-negative number of seconds from `name`, else `fallback`.
double seconds_from_env(const char* name, double fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s >= 0) || s > 1e9)
    detail::fail("runtime", name, "='", v, "' is not a number of seconds (expected e.g. ", name,
                 "=120, or 0 for no limit)");
  return s;
}

}  // namespace

double compile_timeout_s() { return seconds_from_env("TESSEL_COMPILE_TIMEOUT", 60); }

double cache_lock_timeout_s() {
  const double compile = compile_timeout_s();
  return seconds_from_env("TESSEL_CACHE_LOCK_TIMEOUT", compile > 0 ? compile + 10 : 0);
}

std::string simd_level() {
  // The CPU does not change while we run; only the override is re-read (tests flip it).
  static const int detected = detected_simd();
  const char* v = env("TESSEL_SIMD");
  if (!v) return kSimdNames[detected];
  std::string want = v;
  auto it = std::find(std::begin(kSimdNames), std::end(kSimdNames), want);
  if (it == std::end(kSimdNames)) {
    std::string levels;
    for (const char* l : kSimdNames) levels += std::string(levels.empty() ? "" : ", ") + l;
    detail::fail("simd_level", "TESSEL_SIMD='", want,
                 "' is not a SIMD level of this machine (expected one of: ", levels, ")");
  }
  int rank = static_cast<int>(it - std::begin(kSimdNames));
  if (rank > detected)
    detail::fail("simd_level", "TESSEL_SIMD=", want, " is above what this CPU supports (",
                 kSimdNames[detected], "); the variable may only lower the level");
  return want;
}

CompilerInfo compiler_info() {
  // Probing spawns a process, so do it once per TESSEL_CXX value (keyed, not once per process,
  // so a test or tool that changes TESSEL_CXX sees the new choice). Bounded by the distinct
  // TESSEL_CXX values a process sets.
  static std::mutex mu;
  static auto* cache = new std::map<std::string, CompilerInfo>();
  const char* v = env("TESSEL_CXX");
  std::string requested = v ? v : "";
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(requested);
  if (it == cache->end()) it = cache->emplace(requested, probe_compiler(requested)).first;
  return it->second;
}

}  // namespace tessel
