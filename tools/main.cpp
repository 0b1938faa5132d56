// The `tessel` command: dispatches to doctor, cache, bench and demo; turns errors into exit codes.
#include <cstdio>
#include <exception>
#include <string>

#include "cli.hpp"
#include "tessel/error.hpp"

#ifndef TESSEL_VERSION
#define TESSEL_VERSION "unknown"
#endif

namespace tessel::cli {

const char* library_version() { return TESSEL_VERSION; }

}  // namespace tessel::cli

namespace {

using tessel::cli::Args;
using tessel::cli::UsageError;

constexpr const char* kUsage = R"(usage: tessel <command> [options]

Compiled, differentiable kernel reductions (a_i = Red_j F(x_i, y_j)) that never store the
N x M matrix.

commands:
  doctor              what this machine offers: C++ compiler, SIMD level, threads,
                      kernel cache, GPU; compiles one small kernel as a check
                      (--quick skips that check)
  cache list          one line per cached kernel: key, bytes, path
  cache clear         remove every cached kernel
  bench [CASE...]     benchmark, one JSON line per measurement; cases: gauss-sum,
                      gauss-grad, lse, argkmin, hamiltonian, sin-sum, call-overhead
                      (default: all, for n = 10000, 30000, 100000), at the SIMD levels
                      --simd lists, with the FMA-slot bound; --asm prints the kernels'
                      hot loops (instructions, FP ops, spills); see `tessel bench --help`
  bench sass [CASE...]  the CUDA kernels compiled for sm_90 and disassembled (no GPU):
                      registers, spills, occupancy, instructions per pair by class
  demo [--n N]        Gaussian kernel product and its gradient on 100,000 built-in
                      3-D points: timings, peak memory, and what a dense matrix needs

options:
  -h, --help          this text
  --version           the library version

environment:
  TESSEL_CACHE_DIR    kernel cache folder (default: $XDG_CACHE_HOME/tessel or ~/.cache/tessel)
  TESSEL_NUM_THREADS  worker threads (default: all cores)
  TESSEL_CXX          C++ compiler for run-time kernels (default: the one that built tessel)
  TESSEL_SIMD         lower the SIMD level: avx512, avx2, sse2 or scalar
  TESSEL_COMPILE_TIMEOUT     seconds a kernel compile may take (default 60, 0: none)
  TESSEL_CACHE_LOCK_TIMEOUT  seconds to wait for another process's build (default:
                             the compile limit + 10)

exit codes: 0 success, 1 error (printed as "tessel: <message>"), 2 bad command line
)";

int dispatch(const std::string& cmd, const Args& rest) {
  if (cmd == "doctor") return tessel::cli::doctor_main(rest);
  if (cmd == "cache") return tessel::cli::cache_main(rest);
  if (cmd == "bench") return tessel::cli::bench_main(rest);
  if (cmd == "demo") return tessel::cli::demo_main(rest);
  if (cmd == "help" || cmd == "-h" || cmd == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("tessel %s\n", tessel::cli::library_version());
    return 0;
  }
  if (!cmd.empty() && cmd[0] == '-') throw UsageError("unknown option '" + cmd + "'");
  throw UsageError("unknown command '" + cmd + "' (expected doctor, cache, bench or demo)");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string cmd = argv[1];
  const Args rest(argv + 2, argv + argc);
  try {
    return dispatch(cmd, rest);
  } catch (const UsageError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tessel: %s\nrun `tessel --help` for usage\n", e.what());
    return 2;
  } catch (const tessel::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tessel: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    // Not a user mistake the library recognised (out of memory, a failing system call...).
    std::fflush(stdout);
    std::fprintf(stderr, "tessel: %s\n", e.what());
    return 1;
  }
}
