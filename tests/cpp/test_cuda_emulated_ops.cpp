// Generated CUDA code of every op in the CPU emulator, checked against the interpreter: each op's
// value, the gradient kernels (computed variables, parameter sums) and the singular points.
#include "cuda_emulated_harness.hpp"
#include "ops/op.hpp"
#include "complex_sample.hpp"
#include "singular_cases.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// The same harness as test_cuda_emulated.cpp, its own suite name.
class CudaEmulatedOps : public CudaEmulatedKernels {};

}  // namespace

// Every op of the table in one kernel: a concatenation of one sample per op (inputs inside each
// op's domain), so a wrong op shows in its own columns. Summed and maximised over j.
TEST_P(CudaEmulatedOps, EveryOpValues) {
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
      {"sin_x_div_x", sin_x_div_x(3.0 * a * step(e)) + sin_x_div_x(1e3 * a)},
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
      {"tensordot", tensordot(m, concat(y, x), {3, 3}, {2, 3}, {1}, {1})},
      {"complex", complex_ops_sample(x, y)},
      {"elem_t", elem_t(sum(a), 4, 1)},
      {"extract_t", extract_t(a, 1, 5)},
      {"sum_t", sum_t(e, 3)},
      {"diff_clampint", diff_clampint(4.0 * a, -1, 2)},
      {"bspline", bspline(concat(concat(e, e + 0.5), concat(e + 0.5, e + 2.0)), 2.0 * x[1], 1)},
      {"softdtw", softdtw_sqdist(x, concat(y, e), ep)},
      {"softdtw_grad", make(OpCode::SoftDTWGrad, {x, extract(y, 0, 2), ep})},
      {"softdtw_grad_dir", make(OpCode::SoftDTWGradDir, {x, extract(y, 0, 2), ep, concat(x, y)})},
      {"difference_matrix", difference_matrix(x, extract(y, 0, 2))}};
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
TEST_P(CudaEmulatedOps, Gradients) {
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
TEST_P(CudaEmulatedOps, SingularPoints) {
  SKIP_WITHOUT_COMPILER();
  const DType t = dtype();
  const double tol = t == DType::Float64 ? 1e-11 : 3e-4;
  for (const singular::Batch& b : {singular::unary_batch(t), singular::multi_batch(t)})
    for (int order = 0; order <= 2; ++order) {
      const auto [r, in] = singular::derivative(b, order, t);
      expect_matches(r, in, {.block = 32}, tol, tol, "derivative " + std::to_string(order));
    }
}
INSTANTIATE_TEST_SUITE_P(CudaEmulated, CudaEmulatedOps, ::testing::Bool(), dtype_label);
