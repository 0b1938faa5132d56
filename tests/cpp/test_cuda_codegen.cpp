// CUDA code generation, checked by compiling every op and every reduction with NVRTC (no GPU).
#include <gtest/gtest.h>

#include "backend/cuda/nvrtc.hpp"
#include "codegen/cuda_codegen.hpp"
#include "ir/reduction_impl.hpp"
#include "ops/op.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;

namespace {

// NVRTC ships with the CUDA toolkit this project builds with; say so loudly when it is absent.
bool have_nvrtc() {
  if (nvrtc_info().usable) return true;
  std::printf("[  SKIPPED ] NVRTC unavailable: %s\n", nvrtc_info().problem.c_str());
  return false;
}

void expect_compiles(const Reduction& r, bool f64) {
  KernelLayout lay;
  const std::string src = generate_cuda_kernel(r.impl(), f64, lay);
  ASSERT_FALSE(src.empty()) << r.str();
  std::string ptx;
  try {
    ptx = nvrtc_compile(src, "tessel_kernel.cu", "compute_90");
  } catch (const Error& e) {
    FAIL() << e.what() << "\n--- source ---\n" << src;
  }
  EXPECT_NE(ptx.find(".entry tessel_kernel"), std::string::npos) << r.str();
}

}  // namespace

TEST(CudaCodegen, NvrtcIsFoundOrExplained) {
  const NvrtcInfo& info = nvrtc_info();
  if (info.usable) EXPECT_FALSE(info.version.empty());
  else EXPECT_NE(info.problem.find("NVRTC"), std::string::npos);
}

TEST(CudaCodegen, EveryReductionCompiles) {
  if (!have_nvrtc()) GTEST_SKIP() << nvrtc_info().problem;
  const Formula x = vi(0, 3), y = vj(1, 3), b = vj(2, 2), g = pm(3, 1);
  const Formula f = -g * sqdist(x, y);
  for (bool f64 : {false, true}) {
    expect_compiles(Reduction(ReductionOp::Sum, exp(f) * b), f64);
    expect_compiles(Reduction(ReductionOp::Sum, exp(f) * b, 0), f64);
    for (ReductionOp op : {ReductionOp::Min, ReductionOp::Max, ReductionOp::ArgMin,
                           ReductionOp::ArgMax, ReductionOp::MinArgMin, ReductionOp::MaxArgMax})
      expect_compiles(Reduction(op, x - y), f64);
    for (ReductionOp op : {ReductionOp::KMin, ReductionOp::ArgKMin, ReductionOp::KMinArgKMin})
      expect_compiles(Reduction(op, sqdist(x, y), 1, 5), f64);
    expect_compiles(Reduction(ReductionOp::LogSumExp, f), f64);
    expect_compiles(Reduction(ReductionOp::LogSumExp, f, 1, 0, b), f64);
    expect_compiles(Reduction(ReductionOp::SumSoftMaxWeight, f, 1, 0, b), f64);
    // gradients are reductions too
    expect_compiles(grad(Reduction(ReductionOp::Sum, exp(f) * b), 0), f64);
    expect_compiles(grad(Reduction(ReductionOp::LogSumExp, f), 1), f64);
  }
}

TEST(CudaCodegen, EveryOpCompiles) {
  if (!have_nvrtc()) GTEST_SKIP() << nvrtc_info().problem;
  // One kernel holding every op of the table, so NVRTC runs once per dtype.
  const Formula x = vi(0, 3), y = vj(1, 3), a = x - y, pos = square(a) + 0.5, s = a[0];
  std::vector<Formula> parts = {
      x + y, x - y, x * y, x / pos, sin(-a), exp(a), log(pos), xlogx(pos), sqrt(pos), rsqrt(pos),
      inv(pos), pow(a, 3), powf(pos, y), square(a), abs(a), sign(a), step(a), relu(a), sin(a),
      cos(a), asin(0.5 * sin(a)), acos(0.5 * sin(a)), atan(a), atan2(x, y), floor(a), round(a),
      make(OpCode::Round, {a}, {2}), mod(a, constant(1.5), constant(0.25)),
      clamp(a, constant(-0.3), y), clampint(a, -1, 2), ifelse(s, x, y), elem_min(x, y),
      elem_max(x, y), less(x, y), less_eq(x, y), greater(x, y), greater_eq(x, y), equal(x, y),
      not_equal(x, y), sum(a) + 0.0 * x, max(a) + 0.0 * x, min(a) + 0.0 * x, argmax(a) + 0.0 * x,
      argmin(a) + 0.0 * x, elem(a, 2) + 0.0 * x, concat(extract(a, 1, 2), s),
      one_hot(clampint(s, 0, 2), 3), sqnorm2(a) + 0.0 * x, norm2(a) + 0.0 * x, normalize(a),
      sqdist(x, y) + 0.0 * x, (x | y) + 0.0 * x, sqnorm_iso(s, a) + 0.0 * x,
      sqnorm_diag(pos, a) + 0.0 * x, sym_sqnorm(tensorprod(x, y), a) + 0.0 * x,
      matvecmult(tensorprod(x, y), a), vecmatmult(a, tensorprod(x, y)),
      extract(tensorprod(x, y), 0, 3),
      extract(tensordot(tensorprod(x, y), concat(y, x), {3, 3}, {2, 3}, {1}, {1}), 0, 3)};
  Formula total = parts[0];
  for (size_t k = 1; k < parts.size(); ++k) total = total + parts[k];
  // Every op of the table must be in there: a new op without a CUDA check fails here.
  std::vector<bool> seen(static_cast<size_t>(OpCode::Count_), false);
  for (const NodePtr& n : topo_order(total.ptr())) seen[static_cast<size_t>(n->op)] = true;
  for (size_t k = static_cast<size_t>(OpCode::Add); k < seen.size(); ++k)
    EXPECT_TRUE(seen[k]) << "op " << op_info(static_cast<OpCode>(k)).name << " is not covered";
  for (bool f64 : {false, true}) expect_compiles(Reduction(ReductionOp::Sum, total), f64);
}

TEST(CudaCodegen, CompileErrorsCarryTheLog) {
  if (!have_nvrtc()) GTEST_SKIP() << nvrtc_info().problem;
  try {
    nvrtc_compile("extern \"C\" __global__ void k() { undefined_thing(); }", "bad.cu", "compute_90");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.cu"), std::string::npos) << m;
    EXPECT_NE(m.find("undefined_thing"), std::string::npos) << m;
  }
}
