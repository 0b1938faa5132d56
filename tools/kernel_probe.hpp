// What a bench case compiles to at the current SIMD level (its kernels' hot loops, read from the
// assembly the compiler writes), and the machine's peak FMA rate at that level.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backend/problem.hpp"
#include "bench_cases.hpp"
#include "hot_loop.hpp"

namespace tessel::cli {

// Runs the case once with `record` in the compiled backend's slot: it sees every problem that
// backend would evaluate (a kernel launched twice per call counts twice), and declines, so that the
// interpreter computes the values (run it on a small instance: no speed needed).
void record_problems(const bench::BenchProblem& p,
                     const std::function<void(const Problem&)>& record);

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
  double pass_mul_ops_per_pair = 0;
  double pass_instructions_per_pair = 0;
  int pass_spills = 0;
  int pairs_per_iter() const { return rows * lanes * tiles; }
  // Lane operations of FP arithmetic per (i, j) pair: one vector instruction counts `lanes`.
  double fp_ops_per_pair() const {
    return static_cast<double>(loop.fp_vector) * lanes / pairs_per_iter() +
           static_cast<double>(loop.fp_scalar) / pairs_per_iter() + pass_fp_ops_per_pair;
  }
  // Those of them that only a multiply/FMA pipe executes (multiplies and FMAs).
  double mul_ops_per_pair() const {
    return static_cast<double>(loop.mul_vector) * lanes / pairs_per_iter() +
           static_cast<double>(loop.mul_scalar) / pairs_per_iter() + pass_mul_ops_per_pair;
  }
  int spills() const { return loop.spills() + pass_spills; }
};

// Every compiled kernel evaluating `p` runs (sub-reductions and addends included), each compiled
// with the backend's flags plus -S -g (-g leaves the code as it is; its line table tells which
// loop is the source's full-tile loop). Throws tessel::Error when there is no compiler or a step
// fails.
std::vector<KernelLoop> case_kernels(const bench::BenchProblem& p, const std::string& work_dir);

// Micro-kernels of independent chains compiled at run time like a kernel (same compiler, same
// flags, at the SIMD level current when it is built) that measure the peak FP rates: FMA chains
// alone (the multiply/FMA pipes), and FMA chains beside add chains (every FP pipe: cores such as
// AMD's Zen add on pipes of their own, so a kernel of adds and FMAs can pass the FMA rate).
class PeakProbe {
 public:
  PeakProbe(bool f64, const std::string& work_dir);
  ~PeakProbe();
  PeakProbe(const PeakProbe&) = delete;
  PeakProbe& operator=(const PeakProbe&) = delete;
  // Lane-FMAs per second on `threads` threads at once: the best of `runs` runs of about `seconds`.
  double fma_per_s(int threads, int runs, double seconds) const;
  // Lane FP instructions per second of the mixed chains, measured the same way.
  double mixed_fp_per_s(int threads, int runs, double seconds) const;
  int lanes() const { return lanes_; }
  int chains() const;
  // FP instructions per FMA of the chains: 1, or 2 (a multiply and an add) where the level has no
  // FMA instruction; lane FP slots per second = fma_per_s() * slots_per_fma().
  int slots_per_fma() const { return slots_; }

 private:
  struct Loop {  // one compiled chain kernel
    void* sym = nullptr;
    double iters_per_s = 0;  // one thread
    int fp_per_iter = 0;     // FP instructions per iteration, read from its assembly
  };
  Loop build(const std::string& source, const std::string& stem, const std::string& name);
  double call(const Loop& l, long iters) const;
  double rate(const Loop& l, int threads, int runs, double seconds) const;
  bool f64_;
  int lanes_ = 0, slots_ = 1;
  std::vector<void*> handles_;
  Loop fma_, mixed_;
};

}  // namespace tessel::cli
