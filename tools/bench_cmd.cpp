// `tessel bench`: times the cases, one JSON line each, and compares with pykeops if present.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/registry.hpp"
#include "bench_cases.hpp"
#include "cli.hpp"
#include "tessel/tessel.hpp"

#ifndef TESSEL_SOURCE_DIR
#define TESSEL_SOURCE_DIR ""
#endif

namespace tessel::cli {

namespace {

constexpr const char* kBenchUsage = R"(usage: tessel bench [CASE...] [options]

cases: gauss-sum   Sum_j exp(-|x_i - y_j|^2 / s^2) b_j, D = 3, s = 0.25, points in [0,1]^3
       gauss-grad  its gradient with respect to x
       lse         LogSumExp_j -|x_i - y_j|^2 / s^2
       argkmin     ArgKMin_j |x_i - y_j|^2, K = 10
       sin-sum     Sum_j sin(<x_i, y_j> / s^2) b_j
       call-overhead  a cached call at N = M = 1 (the fixed cost of one call)
       (default: all of them)

options:
  --n N[,N...]       sizes, N = M (default 10000,30000,100000)
  --reps R           timed calls per measurement (default 5; 3 for n >= 100000)
  --dtype T          float32 (default) or float64
  --threads T        worker threads (default: TESSEL_NUM_THREADS, else all cores)
  --keep-cache       use the normal kernel cache; by default every measurement starts
                     from a fresh temporary cache, so first_call_s includes compilation
  --no-pykeops       skip the pykeops comparison (also: TESSEL_BENCH_PYKEOPS=0)
  --pykeops-max-n N  compare with pykeops only for n <= N (default 30000)

Each measurement prints one JSON line on stdout; notes go to stderr. The pykeops side runs
bench/pykeops_case.py with `python3` (or $TESSEL_BENCH_PYTHON); set TESSEL_BENCH_DIR to the
folder holding that script when the source tree is not where tessel was built.
)";

struct BenchOptions {
  std::vector<std::string> cases;
  std::vector<int64_t> sizes = {10000, 30000, 100000};
  int reps = 0;  // 0: the size-dependent default
  DType dtype = DType::Float32;
  int threads = 0;
  bool keep_cache = false;
  bool pykeops = true;
  int64_t pykeops_max_n = 30000;
};

BenchOptions parse_options(const Args& args) {
  BenchOptions o;
  for (size_t k = 0; k < args.size(); ++k) {
    std::string a = args[k], value;
    const bool has_eq = a.rfind("--", 0) == 0 && a.find('=') != std::string::npos;
    if (has_eq) value = a.substr(a.find('=') + 1), a = a.substr(0, a.find('='));
    auto take = [&]() -> std::string {
      if (has_eq) return value;
      if (k + 1 >= args.size()) throw UsageError("bench: " + a + " needs a value");
      return args[++k];
    };
    if (a == "--n")
      o.sizes = parse_count_list(a, take());
    else if (a == "--reps")
      o.reps = static_cast<int>(parse_count(a, take(), 1));
    else if (a == "--threads")
      o.threads = static_cast<int>(parse_count(a, take(), 1));
    else if (a == "--pykeops-max-n")
      o.pykeops_max_n = parse_count(a, take(), 0);
    else if (a == "--keep-cache")
      o.keep_cache = true;
    else if (a == "--no-pykeops")
      o.pykeops = false;
    else if (a == "--dtype") {
      const std::string t = take();
      if (t == "float32")
        o.dtype = DType::Float32;
      else if (t == "float64")
        o.dtype = DType::Float64;
      else
        throw UsageError("bench: --dtype expects float32 or float64, got '" + t + "'");
    } else if (a.rfind("-", 0) == 0) {
      throw UsageError("bench: unknown option '" + a + "'");
    } else if (bench::is_case(a) || a == "call-overhead") {
      o.cases.push_back(a);
    } else {
      throw UsageError("bench: unknown case '" + a +
                       "' (expected gauss-sum, gauss-grad, lse, argkmin, sin-sum or call-overhead)");
    }
  }
  if (o.cases.empty()) {
    o.cases = {"call-overhead"};
    for (const std::string& c : bench::case_names()) o.cases.push_back(c);
  }
  if (const char* v = env_or_null("TESSEL_BENCH_PYKEOPS"); v && std::string(v) == "0")
    o.pykeops = false;
  return o;
}

// Finds python3 + pykeops + bench/pykeops_case.py once, and runs single cases through them.
class PykeopsRunner {
 public:
  bool available() {
    if (checked_) return available_;
    checked_ = true;
    const char* py = env_or_null("TESSEL_BENCH_PYTHON");
    python_ = py ? py : "python3";
    const char* dir = env_or_null("TESSEL_BENCH_DIR");
    script_ = dir ? std::string(dir) + "/pykeops_case.py"
                  : std::string(TESSEL_SOURCE_DIR) + "/bench/pykeops_case.py";
    if (run_process({python_, "-c", "import pykeops"}, nullptr, true) != 0) {
      std::fprintf(stderr,
                   "note: pykeops is not importable by %s; comparison skipped "
                   "(./scripts/bench.sh installs it in .venv; --no-pykeops hides this note)\n",
                   python_.c_str());
    } else if (!file_exists(script_)) {
      std::fprintf(stderr,
                   "note: %s not found; pykeops comparison skipped "
                   "(set TESSEL_BENCH_DIR to the folder holding pykeops_case.py)\n",
                   script_.c_str());
    } else {
      available_ = true;
    }
    return available_;
  }

  // The JSON line pykeops_case.py printed, or "" after a note on stderr.
  std::string run(const std::string& name, int64_t n, int reps, DType dtype, int threads) {
    std::string out;
    const int rc = run_process({python_, script_, "--case", name, "--n", std::to_string(n), "--m",
                                std::to_string(n), "--reps", std::to_string(reps), "--dtype",
                                dtype_name(dtype), "--threads", std::to_string(threads)},
                               &out, false);
    std::string line;
    for (size_t start = 0; start < out.size();) {
      size_t end = out.find('\n', start);
      if (end == std::string::npos) end = out.size();
      if (out[start] == '{') line = out.substr(start, end - start);
      start = end + 1;
    }
    if (rc != 0 || line.empty()) {
      std::fprintf(stderr, "note: pykeops run of %s at n=%lld failed (exit code %d); skipped\n",
                   name.c_str(), static_cast<long long>(n), rc);
      return "";
    }
    return line;
  }

 private:
  bool checked_ = false, available_ = false;
  std::string python_, script_;
};

// Without a usable compiler every call falls back to the interpreter: label it, do not hide it.
const char* backend_label() { return compiler_info().usable ? "tessel-cpu" : "tessel-interpreter"; }

JsonLine base_line(const std::string& name, int64_t n, int64_t m, DType dtype) {
  JsonLine j;
  j.add("case", name).add("n", n).add("m", m).add("d", 3).add("dtype", dtype_name(dtype));
  return j.add("backend", backend_label());
}

void emit(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);  // lines appear as they are measured, also through a pipe
}

}  // namespace

int bench_main(const Args& args) {
  for (const std::string& a : args)
    if (a == "-h" || a == "--help") {
      std::fputs(kBenchUsage, stdout);
      return 0;
    }
  const BenchOptions o = parse_options(args);
  Options opt;
  opt.threads = o.threads;
  const int threads = o.threads > 0 ? o.threads : num_threads();
  if (!compiler_info().usable)
    std::fprintf(stderr, "note: %s; timings are of the interpreter (see `tessel doctor`)\n",
                 compiler_info().problem.c_str());

  // A fresh cache per measurement makes first_call_s mean the same thing everywhere: code
  // generation + compilation + one run. The folders are removed when the bench ends.
  std::unique_ptr<TempDir> tmp;
  if (!o.keep_cache) tmp = std::make_unique<TempDir>("tessel-bench-");
  int fresh = 0;
  auto fresh_cache = [&]() {
    if (!tmp) return;
    const std::string dir = tmp->path() + "/cache-" + std::to_string(fresh++);
    ::setenv("TESSEL_CACHE_DIR", dir.c_str(), 1);
    BackendRegistry::instance().forget_loaded();
  };

  PykeopsRunner pykeops;
  for (const std::string& name : o.cases) {
    if (name == "call-overhead") {
      fresh_cache();
      const bench::BenchProblem p = bench::make_problem("gauss-sum", 1, 1, o.dtype);
      const bench::Timing t = bench::time_problem(p, 201, opt);
      emit(base_line(name, 1, 1, o.dtype)
               .add("median_s", t.median_s)
               .add("overhead_s", t.median_s)
               .add("first_call_s", t.first_call_s)
               .add("threads", threads)
               .str());
      continue;
    }
    for (const int64_t n : o.sizes) {
      const int reps = o.reps > 0 ? o.reps : (n >= 100000 ? 3 : 5);
      fresh_cache();
      const bench::BenchProblem p = bench::make_problem(name, n, n, o.dtype);
      const bench::Timing t = bench::time_problem(p, reps, opt);
      const double pairs = static_cast<double>(n) * static_cast<double>(n);
      emit(base_line(name, n, n, o.dtype)
               .add("median_s", t.median_s)
               .add("pairs_per_s", pairs / t.median_s)
               .add("first_call_s", t.first_call_s)
               .add("threads", threads)
               .add("reps", reps)
               .str());
      if (!o.pykeops) continue;
      if (n > o.pykeops_max_n) {
        std::fprintf(
            stderr, "note: pykeops skipped for %s at n=%lld (above --pykeops-max-n %lld)\n",
            name.c_str(), static_cast<long long>(n), static_cast<long long>(o.pykeops_max_n));
        continue;
      }
      if (!pykeops.available()) continue;
      // pykeops emits scalar CPU code (30-50 s per call at 1e5 on two cores): one timed call.
      const std::string line = pykeops.run(name, n, n >= 100000 ? 1 : reps, o.dtype, threads);
      if (line.empty()) continue;
      emit(line);
      if (auto theirs = json_number_field(line, "median_s"))
        emit(JsonLine()
                 .add("case", name)
                 .add("n", n)
                 .add("speedup_vs_pykeops", *theirs / t.median_s)
                 .str());
    }
  }
  return 0;
}

}  // namespace tessel::cli
