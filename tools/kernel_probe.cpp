// Reads a bench case's kernels as the compiled backend builds them (source, flags, assembly) and
// measures the peak FMA rate the same compiler path reaches on this machine.
#include "kernel_probe.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "backend/cpu/compiled.hpp"
#include "backend/registry.hpp"
#include "cache/compiler.hpp"
#include "cli.hpp"
#include "tessel/runtime.hpp"

namespace tessel::cli {

namespace {

struct Build {
  std::string source, reduction;
  std::vector<std::string> flags;
  int lanes = 0;
};

class Recorder final : public KernelBackend {
 public:
  explicit Recorder(const std::function<void(const Problem&)>& record) : record_(record) {}
  const char* name() const override { return "compiled (recording)"; }
  bool run(const Problem& p, std::span<const ArrayView>) override {
    record_(p);
    return false;
  }

 private:
  const std::function<void(const Problem&)>& record_;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) detail::fail("bench", "cannot read ", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) detail::fail("bench", "cannot write ", path);
}

CompilerInfo usable_compiler() {
  const CompilerInfo cc = compiler_info();
  if (!cc.usable) detail::fail("bench", "the hot-loop analysis needs a C++ compiler: ", cc.problem);
  return cc;
}

// Compiles `source` with `flags` plus -S and returns the assembly.
std::string assembly(const std::string& source, std::vector<std::string> flags,
                     const std::string& stem) {
  const CompilerInfo cc = usable_compiler();
  write_text(stem + ".cpp", source);
  flags.insert(flags.end(), {"-S", "-o", stem + ".s", stem + ".cpp"});
  run_compiler(cc.path, flags, stem + ".log");
  return read_text(stem + ".s");
}

// The 1-based lines of `source` that `re` matches.
std::vector<int> source_lines(const std::string& source, const std::regex& re) {
  std::vector<int> out;
  std::istringstream in(source);
  std::string line;
  for (int k = 1; std::getline(in, line); ++k)
    if (std::regex_search(line, re)) out.push_back(k);
  return out;
}

// Fills k's loops from the kernel's assembly: the full-tile loop by its source line (else the
// largest innermost loop), and the per-row second passes of softmax-like kernels.
void read_loops(const std::string& source, const std::string& text, KernelLoop& k) {
  static const std::regex kTileLoop(R"(for \(i64 t = tb; t < te;)");
  // (The copy of the pass for infinite maxima, `q < qe`, is rare and not counted.)
  static const std::regex kPassLoop(R"(for \(i64 q = 0; q < te - tb;)");
  const std::vector<int> tile_lines = source_lines(source, kTileLoop);
  const std::vector<int> pass_lines = source_lines(source, kPassLoop);
  const AsmArch arch = guess_asm_arch(text);
  // Of the loops a source line closes, the innermost, then the largest (the compiler may version
  // a loop: each copy counts once).
  auto better = [](const HotLoop& a, const HotLoop* b) {
    return !b || a.nested < b->nested ||
           (a.nested == b->nested && a.instructions > b->instructions);
  };
  const HotLoop* main = nullptr;
  std::map<int, const HotLoop*> passes;  // by source line
  const std::vector<HotLoop> loops = all_loops(text, arch);
  for (const HotLoop& l : loops) {
    auto in = [&](const std::vector<int>& v) {
      return l.source_line > 0 && std::find(v.begin(), v.end(), l.source_line) != v.end();
    };
    if (in(tile_lines) && better(l, main)) main = &l;
    if (in(pass_lines) && better(l, passes[l.source_line])) passes[l.source_line] = &l;
  }
  for (const auto& [line, l] : passes) {
    if (!l) continue;
    // One iteration: one row and one tile (`lanes` pairs); each row has its own pass loop, so a
    // pair meets one of the `rows` loops.
    k.pass_fp_ops_per_pair += (l->fp_vector + static_cast<double>(l->fp_scalar) / k.lanes) / k.rows;
    k.pass_mul_ops_per_pair +=
        (l->mul_vector + static_cast<double>(l->mul_scalar) / k.lanes) / k.rows;
    k.pass_instructions_per_pair += static_cast<double>(l->instructions) / (k.lanes * k.rows);
    k.pass_spills += l->spills();
  }
  // A full-tile loop laid out in pieces (an exp's rare path inline, as g++ does for float64 on
  // aarch64): its usual path, the largest copy.
  std::vector<HotLoop> cycles;
  if (!main) cycles = branch_cycles(text, arch, tile_lines);
  for (const HotLoop& c : cycles)
    if (!main || c.instructions > main->instructions) main = &c;
  k.located = main != nullptr;
  k.loop = main ? *main : find_hot_loop(text, arch);
}

// A whole number the generated source states through `re`'s first group; `fallback` when the
// pattern matches without it (e.g. `++t`: one tile).
int source_number(const std::string& source, const std::regex& re, int fallback, const char* what) {
  std::smatch m;
  if (!std::regex_search(source, m, re))
    detail::fail("bench", "cannot find ", what,
                 " in the generated kernel (its loop nest changed; update tools/kernel_probe.cpp)");
  return m[1].matched ? std::stoi(m[1].str()) : fallback;
}

}  // namespace

void record_problems(const bench::BenchProblem& p,
                     const std::function<void(const Problem&)>& record) {
  Recorder rec(record);
  ScopedBackend scoped(BackendId::Compiled, rec);
  bench::run_problem(p);
}

std::vector<KernelLoop> case_kernels(const bench::BenchProblem& p, const std::string& work_dir) {
  std::vector<Build> builds;
  record_problems(p, [&](const Problem& q) {
    CpuKernelTarget tgt = cpu_kernel_target(q.dtype == DType::Float64);
    const CpuKernelSpec spec = cpu_kernel_spec(q, tgt.vbytes);
    KernelLayout layout;
    std::string source = generate_cpu_kernel(spec, layout);
    if (source.empty()) return;
    const Reduction view(std::shared_ptr<const ReductionImpl>(q.r, [](const ReductionImpl*) {}));
    builds.push_back({std::move(source), view.str(), std::move(tgt.flags), lanes(spec)});
  });
  static const std::regex kRows(R"(for \(i64 i0 = [^;]*;[^;]*; i0 \+= ([0-9]+)\))");
  static const std::regex kTiles(R"(for \(i64 t = tb; t < te; (?:\+\+t|t \+= ([0-9]+))\))");
  std::vector<KernelLoop> out;
  std::map<std::string, size_t> done;  // source -> its first analysis in `out`
  for (Build& b : builds) {
    if (auto it = done.find(b.source); it != done.end()) {
      out.push_back(out[it->second]);
      continue;
    }
    done[b.source] = out.size();
    KernelLoop k;
    k.reduction = b.reduction;
    k.lanes = b.lanes;
    k.rows = source_number(b.source, kRows, 1, "the rows per tile (`i0 += R`)");
    k.tiles = source_number(b.source, kTiles, 1, "the full-tile loop (`for (i64 t = tb; ...`)");
    // `#pragma GCC unroll U` on the full-tile loop: one iteration of its hot loop runs U tiles.
    static const std::regex kUnroll(R"(#pragma GCC unroll ([0-9]+)\n\s*for \(i64 t = tb; t < te;)");
    std::smatch um;
    if (std::regex_search(b.source, um, kUnroll)) k.tiles *= std::stoi(um[1].str());
    const std::string stem = work_dir + "/kernel-" + std::to_string(out.size());
    std::vector<std::string> flags = b.flags;
    flags.push_back("-g");
    read_loops(b.source, assembly(b.source, flags, stem), k);
    out.push_back(std::move(k));
  }
  return out;
}

namespace {

#if defined(__aarch64__)
constexpr int kChains = 24;  // 4 FMA pipes x 4 cycles of latency, 32 vector registers
constexpr int kMixedFma = 16, kMixedAdd = 12;
#else
constexpr int kChains = 12;  // 2 FMA ports x 4-5 cycles of latency, fits 16 vector registers
// 2 FMA pipes x 4 cycles and 2 add pipes x 3 cycles, with m and c: 16 registers.
constexpr int kMixedFma = 8, kMixedAdd = 6;
#endif

// Independent chains a = a * m + c (one FMA each under -ffp-contract=fast) and b = b + c, written
// out so that the loop body is one block whatever the compiler unrolls.
std::string peak_source(bool f64, int vbytes, int fmas, int adds) {
  const char* t = f64 ? "double" : "float";
  std::string s = "// peak FP rate probe of tessel bench\ntypedef " + std::string(t) +
                  " V __attribute__((vector_size(" + std::to_string(vbytes) + ")));\n";
  s += "extern \"C\" double tessel_peak(long iters, " + std::string(t) + " m0, " + t + " c0) {\n";
  s += "  const V m = (V){} + m0, c = (V){} + c0;\n";
  const int chains = fmas + adds;
  for (int k = 0; k < chains; ++k)
    s += "  V a" + std::to_string(k) + " = (V){} + (" + t + ")" + std::to_string(k) + ";\n";
  s += "  for (long i = 0; i < iters; ++i) {\n";
  for (int k = 0; k < chains; ++k) {
    const std::string a = "a" + std::to_string(k);
    s += "    " + a + " = " + a + (k < fmas ? " * m + c;\n" : " + c;\n");
  }
  s += "  }\n  V s = (V){};\n";
  for (int k = 0; k < chains; ++k) s += "  s += a" + std::to_string(k) + ";\n";
  s += "  double r = 0;\n  for (unsigned l = 0; l < sizeof(V) / sizeof(s[0]); ++l) r += s[l];\n";
  return s + "  return r;\n}\n";
}

}  // namespace

PeakProbe::PeakProbe(bool f64, const std::string& work_dir) : f64_(f64) {
  const CpuKernelTarget tgt = cpu_kernel_target(f64);
  lanes_ = tgt.vbytes / (f64 ? 8 : 4);
  const std::string stem =
      work_dir + "/peak-" + std::to_string(tgt.vbytes) + (f64 ? "-f64" : "-f32");
  fma_ = build(peak_source(f64, tgt.vbytes, kChains, 0), stem, "fma");
  // FP instructions per FMA of the source: 1 with an FMA instruction, 2 (mul + add) without.
  slots_ = fma_.fp_per_iter % kChains == 0 && fma_.fp_per_iter > 0 ? fma_.fp_per_iter / kChains : 1;
  mixed_ = build(peak_source(f64, tgt.vbytes, kMixedFma, kMixedAdd), stem, "mixed");
}

PeakProbe::Loop PeakProbe::build(const std::string& source, const std::string& stem_base,
                                 const std::string& name) {
  const CompilerInfo cc = usable_compiler();
  const CpuKernelTarget tgt = cpu_kernel_target(f64_);
  const std::string stem = stem_base + "-" + name;
  const std::string text = assembly(source, tgt.flags, stem);
  Loop l;
  l.fp_per_iter = find_hot_loop(text, guess_asm_arch(text)).fp();
  std::vector<std::string> args = tgt.flags;
  args.insert(args.end(), {"-o", stem + ".so", stem + ".cpp"});
  run_compiler(cc.path, args, stem + ".so.log");
  void* handle = dlopen((stem + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) detail::fail("bench", "cannot load the peak probe: ", dlerror());
  handles_.push_back(handle);
  l.sym = dlsym(handle, "tessel_peak");
  if (!l.sym) detail::fail("bench", "the peak probe has no tessel_peak symbol");
  // Iterations per second of one thread, from a run of at least 20 ms.
  for (long iters = 1 << 16;; iters *= 4) {
    const double t0 = bench::now_s();
    volatile double sink = call(l, iters);
    (void)sink;
    const double dt = bench::now_s() - t0;
    if (dt > 0.02 || iters > (1L << 40)) {
      l.iters_per_s = static_cast<double>(iters) / dt;
      break;
    }
  }
  return l;
}

PeakProbe::~PeakProbe() {
  for (void* h : handles_) dlclose(h);
}

double PeakProbe::call(const Loop& l, long iters) const {
  // m = 1 - 1e-6 and c = 1e-7 keep every chain finite and away from denormals for any length.
  return f64_ ? reinterpret_cast<double (*)(long, double, double)>(l.sym)(iters, 1 - 1e-6, 1e-7)
              : reinterpret_cast<double (*)(long, float, float)>(l.sym)(iters, 1 - 1e-6f, 1e-7f);
}

int PeakProbe::chains() const { return kChains; }

// Iterations per second of `threads` threads together, the best of `runs` runs.
double PeakProbe::rate(const Loop& l, int threads, int runs, double seconds) const {
  const long iters = static_cast<long>(l.iters_per_s * seconds) + 1;
  double best = 0;
  for (int run = 0; run < runs; ++run) {
    std::vector<std::thread> pool;
    std::vector<double> sinks(static_cast<size_t>(threads));
    const double t0 = bench::now_s();
    for (int k = 0; k < threads; ++k) pool.emplace_back([&, k] { sinks[k] = call(l, iters); });
    for (std::thread& t : pool) t.join();
    const double dt = bench::now_s() - t0;
    best = std::max(best, static_cast<double>(threads) * static_cast<double>(iters) / dt);
  }
  return best;
}

double PeakProbe::fma_per_s(int threads, int runs, double seconds) const {
  return rate(fma_, threads, runs, seconds) * kChains * lanes_;
}

double PeakProbe::mixed_fp_per_s(int threads, int runs, double seconds) const {
  return rate(mixed_, threads, runs, seconds) * mixed_.fp_per_iter * lanes_;
}

}  // namespace tessel::cli
