// The CUDA emulator harness of the test_cuda_emulated*.cpp tests: generated kernels launched as the
// plan says (grid, block, shared memory, split inner rows and tessel_combine) and compared with the
// interpreter value by value; block-sparse reductions launched from their range table.
#pragma once

#include <bit>
#include <map>
#include <memory>
#include <type_traits>

#include "codegen/cuda_codegen.hpp"
#include "codegen/cuda_rows.hpp"
#include "cuda_emulator.hpp"
#include "reduction/reduction_impl.hpp"
#include "reduction_helpers.hpp"

namespace tessel::testing {

#define SKIP_WITHOUT_COMPILER()                                        \
  if (const std::string why = emu::unavailable_reason(); !why.empty()) \
  GTEST_SKIP() << "the CUDA emulator needs a C++ compiler: " << why

using KernelFn = void(const void* X, const void* Y, const void* P, long long n_outer,
                      long long n_inner, void* out0, long long* outi, void* work, long long chunk,
                      const long long* tab, const long long* ivs, int flags, long long j_offset);
using CombineFn = void(const void* work, long long n_outer, int split_j, void* out0,
                       long long* outi);

// Modules by CUDA source: the launches of one test process share each compile.
inline const emu::Module& module_for(const std::string& cuda) {
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

inline Options interpreter() {
  Options o;
  o.backend = Backend::Interpreter;
  return o;
}

const CudaDeviceCaps kCaps{};  // an H100's

inline std::vector<Array> run_emulated(const ReductionImpl& r, const std::vector<Array>& in,
                                       const CudaPlanOverrides& force, CudaSumMode sum = {},
                                       const BlockRanges* ranges = nullptr);

// Launches r's kernels as the header of cuda_codegen.hpp says the CUDA backend is to: packed
// X/Y/P, the plan's grid, block, shared memory and workspace, then tessel_combine when the plan
// splits the inner rows. With `ranges` (KeOps's, read for r's outer axis): one CUDA block per
// entry of cuda_range_table, unsplit, as the backend launches them.
template <class T>
std::vector<Array> launch(const ReductionImpl& r, const std::vector<Array>& in,
                          const CudaPlanOverrides& force, const CudaKernelPlan& plan,
                          int64_t n_outer, int64_t n_inner, const BlockRanges* ranges = nullptr) {
  const DType dt = sizeof(T) == 8 ? DType::Float64 : DType::Float32;
  const KernelLayout& lay = plan.layout;
  // Computed variables (a forward value inside a gradient) come from their own kernels.
  std::map<int, Array> computed;
  for (const ComputedVar& c : r.computed)
    computed[c.index] = run_emulated(*c.source, in, force, {}, ranges).at(c.output);
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
    const int split = ranges ? 1 : plan.split_j;
    CudaRangeTable table;
    std::unique_ptr<emu::GuardedBuffer> tab, ivs;
    if (ranges) {
      const bool by_i = r.outer() == Category::I;
      const auto& rows = by_i ? ranges->ranges_i : ranges->ranges_j;
      const auto& slices = by_i ? ranges->slices_i : ranges->slices_j;
      const auto& red = by_i ? ranges->redranges_j : ranges->redranges_i;
      std::vector<std::vector<int64_t>> lists(rows.size() / 2);
      std::vector<CudaRowRange> rr;
      for (size_t c = 0; c < lists.size(); ++c) {
        for (int64_t q = c ? slices[c - 1] : 0; q < slices[c]; ++q)
          lists[c].insert(lists[c].end(), {red[2 * q], red[2 * q + 1]});
        rr.push_back({rows[2 * c], rows[2 * c + 1], &lists[c]});
      }
      table = cuda_range_table(rr, n_outer, rows_per_block);
      tab = std::make_unique<emu::GuardedBuffer>(std::max<size_t>(1, table.blocks.size()) * 8, 8,
                                                 "tab");
      ivs =
          std::make_unique<emu::GuardedBuffer>(std::max<size_t>(1, table.ivs.size()) * 8, 8, "ivs");
      std::copy(table.blocks.begin(), table.blocks.end(), tab->as<int64_t>());
      std::copy(table.ivs.begin(), table.ivs.end(), ivs->as<int64_t>());
    }
    const long long chunk = split > 1 ? (n_inner + split - 1) / split : n_inner;
    std::unique_ptr<emu::GuardedBuffer> work;
    if (split > 1) {  // uninitialised on a GPU: NaN bytes here, so that unwritten states show
      work = std::make_unique<emu::GuardedBuffer>(plan.workspace_bytes, 8, "work");
      std::memset(work->data(), 0xa5, work->size());
    }
    emu::LaunchConfig cfg;
    cfg.block.x = static_cast<unsigned>(plan.block);
    cfg.grid.x = static_cast<unsigned>(ranges ? table.blocks.size() / 4
                                              : (n_outer + rows_per_block - 1) / rows_per_block);
    cfg.grid.y = static_cast<unsigned>(split);
    cfg.dynamic_smem = plan.shared_bytes;
    cfg.smem_limit = kCaps.max_shared_per_block;  // the launcher opts in above 48 KiB
    void* wp = work ? work->data() : nullptr;
    m.launch(cfg, [&] {
      fn(X.data(), Y.data(), P.data(), n_outer, n_inner, out0.data(), outi.as<long long>(), wp,
         chunk, tab ? tab->as<long long>() : nullptr, ivs ? ivs->as<long long>() : nullptr, 0, 0);
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
    const Array extra = run_emulated(*add, in, force, {}, ranges).at(0);
    for (int64_t q = 0; q < outs[0].size(); ++q) outs[0].as<T>()[q] += static_cast<T>(extra.at(q));
  }
  return outs;
}

inline std::vector<Array> run_emulated(const ReductionImpl& r, const std::vector<Array>& in,
                                       const CudaPlanOverrides& force, CudaSumMode sum,
                                       const BlockRanges* ranges) {
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
  if (plan.source.empty()) {  // gather/scatter reductions have no CUDA kernel: the CPU's
    Options o = interpreter();
    if (ranges) o.ranges = std::make_shared<BlockRanges>(*ranges);
    return evaluate(Reduction(std::shared_ptr<const ReductionImpl>(&r, [](auto*) {})), in, o);
  }
  return f64 ? launch<double>(r, in, force, plan, n_outer, n_inner, ranges)
             : launch<float>(r, in, force, plan, n_outer, n_inner, ranges);
}

inline std::string label(const CudaPlanOverrides& f) {
  return "(block " + std::to_string(f.block) + ", rows/thread " +
         std::to_string(f.rows_per_thread) + ", split " + std::to_string(f.split_j) + ")";
}

// Emulated kernel against the interpreter (both with `ranges` when given); index outputs must
// match exactly.
inline void expect_matches(const Reduction& r, const std::vector<Array>& in,
                           const CudaPlanOverrides& force, double rtol, double atol,
                           const std::string& what,
                           const std::shared_ptr<BlockRanges>& ranges = nullptr) {
  Options o = interpreter();
  o.ranges = ranges;
  const std::vector<Array> want = evaluate(r, in, o);
  std::vector<Array> got;
  try {
    got = run_emulated(r.impl(), in, force, {}, ranges.get());
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

inline void set(Array& a, int64_t k, double v) {
  if (a.dtype() == DType::Float32)
    a.as<float>()[k] = static_cast<float>(v);
  else
    a.as<double>()[k] = v;
}

inline double tol_of(DType t) { return t == DType::Float32 ? 2e-5 : 1e-12; }

inline std::string dtype_label(const ::testing::TestParamInfo<bool>& p) {
  return p.param ? "f64" : "f32";
}

class CudaEmulatedKernels : public ::testing::TestWithParam<bool> {
 protected:
  DType dtype() const { return GetParam() ? DType::Float64 : DType::Float32; }
};

}  // namespace tessel::testing
