// `tessel doctor` (what this machine offers, in plain words) and `tessel cache list|clear`.
#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "cli.hpp"
#include "tessel/tessel.hpp"

namespace tessel::cli {

namespace {

void row(const char* label, const std::string& text) {
  std::printf("%-10s %s\n", label, text.c_str());
}

std::string compiler_line() {
  const CompilerInfo cc = compiler_info();
  if (cc.usable) return "ok: " + cc.path + " (" + cc.version + ")";
  return "NOT USABLE: " + cc.problem +
         ". Reductions still run on the built-in interpreter, only slower.";
}

std::string simd_line() {
  try {
    std::string level = simd_level();
    return level + (env_or_null("TESSEL_SIMD") ? " (lowered by TESSEL_SIMD)"
                                               : " (generated kernels target this level)");
  } catch (const Error& e) {
    return std::string("problem: ") + e.what();
  }
}

std::string threads_line() {
  try {
    const int n = num_threads();
    return std::to_string(n) + (env_or_null("TESSEL_NUM_THREADS")
                                    ? " (from TESSEL_NUM_THREADS)"
                                    : " (all cores; set TESSEL_NUM_THREADS to change)");
  } catch (const Error& e) {
    return std::string("problem: ") + e.what();
  }
}

std::string cache_line() {
  const std::string dir = cache_dir();
  if (!file_exists(dir)) return dir + " (empty; created on first use)";
  const auto entries = cache_list();
  std::string s = dir + ": " + std::to_string(entries.size()) +
                  (entries.size() == 1 ? " kernel, " : " kernels, ") +
                  format_bytes(static_cast<double>(folder_bytes(dir))) + " on disk";
  if (::access(dir.c_str(), W_OK) != 0)
    s += "; NOT WRITABLE: set TESSEL_CACHE_DIR to a writable folder";
  const std::string unsafe = cache_dir_problem();
  if (!unsafe.empty()) s += "; NOT USED: " + unsafe;
  return s;
}

std::string limits_line() {
  try {
    auto secs = [](double s) { return s > 0 ? format_seconds(s) : std::string("none"); };
    return "compile " + secs(compile_timeout_s()) + " (TESSEL_COMPILE_TIMEOUT), wait for " +
           "another build " + secs(cache_lock_timeout_s()) + " (TESSEL_CACHE_LOCK_TIMEOUT)";
  } catch (const Error& e) {
    return std::string("problem: ") + e.what();
  }
}

// The CUDA driver is loaded, never linked, so that this binary runs on machines without one.
std::string gpu_line() { return cuda_status(); }

// Compiles and runs one tiny kernel in a throw-away cache, and compares it with the interpreter:
// this is the check that catches broken toolchains before a user's first real call does.
std::string kernel_check_line(bool* ok) {
  *ok = false;
  if (!compiler_info().usable) return "skipped: no usable compiler";
  TempDir tmp("tessel-doctor-");
  const char* old = env_or_null("TESSEL_CACHE_DIR");
  const std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  ::setenv("TESSEL_CACHE_DIR", tmp.path().c_str(), 1);
  std::string result;
  try {
    Reduction r(ReductionOp::Sum, exp(-sqdist(vi(0, 3), vj(1, 3))) * vj(2, 1));
    std::vector<float> xs(4 * 3), ys(5 * 3), bs(5);
    for (size_t k = 0; k < xs.size(); ++k) xs[k] = 0.1f * static_cast<float>(k % 7);
    for (size_t k = 0; k < ys.size(); ++k) ys[k] = 0.13f * static_cast<float>(k % 5);
    for (size_t k = 0; k < bs.size(); ++k) bs[k] = 1.0f + static_cast<float>(k);
    std::vector<Array> in = {Array::from(xs, {4, 3}), Array::from(ys, {5, 3}),
                             Array::from(bs, {5, 1})};
    Options compiled, interp;
    compiled.backend = Backend::Compiled;
    interp.backend = Backend::Interpreter;
    const double t0 = bench::now_s();
    const auto got = evaluate(r, in, compiled);
    const double dt = bench::now_s() - t0;
    const auto want = evaluate(r, in, interp);
    double err = 0;
    for (int64_t k = 0; k < want[0].size(); ++k)
      err = std::fmax(err, std::fabs(got[0].at(k) - want[0].at(k)) / std::fabs(want[0].at(k)));
    if (err < 1e-5) {
      *ok = true;
      result =
          "compiled and ran a test kernel in " + format_seconds(dt) + " (matches the interpreter)";
    } else {
      result = "the compiled test kernel disagrees with the interpreter (relative error " +
               std::to_string(err) + ")";
    }
  } catch (const Error& e) {
    result = std::string("FAILED: ") + e.what();
  }
  if (saved)
    ::setenv("TESSEL_CACHE_DIR", saved->c_str(), 1);
  else
    ::unsetenv("TESSEL_CACHE_DIR");
  return result;
}

}  // namespace

int doctor_main(const Args& args) {
  bool quick = false;
  for (const std::string& a : args) {
    if (a == "--quick")
      quick = true;
    else if (a == "-h" || a == "--help") {
      std::puts("usage: tessel doctor [--quick]\n  --quick  skip compiling a test kernel");
      return 0;
    } else {
      throw UsageError("doctor: unknown option '" + a + "' (expected --quick)");
    }
  }
  std::printf("tessel %s\n", library_version());
  row("compiler", compiler_line());
  bool kernel_ok = true;
  if (!quick) row("kernel", kernel_check_line(&kernel_ok));
  row("SIMD", simd_line());
  row("threads", threads_line());
  row("cache", cache_line());
  row("limits", limits_line());
  row("NVRTC", nvrtc_status());
  row("GPU", gpu_line());
  // Diagnostics are the output; a failed check is reported above, not through the exit code,
  // except a kernel that compiles to wrong or no code, which no fallback hides.
  return kernel_ok || !compiler_info().usable ? 0 : 1;
}

int cache_main(const Args& args) {
  const std::string usage =
      "usage: tessel cache list | clear\n"
      "  list   one line per cached kernel: key, bytes, path\n"
      "  clear  remove every cached kernel";
  if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
    std::puts(usage.c_str());
    return 0;
  }
  if (args.size() != 1 || (args[0] != "list" && args[0] != "clear"))
    throw UsageError(args.empty() ? "cache: expected `list` or `clear`"
                                  : "cache: unknown arguments (expected `list` or `clear`)");
  if (args[0] == "list") {
    const auto entries = cache_list();
    for (const CacheEntry& e : entries)
      std::printf("%s %lld %s\n", e.key.c_str(), static_cast<long long>(e.bytes), e.path.c_str());
    if (entries.empty()) std::fprintf(stderr, "no cached kernels in %s\n", cache_dir().c_str());
    return 0;
  }
  const int64_t removed = cache_clear();
  std::printf("removed %lld cached %s from %s\n", static_cast<long long>(removed),
              removed == 1 ? "kernel" : "kernels", cache_dir().c_str());
  return 0;
}

}  // namespace tessel::cli
