// What a bench case compiles to at the current SIMD level (its kernels' hot loops, read from the
// assembly the compiler writes), and the machine's peak FMA rate at that level.
#pragma once

#include <string>
#include <vector>

#include "bench_cases.hpp"
#include "hot_loop.hpp"

namespace tessel::cli {

// One generated kernel of a case, as the compiled backend builds it, and its hot loop.
struct KernelLoop {
  std::string reduction;  // the reduction it evaluates, as text
  int lanes = 0;          // SIMD lanes per vector
  int rows = 0;           // i rows per tile (read from the generated source)
  int tiles = 0;          // j tiles per hot-loop iteration (read from the generated source)
  HotLoop loop;           // the full-tile loop
  bool located = false;   // found through the debug line of its `for`, not by size alone
  // The second passes of LogSumExp-like kernels (one loop per row over the block's tiles, with
  // the exp): lane operations and spills they add per pair.
  double pass_fp_ops_per_pair = 0;
  double pass_instructions_per_pair = 0;
  int pass_spills = 0;
  int pairs_per_iter() const { return rows * lanes * tiles; }
  // Lane operations of FP arithmetic per (i, j) pair: one vector instruction counts `lanes`.
  double fp_ops_per_pair() const {
    return static_cast<double>(loop.fp_vector) * lanes / pairs_per_iter() +
           static_cast<double>(loop.fp_scalar) / pairs_per_iter() + pass_fp_ops_per_pair;
  }
  int spills() const { return loop.spills() + pass_spills; }
};

// Every compiled kernel evaluating `p` runs (sub-reductions and addends included), each compiled
// with the backend's flags plus -S -g (-g leaves the code as it is; its line table tells which
// loop is the source's full-tile loop). Throws tessel::Error when there is no compiler or a step fails.
std::vector<KernelLoop> case_kernels(const bench::BenchProblem& p, const std::string& work_dir);

struct PeakFma {
  double fma_per_s = 0;       // lane-FMAs per second, all threads
  double fp_slots_per_s = 0;  // lane FP instructions per second (2 per FMA where the ISA has none)
  int lanes = 0, chains = 0, threads = 0;
};
// Runs a micro-kernel of independent FMA chains on `threads` threads, compiled at run time like a
// kernel (same compiler, same flags); the best of three runs of about 0.2 s each.
PeakFma measure_peak_fma(int threads, bool f64, const std::string& work_dir);

}  // namespace tessel::cli
