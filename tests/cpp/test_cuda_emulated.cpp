// Generated CUDA kernels run in the CPU emulator, launched as the plan says (grid, block, shared
// memory, split inner rows and tessel_combine), and checked value by value against the
// interpreter: every reduction, both axes, float32 and float64, NaN/ties/-inf, odd tile sizes.
#include <bit>
#include <map>
#include <memory>
#include <type_traits>

#include "codegen/cuda_codegen.hpp"
#include "cuda_emulator.hpp"
#include "reduction/reduction_impl.hpp"
#include "ops/op.hpp"
#include "reduction_helpers.hpp"
#include "singular_cases.hpp"
#include "sum_bounds.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

#define SKIP_WITHOUT_COMPILER()                                        \
  if (const std::string why = emu::unavailable_reason(); !why.empty()) \
  GTEST_SKIP() << "the CUDA emulator needs a C++ compiler: " << why

using KernelFn = void(const void* X, const void* Y, const void* P, long long n_outer,
                      long long n_inner, void* out0, long long* outi, void* work, long long chunk);
using CombineFn = void(const void* work, long long n_outer, int split_j, void* out0,
                       long long* outi);

// Modules by CUDA source: the launches of one test process share each compile.
const emu::Module& module_for(const std::string& cuda) {
  static std::map<std::string, std::unique_ptr<emu::Module>> modules;
  auto& m = modules[cuda];
  if (!m) m = std::make_unique<emu::Module>(cuda);
  return *m;
}

// Bit patterns no kernel computes (NaNs with a payload): outputs still holding them were never
// written.
template <class T>
using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
template <class T>
T poison() {
  return std::bit_cast<T>(
      static_cast<Bits<T>>(sizeof(T) == 4 ? 0x7fa5a5a5u : 0x7ff4a5a5a5a5a5a5ull));
}
template <class T>
bool is_poison(T v) {
  return std::bit_cast<Bits<T>>(v) == std::bit_cast<Bits<T>>(poison<T>());
}
constexpr int64_t kPoisonIndex = -0x5a5a5a5a;

Options interpreter() {
  Options o;
  o.backend = Backend::Interpreter;
  return o;
}

const CudaDeviceCaps kCaps{};  // an H100's

std::vector<Array> run_emulated(const ReductionImpl& r, const std::vector<Array>& in,
                                const CudaPlanOverrides& force, CudaSumMode sum = {});

// Launches r's kernels as the header of cuda_codegen.hpp says the CUDA backend is to: packed
// X/Y/P, the plan's grid, block, shared memory and workspace, then tessel_combine when the plan
// splits the inner rows.
template <class T>
std::vector<Array> launch(const ReductionImpl& r, const std::vector<Array>& in,
                          const CudaPlanOverrides& force, const CudaKernelPlan& plan,
                          int64_t n_outer, int64_t n_inner) {
  const DType dt = sizeof(T) == 8 ? DType::Float64 : DType::Float32;
  const KernelLayout& lay = plan.layout;
  // Computed variables (a forward value inside a gradient) come from their own kernels.
  std::map<int, Array> computed;
  for (const ComputedVar& c : r.computed)
    computed[c.index] = run_emulated(*c.source, in, force).at(c.output);
  auto values = [&](int index) -> const Array& {
    auto it = computed.find(index);
    return it != computed.end() ? it->second : in.at(index);
  };

  emu::GuardedBuffer X(n_outer * lay.outer_dim * sizeof(T), sizeof(T), "X");
  emu::GuardedBuffer Y(n_inner * lay.inner_dim * sizeof(T), sizeof(T), "Y");
  emu::GuardedBuffer P(lay.param_dim * sizeof(T), sizeof(T), "P");
  for (const KernelLayout::Entry& e : lay.vars) {
    const Array& a = values(e.index);
    for (int c = 0; c < e.dim; ++c) {
      if (e.cat == Category::Param) P.as<T>()[e.offset + c] = static_cast<T>(a.at(c));
      if (e.cat == Category::I)
        for (int64_t i = 0; i < n_outer; ++i)
          X.as<T>()[i * lay.outer_dim + e.offset + c] = static_cast<T>(a.at(i * e.dim + c));
      if (e.cat == Category::J)
        for (int64_t j = 0; j < n_inner; ++j)
          Y.as<T>()[j * lay.inner_dim + e.offset + c] = static_cast<T>(a.at(j * e.dim + c));
    }
  }
  // out0 holds the values, outi the indices, each n_outer × (that output's dim).
  int dv = 0, di = 0;
  for (int k = 0; k < r.num_outputs(); ++k) (r.output_is_index(k) ? di : dv) = r.output_dim(k);
  emu::GuardedBuffer out0(n_outer * dv * sizeof(T), sizeof(T), "out0");
  emu::GuardedBuffer outi(n_outer * di * sizeof(int64_t), sizeof(int64_t), "outi");
  for (int64_t q = 0; q < n_outer * dv; ++q) out0.as<T>()[q] = poison<T>();
  for (int64_t q = 0; q < n_outer * di; ++q) outi.as<int64_t>()[q] = kPoisonIndex;

  // The contract's sizes: the shared memory holds a tile of `block` inner rows.
  EXPECT_GE(plan.shared_bytes, plan.block * lay.inner_dim * sizeof(T));
  if (n_outer > 0) {  // CUDA rejects an empty grid: the backend skips the launch
    const emu::Module& m = module_for(plan.source);
    KernelFn* fn = m.kernel<KernelFn>("tessel_kernel");
    const int64_t rows_per_block = int64_t{plan.block} * plan.rows_per_thread;
    const int split = plan.split_j;
    const long long chunk = split > 1 ? (n_inner + split - 1) / split : n_inner;
    std::unique_ptr<emu::GuardedBuffer> work;
    if (split > 1) {  // uninitialised on a GPU: NaN bytes here, so that unwritten states show
      work = std::make_unique<emu::GuardedBuffer>(plan.workspace_bytes, 8, "work");
      std::memset(work->data(), 0xa5, work->size());
    }
    emu::LaunchConfig cfg;
    cfg.block.x = static_cast<unsigned>(plan.block);
    cfg.grid.x = static_cast<unsigned>((n_outer + rows_per_block - 1) / rows_per_block);
    cfg.grid.y = static_cast<unsigned>(split);
    cfg.dynamic_smem = plan.shared_bytes;
    cfg.smem_limit = kCaps.max_shared_per_block;  // the launcher opts in above 48 KiB
    void* wp = work ? work->data() : nullptr;
    m.launch(cfg, [&] {
      fn(X.data(), Y.data(), P.data(), n_outer, n_inner, out0.data(), outi.as<long long>(), wp,
         chunk);
    });
    if (split > 1) {
      CombineFn* comb = m.kernel<CombineFn>("tessel_combine");
      emu::LaunchConfig cc;
      cc.block.x = static_cast<unsigned>(plan.block);
      cc.grid.x = static_cast<unsigned>((n_outer + plan.block - 1) / plan.block);
      m.launch(cc, [&] { comb(wp, n_outer, split, out0.data(), outi.as<long long>()); });
    }
  }

  std::vector<Array> outs;
  for (int k = 0; k < r.num_outputs(); ++k) {
    const bool idx = r.output_is_index(k);
    const int d = r.output_dim(k);
    Array a(idx ? DType::Int64 : dt, {r.full_sum ? 1 : n_outer, d});
    std::vector<double> sum(d, 0.0);
    for (int64_t q = 0; q < n_outer * d; ++q) {
      const bool unwritten =
          idx ? outi.as<int64_t>()[q] == kPoisonIndex : is_poison(out0.as<T>()[q]);
      if (unwritten) ADD_FAILURE() << "output " << k << " entry " << q << " was never written";
      if (r.full_sum)
        sum[q % d] += out0.as<T>()[q];
      else if (idx)
        a.as<int64_t>()[q] = outi.as<int64_t>()[q];
      else
        a.as<T>()[q] = out0.as<T>()[q];
    }
    if (r.full_sum)
      for (int c = 0; c < d; ++c) a.as<T>()[c] = static_cast<T>(sum[c]);
    outs.push_back(std::move(a));
  }
  // Terms the chain rule adds to output 0 are reductions of their own.
  for (const auto& add : r.addends) {
    const Array extra = run_emulated(*add, in, force).at(0);
    for (int64_t q = 0; q < outs[0].size(); ++q) outs[0].as<T>()[q] += static_cast<T>(extra.at(q));
  }
  return outs;
}

std::vector<Array> run_emulated(const ReductionImpl& r, const std::vector<Array>& in,
                                const CudaPlanOverrides& force, CudaSumMode sum) {
  DType dt = DType::Float32;
  for (const VarSlot& v : r.vars)
    if (!v.computed && v.kind != DType::Int64) dt = in.at(v.index).dtype();
  int64_t rows[2] = {0, 0};
  for (const VarSlot& v : r.vars)
    if (!v.computed && v.cat != Category::Param)
      rows[static_cast<int>(v.cat)] = in.at(v.index).shape()[0];
  const int64_t n_outer = rows[static_cast<int>(r.outer())];
  const int64_t n_inner = rows[static_cast<int>(r.inner())];
  const bool f64 = dt == DType::Float64;
  const CudaKernelPlan plan = plan_cuda_kernel(r, f64, n_outer, n_inner, kCaps, force, sum);
  if (plan.source.empty())  // gather/scatter reductions have no CUDA kernel: the CPU computes them
    return evaluate(Reduction(std::shared_ptr<const ReductionImpl>(&r, [](auto*) {})), in,
                    interpreter());
  return f64 ? launch<double>(r, in, force, plan, n_outer, n_inner)
             : launch<float>(r, in, force, plan, n_outer, n_inner);
}

std::string label(const CudaPlanOverrides& f) {
  return "(block " + std::to_string(f.block) + ", rows/thread " +
         std::to_string(f.rows_per_thread) + ", split " + std::to_string(f.split_j) + ")";
}

// Emulated kernel against the interpreter; index outputs must match exactly.
void expect_matches(const Reduction& r, const std::vector<Array>& in,
                    const CudaPlanOverrides& force, double rtol, double atol,
                    const std::string& what) {
  const std::vector<Array> want = evaluate(r, in, interpreter());
  std::vector<Array> got;
  try {
    got = run_emulated(r.impl(), in, force);
  } catch (const std::exception& e) {
    FAIL() << what << ": " << e.what();
  }
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < want.size(); ++k) {
    std::vector<double> w(want[k].size());
    for (int64_t q = 0; q < want[k].size(); ++q) w[q] = want[k].at(q);
    const bool idx = r.output_is_index(static_cast<int>(k));
    expect_close(got[k], w, idx ? 0 : rtol, idx ? 0 : atol,
                 what + " output " + std::to_string(k) + " " + label(force));
  }
}

void set(Array& a, int64_t k, double v) {
  if (a.dtype() == DType::Float32)
    a.as<float>()[k] = static_cast<float>(v);
  else
    a.as<double>()[k] = v;
}

double tol_of(DType t) { return t == DType::Float32 ? 2e-5 : 1e-12; }

std::string dtype_label(const ::testing::TestParamInfo<bool>& p) { return p.param ? "f64" : "f32"; }

struct Case {
  ReductionOp op;
  int k = 0;
  bool weighted = false;
};
const Case kCases[] = {
    {ReductionOp::Sum},
    {ReductionOp::Min},
    {ReductionOp::Max},
    {ReductionOp::ArgMin},
    {ReductionOp::ArgMax},
    {ReductionOp::MinArgMin},
    {ReductionOp::MaxArgMax},
    {ReductionOp::KMin, 5},
    {ReductionOp::ArgKMin, 5},
    {ReductionOp::KMinArgKMin, 5},
    {ReductionOp::LogSumExp},
    {ReductionOp::LogSumExp, 0, true},
    {ReductionOp::SumSoftMaxWeight},
};

// The formulas of test_reductions.cpp: rounded values make exact ties common.
Reduction case_reduction(const Case& c, int axis) {
  const Formula x = vi(0, 2), y = vj(1, 2), b = vj(2, 3), s = pm(3, 1);
  const bool scalar = c.op == ReductionOp::KMin || c.op == ReductionOp::ArgKMin ||
                      c.op == ReductionOp::KMinArgKMin || c.op == ReductionOp::LogSumExp ||
                      c.op == ReductionOp::SumSoftMaxWeight;
  Formula f = scalar ? round(s * sqdist(x, y) * 4.0) * 0.25 - 1.0 : round(4.0 * (x - y) * s) * 0.25;
  Formula w = c.weighted || c.op == ReductionOp::SumSoftMaxWeight ? b : Formula{};
  if (axis == 0) {  // the same formula with the roles of i and j swapped
    f = substitute(f, {x, y, b}, {vj(0, 2), vi(1, 2), vi(2, 3)});
    if (w.valid()) w = vi(2, 3);
  }
  return Reduction(c.op, f, axis, c.k, w);
}

// Inputs for case_reduction: n_out output rows reduced over n_red rows; variable 1 is the
// reduced-over one on both axes, and its rows 10 and 250 may be NaN (the first one must win).
std::vector<Array> case_inputs(DType t, int axis, int64_t n_out, int64_t n_red, bool nan) {
  const int64_t n0 = axis == 1 ? n_out : n_red, n1 = axis == 1 ? n_red : n_out;
  std::vector<Array> in = {random_array(t, {n0, 2}, 1, -2, 2), random_array(t, {n1, 2}, 2, -2, 2),
                           random_array(t, {n1, 3}, 3, 0.1, 1), random_array(t, {1}, 4, 0.5, 1)};
  if (nan && in[1].shape()[0] > 10) set(in[1], 20, NAN);
  if (nan && in[1].shape()[0] > 250) set(in[1], 501, NAN);
  return in;
}

bool kmin_family(ReductionOp op) {
  return op == ReductionOp::KMin || op == ReductionOp::ArgKMin || op == ReductionOp::KMinArgKMin;
}

}  // namespace

class CudaEmulatedKernels : public ::testing::TestWithParam<bool> {
 protected:
  DType dtype() const { return GetParam() ? DType::Float64 : DType::Float32; }
};

// Every reduction over j, with and without a NaN among the reduced-over values: one row per
// thread in 3 blocks of 128 threads (the last one partial) and 2 tiles of inner rows (the last
// one partial); then the plan's own choice (several rows per thread).
TEST_P(CudaEmulatedKernels, EveryReductionOverJ) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  for (const Case& c : kCases) {
    const Reduction r = case_reduction(c, 1);
    for (const CudaPlanOverrides& force : {CudaPlanOverrides{128, 1, 0}, CudaPlanOverrides{}})
      for (bool nan : {false, true})
        expect_matches(r, case_inputs(dtype(), 1, 300, 200, nan), force, tol, tol,
                       r.str() + (nan ? " with NaN" : ""));
  }
}

// Over i (axis 0) the kernel's outer rows are the j variables; one case per reduction family.
TEST_P(CudaEmulatedKernels, ReductionsOverI) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  for (const Case& c : {kCases[0], kCases[5], kCases[9], kCases[11], kCases[12]}) {
    const Reduction r = case_reduction(c, 0);
    for (bool nan : {false, true})
      expect_matches(r, case_inputs(dtype(), 0, 150, 90, nan), {.block = 64}, tol, tol,
                     r.str() + (nan ? " with NaN" : ""));
  }
}

// The inner rows split across block rows, then merged by tessel_combine: every reduction, chunk
// boundaries inside tiles (chunks of 100, 43, 60 and 150 rows against tiles of 32 or 64), every
// rows-per-thread, NaN in two chunks (the first one's index wins), and the rounded formulas'
// ties across chunks (the lowest index wins), all as the unsplit CPU computes them.
TEST_P(CudaEmulatedKernels, SplitInnerRowsEveryReduction) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  const CudaPlanOverrides splits[] = {{.block = 64, .split_j = 3},
                                      {.block = 32, .rows_per_thread = 1, .split_j = 7},
                                      {.block = 64, .rows_per_thread = 2, .split_j = 5},
                                      {.block = 32, .rows_per_thread = 4, .split_j = 2}};
  for (const Case& c : kCases) {
    const Reduction r = case_reduction(c, 1);
    for (int k = 0; k < 4; ++k) {
      const bool nan = k % 2;  // NaN makes every LogSumExp NaN: half the splits see numbers
      expect_matches(r, case_inputs(dtype(), 1, 70, 300, nan), splits[k], tol, tol,
                     r.str() + (nan ? " with NaN" : ""));
    }
  }
}

// Ties everywhere and ranges with nothing to pick: every inner row equal (ArgMin must give 0,
// ArgKMin 0..K-1, whichever chunk the rows fall in), every term +inf, -inf or NaN (Min of +inf
// terms still names the first one; a single NaN term makes SoftMax NaN), and chunks left empty by
// the split (5 rows in 4 chunks of 2: the last one starts past the end; no rows at all).
TEST_P(CudaEmulatedKernels, TiesInfinitiesAndEmptyChunks) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  const Formula x = vi(0, 2), y = vj(1, 2), b = vj(2, 1);
  const Reduction rs[] = {Reduction(ReductionOp::MinArgMin, (x - y) * b),
                          Reduction(ReductionOp::MaxArgMax, (y - x) * b),
                          Reduction(ReductionOp::KMinArgKMin, sqdist(x, y) * b, 1, 3),
                          // past K = 16 the list lives in local memory: another code path
                          Reduction(ReductionOp::ArgKMin, sqdist(x, y) * b, 1, 20),
                          Reduction(ReductionOp::Sum, (x - y) * b),
                          Reduction(ReductionOp::LogSumExp, sqdist(x, y) - 1.0, 1, 0, b),
                          Reduction(ReductionOp::SumSoftMaxWeight, -sqdist(x, y), 1, 0, b)};
  for (const Reduction& r : rs)
    for (double yv : {0.5, double(INFINITY), -double(INFINITY), double(NAN)})
      for (auto [n_red, split] : {std::pair<int64_t, int>{200, 3}, {5, 4}, {1, 1}, {0, 3}}) {
        if (kmin_family(r.op()) && n_red < r.k()) continue;
        std::vector<Array> in = {random_array(dtype(), {40, 2}, 7, -1, 1),
                                 random_array(dtype(), {n_red, 2}, 8),
                                 random_array(dtype(), {n_red, 1}, 9, 0.5, 1)};
        for (int64_t k = 0; k < in[1].size(); ++k) set(in[1], k, yv);
        for (int64_t k = 0; k < in[2].size(); ++k) set(in[2], k, 0.75);
        for (int rows : {1, 4}) {
          if (rows == 1 && yv != 0.5) continue;  // the emulator's time goes to ties
          expect_matches(
              r, in, {.block = 32, .rows_per_thread = rows, .split_j = split}, tol, tol,
              r.str() + " y = " + std::to_string(yv) + ", " + std::to_string(n_red) + " rows");
        }
      }
}

// Long sums in float32: terms near 0.1 (times powers of two, so each product is exact), where a
// float accumulator growing to ~5e3 rounds each addition the same way (its error reaches ~2e-4
// of the sum, which the test checks first). Every scheme stays within its stated bound, a tile
// being the float run (README "Accuracy of sums"); LogSumExp and SoftMax sums at float tolerance.
TEST_P(CudaEmulatedKernels, LongSumsKeepFloatAccuracy) {
  SKIP_WITHOUT_COMPILER();
  if (GetParam()) GTEST_SKIP() << "float32 only: float64 terms add in double";
  const DType t = dtype();
  const int64_t n_out = 6, n_red = 30011;
  const Formula x = vi(0, 1), y = vj(1, 1);
  std::vector<Array> in = {Array(t, {n_out, 1}), random_array(t, {n_red, 1}, 32, -0.01, 0.01)};
  for (int64_t k = 0; k < n_red; ++k) set(in[1], k, 0.1 + in[1].at(k) * 1e-6);
  for (int64_t i = 0; i < n_out; ++i) set(in[0], i, std::ldexp(1.0, static_cast<int>(i) - 2));
  std::vector<double> terms(n_red);
  for (int64_t k = 0; k < n_red; ++k) terms[k] = in[1].at(k);
  const ExactSum ref = exact_sum(terms);
  {  // what a naive float accumulator would give
    float acc = 0;
    for (double v : terms) acc += static_cast<float>(v);
    EXPECT_GT(std::fabs(acc - ref.sum), 5e-5 * ref.sum) << "the test no longer needs block sums";
  }
  for (const SumSetup& c : {SumSetup{SumScheme::Block}, SumSetup{SumScheme::Kahan},
                            SumSetup{SumScheme::Direct}, SumSetup{SumScheme::Block, true}})
    for (const CudaPlanOverrides& force :
         {CudaPlanOverrides{.block = 256}, CudaPlanOverrides{.block = 256, .split_j = 3}}) {
      SumSetup tile = c;
      tile.block_terms = force.block;
      const double tol = sum_error_bound(tile, n_red, ref.abs_sum, ref.sum) + ref.error;
      const std::vector<Array> got =
          run_emulated(Reduction(ReductionOp::Sum, x * y).impl(), in, force, {c.scheme, c.acc_f64});
      for (int64_t i = 0; i < n_out; ++i) {
        const double scale = std::ldexp(1.0, static_cast<int>(i) - 2);
        EXPECT_LE(std::fabs(got[0].at(i) / scale - ref.sum), tol)
            << "scheme " << static_cast<int>(c.scheme) << (c.acc_f64 ? " f64acc " : " ")
            << label(force) << " row " << i << ": relative error "
            << std::fabs(got[0].at(i) / scale / ref.sum - 1) << ", bound " << tol / ref.sum;
      }
    }
  const double tol = tol_of(t);
  const CudaPlanOverrides force{.block = 256};
  expect_matches(Reduction(ReductionOp::LogSumExp, x * y * 10.0), in, force, tol, tol,
                 "LogSumExp of x");
  expect_matches(Reduction(ReductionOp::SumSoftMaxWeight, -x * y, 1, 0, y), in, force, tol, tol,
                 "SoftMax of -0.1 x");
}

// Tile and block boundaries: sizes that are not multiples of the block, fewer inner rows than
// threads, a single row, no inner rows at all, with warp-sized and larger blocks. The formulas
// are continuous (no ties), so that an index computed from the wrong tile shows.
TEST_P(CudaEmulatedKernels, OddSizesAndBlockSizes) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  const Formula x = vi(0, 2), y = vj(1, 2), b = vj(2, 3), s = pm(3, 1);
  const Reduction reductions[] = {Reduction(ReductionOp::Sum, exp(-s * sqdist(x, y)) * b),
                                  Reduction(ReductionOp::MinArgMin, (x - y) * s),
                                  Reduction(ReductionOp::KMinArgKMin, sqdist(x, y) * s, 1, 3),
                                  Reduction(ReductionOp::LogSumExp, -s * sqdist(x, y), 1, 0, b)};
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1},   {1, 0},    {5, 3},     {31, 97},
                                               {64, 64}, {65, 129}, {257, 300}, {40, 1}};
  for (const Reduction& r : reductions) {
    const bool nan_ok = r.op() == ReductionOp::MinArgMin || kmin_family(r.op());
    for (int block : {32, 64, 128, 256})
      for (auto [n_out, n_red] : sizes) {
        if (kmin_family(r.op()) && n_red < r.k()) continue;  // K > rows is an input error
        expect_matches(
            r, case_inputs(dtype(), 1, n_out, n_red, nan_ok && n_red > 20), {.block = block}, tol,
            tol, r.str() + " n_out " + std::to_string(n_out) + " n_red " + std::to_string(n_red));
      }
  }
}

// LogSumExp and SumSoftMaxWeight where the naive formula overflows or has nothing to add: terms
// up to +-1000, -inf terms (log 0), a row whose terms are all -inf, a row of NaN; then a +inf
// column (one infinite term per row) and a NaN column (every row NaN).
TEST_P(CudaEmulatedKernels, SoftmaxEdgeValues) {
  SKIP_WITHOUT_COMPILER();
  const DType t = dtype();
  const Formula x = vi(0, 2), a = vi(1, 1), y = vj(2, 2), b = vj(3, 1), w = vj(4, 3), c = pm(5, 1);
  const Formula f = c * (x | y) + log(a * b);
  const int64_t N = 200, M = 150;
  std::vector<Array> in = {
      random_array(t, {N, 2}, 11),         random_array(t, {N, 1}, 12, 0.5, 2),
      random_array(t, {M, 2}, 13),         random_array(t, {M, 1}, 14, 0.5, 2),
      random_array(t, {M, 3}, 15, 0.1, 1), Array::from(std::vector<double>{500}, {1})};
  if (t == DType::Float32) in[5] = Array::from(std::vector<float>{500}, {1});
  set(in[1], 3, 0.0);     // row 3: every term is -inf
  set(in[1], 7, -1.0);    // row 7: every term is NaN
  set(in[3], 11, 0.0);    // column 11: -inf in every row
  set(in[3], 12, 1e-30);  // column 12: a very negative term
  // float32 rounds F (up to 1000) to ~1e-4, which the softmax weights inherit.
  const double tol = t == DType::Float32 ? 1e-3 : 1e-11;
  const Reduction rs[] = {Reduction(ReductionOp::LogSumExp, f),
                          Reduction(ReductionOp::LogSumExp, f, 1, 0, w),
                          Reduction(ReductionOp::SumSoftMaxWeight, f, 1, 0, w * 2.0 - 1.0)};
  for (const Reduction& r : rs) {
    expect_matches(r, in, {.block = 128}, tol, tol, r.str());
    std::vector<Array> inf_in = clone(in), nan_in = clone(in);
    set(inf_in[3], 13, INFINITY);
    set(inf_in[1], 5, INFINITY);  // row 5: every term +inf (LogSumExp +inf, SoftMax NaN)
    expect_matches(r, inf_in, {.block = 64, .split_j = 3}, tol, tol,
                   r.str() + " with a +inf column");
    set(nan_in[2], 41, NAN);  // column 20
    expect_matches(r, nan_in, {.block = 64, .split_j = 4}, tol, tol,
                   r.str() + " with a NaN column");
  }
}

// Every op of the table in one kernel: a concatenation of one sample per op (inputs inside each
// op's domain), so a wrong op shows in its own columns. Summed and maximised over j.
TEST_P(CudaEmulatedKernels, EveryOpValues) {
  SKIP_WITHOUT_COMPILER();
  const Formula x = vi(0, 3), y = vj(1, 3), a = x - y, u = sin(a), pos = square(a) + 0.5;
  const Formula e = elem(a, 0), ep = elem(pos, 1), m = tensorprod(x, y);
  const std::vector<std::pair<const char*, Formula>> parts = {
      {"add", x + y[0]},
      {"sub/neg", -a},
      {"mul", x * y},
      {"div", x / pos},
      {"exp", exp(a)},
      {"log", log(pos)},
      {"xlogx", xlogx(pos * step(e))},
      {"sqrt", sqrt(pos)},
      {"rsqrt", rsqrt(pos)},
      {"inv", inv(pos)},
      {"pow", pow(a, 3) + pow(pos, -2)},
      {"powf", powf(pos, y + 1.0)},
      {"square", square(a)},
      {"abs", abs(a)},
      {"sign", sign(a)},
      {"step", step(a)},
      {"relu", relu(a)},
      {"sin", u},
      {"cos", cos(a)},
      {"asin", asin(0.9 * u)},
      {"acos", acos(0.9 * u)},
      {"atan", atan(3.0 * a)},
      {"atan2", atan2(x, y)},
      {"sinc", sinc(3.0 * a * step(e)) + sinc(1e3 * a)},
      {"floor", floor(4.0 * a)},
      {"round", round(4.0 * a) + make(OpCode::Round, {a}, {2})},
      {"mod", mod(4.0 * a, constant(1.5), constant(0.25))},
      {"clamp", clamp(a, constant(-0.3), y)},
      {"clampint", clampint(4.0 * a, -1, 2)},
      {"ifelse", ifelse(e, x, y)},
      {"elem_min", elem_min(x, y)},
      {"elem_max", elem_max(x, y)},
      {"less", less(x, y)},
      {"less_eq", less_eq(round(4.0 * x), round(4.0 * y))},
      {"greater", greater(x, y)},
      {"greater_eq", greater_eq(round(4.0 * x), round(4.0 * y))},
      {"equal", equal(round(2.0 * x), round(2.0 * y))},
      {"not_equal", not_equal(round(2.0 * x), round(2.0 * y))},
      {"sum", sum(a)},
      {"max", max(a)},
      {"min", min(a)},
      {"argmax", argmax(a)},
      {"argmin", argmin(a)},
      {"elem", elem(a, 2)},
      {"extract", extract(a, 1, 2)},
      {"concat", concat(x, y[1])},
      {"one_hot", one_hot(clampint(round(2.0 * e), 0, 3), 4)},
      {"sqnorm2", sqnorm2(a)},
      {"norm2", norm2(a)},
      {"normalize", normalize(a)},
      {"sqdist", sqdist(x, y)},
      {"scalprod", x | y},
      {"sqnorm_iso", sqnorm_iso(ep, a)},
      {"sqnorm_diag", sqnorm_diag(pos, a)},
      {"sym_sqnorm", sym_sqnorm(m, a)},
      {"matvecmult", matvecmult(m, a)},
      {"vecmatmult", vecmatmult(a, m)},
      {"tensorprod", m},
      {"tensordot", tensordot(m, concat(y, x), {3, 3}, {2, 3}, {1}, {1})}};
  Formula all = parts[0].second;
  for (size_t k = 1; k < parts.size(); ++k) all = concat(all, parts[k].second);
  // A new op without a sample here fails, as in test_cuda_codegen.cpp.
  std::vector<bool> seen(static_cast<size_t>(OpCode::Count_), false);
  for (const NodePtr& n : topo_order(all.ptr())) seen[static_cast<size_t>(n->op)] = true;
  for (size_t k = static_cast<size_t>(OpCode::Add); k < seen.size(); ++k)
    EXPECT_TRUE(seen[k]) << "op " << op_info(static_cast<OpCode>(k)).name << " has no sample";

  const DType t = dtype();
  std::vector<Array> in = {random_array(t, {70, 3}, 5, -1.5, 1.5),
                           random_array(t, {45, 3}, 6, -1.5, 1.5)};
  // Inputs on a 1/64 grid: x - y, 4 (x - y), 100 (x - y) are then exact in float32 too, so the
  // jumps of floor, round, mod and the comparisons fall the same way as in the float64
  // interpreter; elsewhere float32 is within a few ulps.
  for (Array& v : in)
    for (int64_t k = 0; k < v.size(); ++k) set(v, k, std::round(v.at(k) * 64) / 64);
  const double tol = t == DType::Float64 ? 1e-12 : 3e-5;
  for (ReductionOp op : {ReductionOp::Sum, ReductionOp::Max}) {
    const Reduction r(op, all);
    const Array want = evaluate(r, in, interpreter())[0];
    Array got;
    try {
      got = run_emulated(r.impl(), in, {.block = 32}).at(0);
    } catch (const std::exception& ex) {
      FAIL() << r.str() << ": " << ex.what();
    }
    const int D = all.dim();
    int col = 0;
    for (const auto& [name, f] : parts) {
      int bad = 0;
      for (int64_t i = 0; i < 70; ++i)
        for (int c = col; c < col + f.dim(); ++c) {
          const double g = got.at(i * D + c), w = want.at(i * D + c);
          bad += !(std::fabs(g - w) <= tol * 10 + tol * std::fabs(w));
          if (bad == 1 && !(std::fabs(g - w) <= tol * 10 + tol * std::fabs(w)))
            ADD_FAILURE() << reduction_name(op) << " of " << name << " row " << i << " column "
                          << c - col << ": emulated " << g << ", interpreter " << w;
        }
      col += f.dim();
    }
  }
}

// Gradients are reductions too, over the other axis, with computed variables (the forward value
// of LogSumExp) or summed over all rows (a parameter's): every kernel of the chain is emulated.
TEST_P(CudaEmulatedKernels, Gradients) {
  SKIP_WITHOUT_COMPILER();
  const DType t = dtype();
  const Formula x = vi(0, 3), y = vj(1, 3), b = vj(2, 2), g = pm(3, 1);
  const Formula f = -g * sqdist(x, y);
  const Reduction gauss(ReductionOp::Sum, exp(f) * b), lse(ReductionOp::LogSumExp, f, 1, 0, b[0]);
  std::vector<Array> in = {random_array(t, {90, 3}, 21), random_array(t, {70, 3}, 22),
                           random_array(t, {70, 2}, 23, 0.1, 1), random_array(t, {1}, 24, 1, 2)};
  const double tol = t == DType::Float64 ? 1e-11 : 1e-4;
  for (const auto& [r, var] : {std::pair{gauss, 0}, {gauss, 1}, {gauss, 3}, {lse, 1}, {lse, 0}}) {
    std::vector<Array> gin = in;
    gin.push_back(random_array(t, {90, r.output_dim(0)}, 25));
    const Reduction dr = grad(r, var);
    expect_matches(dr, gin, {.block = 64}, tol, tol, dr.str());
    expect_matches(dr, gin, {.block = 64, .split_j = 3}, tol, tol, dr.str());
  }
}

// Every op at its singular points (Rsqrt(0) = 0, ...), value and two derivatives: the CUDA
// prelude's math against the interpreter, which test_singular_points.cpp checks against references.
TEST_P(CudaEmulatedKernels, SingularPoints) {
  SKIP_WITHOUT_COMPILER();
  const DType t = dtype();
  const double tol = t == DType::Float64 ? 1e-11 : 3e-4;
  for (const singular::Batch& b : {singular::unary_batch(t), singular::multi_batch(t)})
    for (int order = 0; order <= 2; ++order) {
      const auto [r, in] = singular::derivative(b, order, t);
      expect_matches(r, in, {.block = 32}, tol, tol, "derivative " + std::to_string(order));
    }
}

INSTANTIATE_TEST_SUITE_P(CudaEmulated, CudaEmulatedKernels, ::testing::Bool(), dtype_label);
