// `tessel bench`: times the cases at each SIMD level asked for, one JSON line each, with the
// fraction of the FMA-slot bound; compares with pykeops if present; --asm reads the hot loops.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/compiled.hpp"
#include "backend/registry.hpp"
#include "bench_cases.hpp"
#include "cli.hpp"
#include "kernel_probe.hpp"
#include "tessel/tessel.hpp"

#ifndef TESSEL_SOURCE_DIR
#define TESSEL_SOURCE_DIR ""
#endif

namespace tessel::cli {

namespace {

constexpr const char* kBenchUsage = R"(usage: tessel bench [CASE...] [options]
       tessel bench sass [CASE...] [options]   the CUDA kernels' SASS for sm_90, no GPU needed

cases: gauss-sum   Sum_j exp(-|x_i - y_j|^2 / s^2) b_j, D = 3, s = 0.25, points in [0,1]^3
       gauss-grad  its gradient with respect to x
       lse         LogSumExp_j -|x_i - y_j|^2 / s^2
       argkmin     ArgKMin_j |x_i - y_j|^2, K = 10
       hamiltonian H = 1/2 sum_ij exp(-|q_i - q_j|^2 / 0.1^2) <p_i, p_j>: the row sums and the
                   gradients dH/dq, dH/dp (q, p bound as Vi and as Vj), in two fused reductions
       sin-sum     Sum_j sin(<x_i, y_j> / s^2) b_j
       gauss-sum-64d  gauss-sum in D = 64 (points in [0,1]^64, 1/s^2 = 0.1): 256 bytes per j
       call-overhead  a cached call at N = M = 1 (the fixed cost of one call)
       (default: all of them)

options:
  --n N[,N...]       sizes, N = M (default 10000,30000,100000)
  --m M              the inner size M for every N (default: M = N); a large M with a small N
                     shows how the kernels keep the inner points in the caches
  --chunk-kib K[,K...]  measure with each cache chunk of the compiled kernels: K KiB of packed
                     inner points per chunk (0: no chunks); default: the backend's own (256)
  --reps R           timed calls per measurement (default 5; 3 for n >= 100000)
  --dtype T          float32 (default) or float64
  --threads T        worker threads (default: TESSEL_NUM_THREADS, else all cores)
  --keep-cache       use the normal kernel cache; by default every measurement starts
                     from a fresh temporary cache, so first_call_s includes compilation
  --no-pykeops       skip the pykeops comparison (also: TESSEL_BENCH_PYKEOPS=0)
  --pykeops-max-n N  compare with pykeops only for n <= N (default 30000)
  --simd LEVELS      comma list of SIMD levels measured in the same run (avx512, avx2, sse2,
                     scalar; `all`: every level this CPU supports; default: the current one,
                     which TESSEL_SIMD may lower). Every line carries "simd".
  --asm              measure nothing: for each case and level, compile each kernel the case
                     runs as the compiled backend does (same source, compiler and flags, plus
                     -S -g: -g leaves the code unchanged, its line table names the loops) and
                     print its hot loop (the full-tile loop): instructions per iteration and
                     per pair, FP instructions per pair, stack spills
  --no-bound         skip the bound (the peak FMA probe and the hot-loop analysis)

The bound. Once per level two micro-kernels, compiled at run time like a kernel, run on every
thread: independent FMA chains ("peak_fma_per_s", lane-FMAs per second; "peak_fma_slots_per_s"
counts their FP instructions' lanes, twice that where the level has no FMA instruction), and FMA
chains beside add chains, which also fill the add pipes of cores that have them (AMD's Zen);
"peak_fp_slots_per_s" is the larger rate. Each case's kernels are compiled to assembly:
"fp_ops_per_pair" counts the lane operations of FP arithmetic (add, sub, mul, div, FMA, min, max,
sqrt, round, scale...) per (i, j) pair in their hot loops, "mul_ops_per_pair" those of multiplies
and FMAs. bound_pairs_per_s is the FP-slot bound: every FP instruction takes a slot of
peak_fp_slots_per_s, and where the level has FMA the multiplies and FMAs take slots of
peak_fma_slots_per_s, so the pairs per second are at most the smaller of fp_peak / fp_ops and
fma_peak / mul_ops; fraction_of_bound = pairs_per_s / bound_pairs_per_s is at most 1 up to the
probes' noise. Loads, integer work and the pairs outside the hot loop are not in it. The probes
run again beside each timing and the best rates seen so far make the bound; "peak-fma-best"
lines end the run with the best of all. "spills" counts the hot loops' loads and stores of stack slots;
"compiled_lanes" is the width of the kernels the timed calls compiled (read from the fresh cache).

Each measurement prints one JSON line on stdout; notes go to stderr. The pykeops side runs
bench/pykeops_case.py with `python3` (or $TESSEL_BENCH_PYTHON); set TESSEL_BENCH_DIR to the
folder holding that script when the source tree is not where tessel was built.
)";

struct BenchOptions {
  std::vector<std::string> cases;
  std::vector<int64_t> sizes = {10000, 30000, 100000};
  int64_t m = 0;                   // 0: M = N
  std::vector<int64_t> chunk_kib;  // empty: the compiled backend's default chunk
  int reps = 0;                    // 0: the size-dependent default
  DType dtype = DType::Float32;
  int threads = 0;
  bool keep_cache = false;
  bool pykeops = true;
  int64_t pykeops_max_n = 30000;
  std::vector<std::string> simd;  // empty: the current level
  bool asm_only = false;
  bool bound = true;
};

std::vector<std::string> split_list(const std::string& value) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = value.find(',', start);
    out.push_back(value.substr(start, comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// Sets TESSEL_SIMD for the life of the object (the core reads it at every call), then restores it.
class SimdOverride {
 public:
  explicit SimdOverride(const std::string& level) {
    if (const char* v = std::getenv("TESSEL_SIMD")) old_ = v;
    ::setenv("TESSEL_SIMD", level.c_str(), 1);
  }
  ~SimdOverride() {
    if (old_)
      ::setenv("TESSEL_SIMD", old_->c_str(), 1);
    else
      ::unsetenv("TESSEL_SIMD");
  }
  SimdOverride(const SimdOverride&) = delete;
  SimdOverride& operator=(const SimdOverride&) = delete;

 private:
  std::optional<std::string> old_;
};

// Sets the compiled kernels' cache chunk for the life of the object (kib < 0: leaves it).
class ChunkOverride {
 public:
  explicit ChunkOverride(int64_t kib) {
    if (kib >= 0) old_ = set_cpu_chunk_bytes(kib == 0 ? int64_t{1} << 60 : kib << 10);
  }
  ~ChunkOverride() {
    if (old_) set_cpu_chunk_bytes(*old_);
  }
  ChunkOverride(const ChunkOverride&) = delete;
  ChunkOverride& operator=(const ChunkOverride&) = delete;

 private:
  std::optional<int64_t> old_;
};

// Whether simd_level() accepts `level` here; `why` gets its message when not.
bool level_supported(const std::string& level, std::string* why) {
  SimdOverride set(level);
  try {
    return simd_level() == level;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

std::vector<std::string> parse_simd(const std::string& value) {
  if (value == "all") {
    // The levels the core knows on any CPU, highest first; those this CPU runs are kept.
    std::vector<std::string> out;
    for (const char* l : {"avx512", "avx2", "sse2", "sve", "neon", "scalar"})
      if (level_supported(l, nullptr)) out.push_back(l);
    return out;
  }
  std::vector<std::string> out = split_list(value);
  for (const std::string& l : out) {
    std::string why;
    if (!level_supported(l, &why))
      throw UsageError("bench: --simd " + l + " cannot run here: " + why);
  }
  return out;
}

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
    else if (a == "--chunk-kib")
      o.chunk_kib = parse_count_list(a, take(), 0);
    else if (a == "--m")
      o.m = parse_count(a, take(), 1);
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
    else if (a == "--simd")
      o.simd = parse_simd(take());
    else if (a == "--asm")
      o.asm_only = true;
    else if (a == "--no-bound")
      o.bound = false;
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
                       "' (expected gauss-sum, gauss-grad, lse, argkmin, hamiltonian, "
                       "sin-sum, gauss-sum-64d or call-overhead)");
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
  std::string run(const std::string& name, int64_t n, int64_t m, int reps, DType dtype,
                  int threads) {
    std::string out;
    const int rc = run_process({python_, script_, "--case", name, "--n", std::to_string(n), "--m",
                                std::to_string(m), "--reps", std::to_string(reps), "--dtype",
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

JsonLine base_line(const std::string& name, int64_t n, int64_t m, DType dtype,
                   const std::string& simd) {
  JsonLine j;
  j.add("case", name).add("n", n).add("m", m).add("d", bench::case_dim(name));
  j.add("dtype", dtype_name(dtype));
  return j.add("backend", backend_label()).add("simd", simd);
}

void emit(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);  // lines appear as they are measured, also through a pipe
}

// The hot loops of a case's kernels at one level, read on a small instance of the case (the
// kernels do not depend on the sizes).
struct CaseLoops {
  std::vector<KernelLoop> kernels;
  double fp_ops_per_pair = 0;  // summed over the kernels: each one visits every (i, j) pair
  double mul_ops_per_pair = 0;
  int spills = 0;
};

CaseLoops case_loops(const std::string& name, DType dtype, const std::string& work_dir) {
  CaseLoops c;
  c.kernels = case_kernels(bench::make_problem(name, 256, 256, dtype), work_dir);
  for (const KernelLoop& k : c.kernels) {
    if (!k.located)
      detail::fail("bench", name, ": the full-tile loop of a kernel was not found by its line");
    c.fp_ops_per_pair += k.fp_ops_per_pair();
    c.mul_ops_per_pair += k.mul_ops_per_pair();
    c.spills += k.spills();
  }
  return c;
}

// The lanes the kernels in the kernel cache were compiled for (its sources' TESSEL_VBYTES); 0 when
// there are none, -1 when they differ. Read from a measurement's fresh cache, it shows which
// level the timed calls ran at.
int compiled_lanes(DType dtype) {
  int lanes = 0;
  for (const CacheEntry& e : cache_list()) {
    std::ifstream in(e.path.substr(0, e.path.rfind('.')) + ".cpp");
    static const std::string kDefine = "#define TESSEL_VBYTES ";
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(kDefine, 0) != 0) continue;
      const int l = std::atoi(line.c_str() + kDefine.size()) / static_cast<int>(dtype_size(dtype));
      if (lanes && lanes != l) return -1;
      lanes = l;
      break;
    }
  }
  return lanes;
}

std::string asm_line(const std::string& name, const std::string& simd, size_t index,
                     const KernelLoop& k) {
  const double pairs = k.pairs_per_iter();
  return JsonLine()
      .add("case", name)
      .add("simd", simd)
      .add("kernel", static_cast<int64_t>(index))
      .add("reduction", k.reduction)
      .add("lanes", k.lanes)
      .add("rows", k.rows)
      .add("tiles", k.tiles)
      .add("pairs_per_iter", k.pairs_per_iter())
      .add("instructions_per_iter", k.loop.instructions)
      .add("instructions_per_pair", k.loop.instructions / pairs)
      .add("fp_instr_per_iter", k.loop.fp())
      .add("fp_instr_per_pair", k.loop.fp() / pairs)
      .add("fp_ops_per_pair", k.fp_ops_per_pair())
      .add("fma_per_iter", k.loop.fma)
      .add("spill_loads", k.loop.stack_loads)
      .add("spill_stores", k.loop.stack_stores)
      .add("spills", k.loop.spills())
      .add("nested_loops", k.loop.nested)
      .add("calls", k.loop.calls)
      .add("loop_located", k.located ? "by its source line" : "largest innermost loop")
      .add("pass_instructions_per_pair", k.pass_instructions_per_pair)
      .add("pass_fp_ops_per_pair", k.pass_fp_ops_per_pair)
      .add("pass_spills", k.pass_spills)
      .add("asm_lines", std::to_string(k.loop.first_line) + "-" + std::to_string(k.loop.last_line))
      .str();
}

int asm_main(const BenchOptions& o, const std::vector<std::string>& levels) {
  TempDir work("tessel-asm-");
  for (const std::string& name : o.cases) {
    if (name == "call-overhead") continue;
    for (const std::string& level : levels) {
      SimdOverride set(level);
      const std::vector<KernelLoop> ks =
          case_kernels(bench::make_problem(name, 256, 256, o.dtype), work.path());
      if (ks.empty())
        std::fprintf(stderr, "note: %s runs no compiled kernel (the interpreter evaluates it)\n",
                     name.c_str());
      for (size_t k = 0; k < ks.size(); ++k) emit(asm_line(name, level, k, ks[k]));
    }
  }
  return 0;
}

}  // namespace

int bench_main(const Args& args) {
  if (!args.empty() && args[0] == "sass") return sass_main(Args(args.begin() + 1, args.end()));
  for (const std::string& a : args)
    if (a == "-h" || a == "--help") {
      std::fputs(kBenchUsage, stdout);
      return 0;
    }
  const BenchOptions o = parse_options(args);
  const std::vector<std::string> levels =
      o.simd.empty() ? std::vector<std::string>{simd_level()} : o.simd;
  if (o.asm_only) return asm_main(o, levels);
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

  // The bound: the peak FMA rate per level, then each case's hot loops (once per case and level).
  const bool bound = o.bound && compiler_info().usable;
  std::unique_ptr<TempDir> work;
  if (bound) work = std::make_unique<TempDir>("tessel-asm-");
  // The peak is probed once per level up front (a line of its own) and again right after each
  // timing, so that a machine shared with other work is probed under the same load as the case;
  // the best rate seen so far at the level makes the bound.
  std::map<std::string, std::unique_ptr<PeakProbe>> probes;
  std::map<std::string, double> peaks;      // lane-FP slots per second, the best seen, by level
  std::map<std::string, double> fma_peaks;  // of the FMA chains alone
  auto probe_again = [&](const std::string& level, const PeakProbe& probe, int runs, double s) {
    fma_peaks[level] =
        std::max(fma_peaks[level], probe.fma_per_s(threads, runs, s) * probe.slots_per_fma());
    peaks[level] =
        std::max({peaks[level], fma_peaks[level], probe.mixed_fp_per_s(threads, runs, s)});
  };
  for (const std::string& level : levels) {
    if (!bound) break;
    SimdOverride set(level);
    try {
      auto probe = std::make_unique<PeakProbe>(o.dtype == DType::Float64, work->path());
      probe_again(level, *probe, 3, 0.2);
      emit(JsonLine()
               .add("case", "peak-fma")
               .add("dtype", dtype_name(o.dtype))
               .add("simd", level)
               .add("lanes", probe->lanes())
               .add("fma_chains", probe->chains())
               .add("threads", threads)
               .add("peak_fma_per_s", fma_peaks[level] / probe->slots_per_fma())
               .add("peak_fma_slots_per_s", fma_peaks[level])
               .add("peak_fp_slots_per_s", peaks[level])
               .str());
      probes[level] = std::move(probe);
    } catch (const Error& e) {
      std::fprintf(stderr, "note: no bound at %s: %s\n", level.c_str(), e.what());
    }
  }
  std::map<std::string, std::optional<CaseLoops>> loops;  // by level + case
  auto loops_of = [&](const std::string& name, const std::string& level) -> const CaseLoops* {
    if (!peaks.count(level)) return nullptr;
    auto it = loops.find(level + "/" + name);
    if (it == loops.end()) {
      std::optional<CaseLoops> c;
      try {
        c = case_loops(name, o.dtype, work->path());
        if (c->kernels.empty()) c.reset();
      } catch (const Error& e) {
        std::fprintf(stderr, "note: no bound for %s at %s: %s\n", name.c_str(), level.c_str(),
                     e.what());
      }
      it = loops.emplace(level + "/" + name, std::move(c)).first;
    }
    return it->second ? &*it->second : nullptr;
  };

  PykeopsRunner pykeops;
  for (const std::string& name : o.cases) {
    if (name == "call-overhead") {
      for (const std::string& level : levels) {
        SimdOverride set(level);
        fresh_cache();
        const bench::BenchProblem p = bench::make_problem("gauss-sum", 1, 1, o.dtype);
        const bench::Timing t = bench::time_problem(p, 201, opt);
        emit(base_line(name, 1, 1, o.dtype, level)
                 .add("median_s", t.median_s)
                 .add("overhead_s", t.median_s)
                 .add("first_call_s", t.first_call_s)
                 .add("threads", threads)
                 .str());
      }
      continue;
    }
    for (const int64_t n : o.sizes) {
      const int64_t m = o.m > 0 ? o.m : n;
      const int reps = o.reps > 0 ? o.reps : (n >= 100000 ? 3 : 5);
      std::map<std::pair<std::string, int64_t>, double> medians;  // by level and chunk
      const std::vector<int64_t> chunks =
          o.chunk_kib.empty() ? std::vector<int64_t>{-1} : o.chunk_kib;
      for (const std::string& level : levels)
        for (const int64_t chunk : chunks) {
          SimdOverride set(level);
          ChunkOverride set_chunk(chunk);
          const CaseLoops* cl = loops_of(name, level);
          fresh_cache();
          const bench::BenchProblem p = bench::make_problem(name, n, m, o.dtype);
          const bench::Timing t = bench::time_problem(p, reps, opt);
          medians[{level, chunk}] = t.median_s;
          const double pairs = static_cast<double>(n) * static_cast<double>(m);
          JsonLine line = base_line(name, n, m, o.dtype, level);
          if (chunk >= 0) line.add("chunk_kib", chunk);
          line.add("median_s", t.median_s)
              .add("pairs_per_s", pairs / t.median_s)
              .add("first_call_s", t.first_call_s)
              .add("threads", threads)
              .add("reps", reps);
          if (tmp) {
            // Every kernel of this measurement sits in its fresh cache: check their width.
            const int lanes = compiled_lanes(o.dtype);
            line.add("compiled_lanes", lanes);
            if (cl && lanes != cl->kernels[0].lanes)
              std::fprintf(stderr, "warning: %s at %s ran kernels of %d lanes, expected %d\n",
                           name.c_str(), level.c_str(), lanes, cl->kernels[0].lanes);
          }
          if (cl && cl->fp_ops_per_pair > 0) {
            const PeakProbe& probe = *probes.at(level);
            probe_again(level, probe, 2, 0.05);
            const double bound_pairs =
                bound_pairs_per_s(cl->fp_ops_per_pair, cl->mul_ops_per_pair, fma_peaks[level],
                                  peaks[level], probe.slots_per_fma() == 1);
            line.add("lanes", cl->kernels[0].lanes)
                .add("peak_fma_slots_per_s", fma_peaks[level])
                .add("peak_fp_slots_per_s", peaks[level])
                .add("kernels", static_cast<int64_t>(cl->kernels.size()))
                .add("fp_ops_per_pair", cl->fp_ops_per_pair)
                .add("mul_ops_per_pair", cl->mul_ops_per_pair)
                .add("spills", cl->spills)
                .add("bound_pairs_per_s", bound_pairs)
                .add("fraction_of_bound", pairs / t.median_s / bound_pairs);
          }
          emit(line.str());
        }
      if (o.pykeops && !bench::has_pykeops_case(name))
        std::fprintf(stderr, "note: no pykeops run of %s here (bench/python_bench.py has one)\n",
                     name.c_str());
      if (!o.pykeops || !bench::has_pykeops_case(name)) continue;
      if (n > o.pykeops_max_n) {
        std::fprintf(
            stderr, "note: pykeops skipped for %s at n=%lld (above --pykeops-max-n %lld)\n",
            name.c_str(), static_cast<long long>(n), static_cast<long long>(o.pykeops_max_n));
        continue;
      }
      if (!pykeops.available()) continue;
      // pykeops emits scalar CPU code (30-50 s per call at 1e5 on two cores): one timed call.
      const std::string line =
          pykeops.run(name, n, m, n * m > int64_t{1000000000} ? 1 : reps, o.dtype, threads);
      if (line.empty()) continue;
      emit(line);
      if (auto theirs = json_number_field(line, "median_s"))
        for (const auto& [key, mine] : medians) {
          JsonLine sp;
          sp.add("case", name).add("n", n).add("m", m).add("simd", key.first);
          if (key.second >= 0) sp.add("chunk_kib", key.second);
          emit(sp.add("speedup_vs_pykeops", *theirs / mine).str());
        }
    }
  }
  // The best peak of each level over the whole run: a line measured while the machine was busier
  // than at the best probe can be recomputed against it (bound = this / fp_ops_per_pair).
  for (const auto& [level, slots] : peaks)
    emit(JsonLine()
             .add("case", "peak-fma-best")
             .add("dtype", dtype_name(o.dtype))
             .add("simd", level)
             .add("peak_fma_slots_per_s", fma_peaks[level])
             .add("peak_fp_slots_per_s", slots)
             .str());
  return 0;
}

}  // namespace tessel::cli
