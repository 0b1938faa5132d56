// The gather/scatter kernels (gradients through Min, Max, KMin and their arg forms) run in the
// CUDA emulator against the interpreter: every indexed reduction differentiation makes for a set
// of reductions and variables, float32 and float64, partner indices out of range, strided rows.
#include <functional>
#include <random>
#include <set>

#include "backend/backend.hpp"
#include "codegen/cuda_indexed.hpp"
#include "cuda_emulated_harness.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// Every gather/scatter reduction inside r: itself, its computed variables' sources, its addends.
void indexed_parts(const ReductionImpl& r, std::vector<const ReductionImpl*>& out,
                   std::set<const ReductionImpl*>& seen) {
  if (!seen.insert(&r).second) return;
  if (reduction_info(r.op).is_indexed()) out.push_back(&r);
  for (const ComputedVar& c : r.computed) indexed_parts(*c.source, out, seen);
  for (const auto& a : r.addends) indexed_parts(*a, out, seen);
}

// Binds one indexed reduction to random data (floats in [-1, 1), rows padded past their dim so
// that they are strided, partner indices in [-1, n_partner] so that some fall outside the range)
// and checks the emulated kernel against the interpreter.
template <class T>
void check(const ReductionImpl& r, int64_t n_outer, int64_t n_inner, uint64_t seed) {
  const bool f64 = std::is_same_v<T, double>;
  const bool gather = r.op == ReductionOp::GatherSum;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  const int64_t n_partner = gather ? n_inner : n_outer;
  Problem p;
  p.r = &r;
  p.dtype = f64 ? DType::Float64 : DType::Float32;
  p.n_outer = n_outer;
  p.n_inner = n_inner;
  p.blocks = {RowBlock{0, n_outer, {0, n_inner}}};
  std::vector<std::vector<T>> floats;
  std::vector<std::vector<int64_t>> ints;
  floats.reserve(r.vars.size());
  ints.reserve(r.vars.size());
  for (const int index : cuda_indexed_vars(r)) {
    const VarSlot& v = *r.find_var(index);
    Bound b;
    b.index = index;
    b.cat = v.cat;
    b.dim = v.dim;
    b.rows = v.cat == Category::Param ? 1 : v.cat == r.outer() ? n_outer : n_inner;
    b.s_row = v.cat == Category::Param ? 0 : v.dim + 1;  // one padding element per row
    b.s_col = 1;
    ASSERT_GE(v.dim, 0) << "var " << index << " of " << r.f.str();
    const size_t n = static_cast<size_t>(b.rows * (v.dim + 1));
    if (index == r.index_var) {
      b.dtype = DType::Int64;
      auto& d = ints.emplace_back(n);
      for (int64_t& x : d) x = static_cast<int64_t>(gen() % (n_partner + 2)) - 1;
      b.data = d.data();
    } else {
      b.dtype = p.dtype;
      auto& d = floats.emplace_back(n);
      for (T& x : d) x = static_cast<T>(u(gen));
      b.data = d.data();
    }
    p.vars.push_back(b);
  }
  const int D = r.f.dim();
  Array want(p.dtype, {n_outer, D});
  const ArrayView outs[1] = {want.view()};
  ASSERT_TRUE(interpreter_backend().run(p, outs));

  std::vector<unsigned long long> table;
  for (const int index : cuda_indexed_vars(r)) {
    const Bound& b = p.var(index);
    table.insert(table.end(), {reinterpret_cast<unsigned long long>(b.data),
                               static_cast<unsigned long long>(b.s_row),
                               static_cast<unsigned long long>(b.s_col)});
  }
  const std::string src = cuda_indexed_source(r, f64);
  ASSERT_FALSE(src.empty());
  const emu::Module& m = module_for(src);
  using Fn = void(const unsigned long long*, long long, long long, T*, double*);
  Fn* k = m.kernel<Fn>("tessel_indexed");
  const int64_t n_anchor = gather ? n_outer : n_inner;
  std::vector<T> out(static_cast<size_t>(n_outer * D), poison<T>());
  std::vector<double> acc(static_cast<size_t>(n_outer * D), 0.0);
  emu::LaunchConfig cfg;
  cfg.block.x = 32;
  cfg.grid.x = static_cast<unsigned>((n_anchor + 31) / 32);
  m.launch(cfg, [&] { k(table.data(), n_anchor, n_partner, out.data(), acc.data()); });
  for (int64_t q = 0; q < n_outer * D; ++q) {
    const double w = want.at(q);
    const double got =
        gather ? static_cast<double>(out[q]) : static_cast<double>(static_cast<T>(acc[q]));
    // The same terms added in double in another order (the formula itself in T, on both sides).
    const double tol = f64 ? 1e-12 : 2e-6;
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(got)) << r.f.str() << " entry " << q;
      continue;
    }
    EXPECT_NEAR(got, w, tol * (1 + std::abs(w)))
        << reduction_name(r.op) << " " << r.f.str() << " entry " << q;
  }
}

}  // namespace

class CudaEmulatedIndexed : public ::testing::TestWithParam<bool> {};

TEST_P(CudaEmulatedIndexed, GradientsThroughSelectionsMatchTheInterpreter) {
  SKIP_WITHOUT_COMPILER();
  const Formula x = vi(0, 3), y = vj(1, 3), w = vj(2, 2);
  const Formula d = sqdist(x, y) * (w[0] + 2.0);
  const std::vector<Reduction> rs = {
      Reduction(ReductionOp::Min, d),
      Reduction(ReductionOp::Max, d),
      Reduction(ReductionOp::MinArgMin, d),
      Reduction(ReductionOp::KMin, d, 1, 3),
      Reduction(ReductionOp::KMinArgKMin, d, 1, 4),
      // Per component of a vector: slot k * 3 + c carries component c's k-th best.
      Reduction(ReductionOp::KMin, (x - y) * (x - y) * (w[0] + 2.0), 1, 3),
      Reduction(ReductionOp::Min, sqdist(vj(0, 3), vi(1, 3)) * (vi(2, 2)[1] + 2.0), 0),
      Reduction(ReductionOp::MaxArgMax, (x - y) * w[1], 1),
  };
  int checked = 0;
  std::set<ReductionOp> ops;
  std::set<SlotKind> kinds;
  for (const Reduction& r : rs)
    for (int var : {0, 1, 2}) {
      std::vector<const ReductionImpl*> parts;
      std::set<const ReductionImpl*> seen;
      // The gradient, and its derivative in the cotangent (var 3), whose slots are one-hot.
      const Reduction g = grad(r, var), g2 = grad(g, 3);  // keep the parts alive
      indexed_parts(g.impl(), parts, seen);
      indexed_parts(g2.impl(), parts, seen);
      for (const ReductionImpl* part : parts) {
        ops.insert(part->op);
        for (const SlotVar& sv : part->slot_vars) kinds.insert(sv.kind);
        GetParam() ? check<double>(*part, 37, 29, 7 + checked)
                   : check<float>(*part, 37, 29, 7 + checked);
        ++checked;
      }
    }
  EXPECT_GE(checked, 10);
  EXPECT_EQ(ops.size(), 2u);  // gathers and scatters
  std::string found;
  for (SlotKind k : kinds) found += std::to_string(static_cast<int>(k)) + " ";
  EXPECT_EQ(kinds.size(), 3u) << "slot kinds seen: " << found;
}

INSTANTIATE_TEST_SUITE_P(CudaEmulated, CudaEmulatedIndexed, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "f64" : "f32");
                         });
