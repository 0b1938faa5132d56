// Run-time facts and controls: compiler, SIMD level, threads, kernel cache.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tessel {

struct CompilerInfo {
  bool usable = false;
  std::string path;     // e.g. /usr/bin/c++
  std::string version;  // first line of --version
  std::string problem;  // why it is not usable, in plain words
};

CompilerInfo compiler_info();
std::string simd_level();  // "avx512", "avx2", "sse2", "scalar" (x86) or "neon", "scalar" (aarch64)
int num_threads();         // TESSEL_NUM_THREADS, else all cores

/// Seconds a run-time compile may run before it is stopped: TESSEL_COMPILE_TIMEOUT, default 60,
/// 0 for no limit. Backend::Auto then evaluates the reduction with the interpreter (and says so
/// once); Backend::Compiled throws.
double compile_timeout_s();
/// Seconds to wait for another process's lock on a kernel cache entry before compiling into a
/// private folder instead: TESSEL_CACHE_LOCK_TIMEOUT, default the compile limit + 10 (0: forever).
double cache_lock_timeout_s();

/// Where tessel's warnings go (a fallback to the interpreter, an unsafe cache folder, a wait for a
/// lock): each distinct warning is given once per process to `handler`; by default it is printed
/// on stderr as "tessel: warning: ...". An empty handler restores the default.
void set_warning_handler(std::function<void(const std::string&)> handler);

struct CacheEntry {
  std::string key;
  std::string path;
  int64_t bytes = 0;
};
std::string cache_dir();  // TESSEL_CACHE_DIR, else $XDG_CACHE_HOME/tessel, else ~/.cache/tessel
std::vector<CacheEntry> cache_list();
/// Why kernels are not loaded from cache_dir() (another user could write there), with the fix;
/// "" when the folder is safe or does not exist yet.
std::string cache_dir_problem();
int64_t cache_clear();  // returns the number of entries removed
/// NVRTC compiles CUDA kernels at run time, with or without a GPU: "NVRTC 13.0 (libnvrtc.so)",
/// or why it is not usable.
std::string nvrtc_status();
/// The CUDA driver and GPUs: "driver 12.4 (libcuda.so.1); GPU 0: NVIDIA H100 ..., sm_90, 81559
/// MiB", or why CUDA is not usable (no driver library, cuInit failed, no GPU).
std::string cuda_status();
/// Whether reductions can run on a GPU here: a CUDA driver that initialises and at least one GPU.
bool cuda_available();

}  // namespace tessel
