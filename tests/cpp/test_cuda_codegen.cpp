// CUDA code generation, checked by compiling every op and every reduction with NVRTC (no GPU), and
// the launch plan's choices (a pure function of the reduction, the sizes and the device).
#include <gtest/gtest.h>

#include "backend/cuda/nvrtc.hpp"
#include "codegen/cuda_codegen.hpp"
#include "codegen/cuda_indexed.hpp"
#include "codegen/cuda_rows.hpp"
#include "complex_sample.hpp"
#include "ops/op.hpp"
#include "reduction/reduction_impl.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;
using tessel::testing::complex_ops_sample;

namespace {

// NVRTC ships with the CUDA toolkit this project builds with; say so loudly when it is absent.
bool have_nvrtc() {
  if (nvrtc_info().usable) return true;
  std::printf("[  SKIPPED ] NVRTC unavailable: %s\n", nvrtc_info().problem.c_str());
  return false;
}

// The PTX of r's kernels (both entries checked), or "" after a failure.
std::string expect_compiles(const Reduction& r, bool f64, int rows_per_thread = 0,
                            CudaSumMode sum = {}) {
  KernelLayout lay;
  const std::string src = generate_cuda_kernel(r.impl(), f64, lay, rows_per_thread, sum);
  EXPECT_FALSE(src.empty()) << r.str();
  std::string ptx;
  try {
    ptx = nvrtc_compile(src, "tessel_kernel.cu", "compute_90");
  } catch (const Error& e) {
    ADD_FAILURE() << e.what() << "\n--- source ---\n" << src;
    return {};
  }
  EXPECT_NE(ptx.find(".entry tessel_kernel"), std::string::npos) << r.str();
  EXPECT_NE(ptx.find(".entry tessel_combine"), std::string::npos) << r.str();
  return ptx;
}

// The variables of the plan tests: x_i, y_j in R^3, a weight b_j, a parameter g.
struct Vars {
  Formula x = vi(0, 3), y = vj(1, 3), b = vj(2, 1), g = pm(3, 1);
  Reduction gauss() const { return Reduction(ReductionOp::Sum, exp(-g * sqdist(x, y)) * b); }
};

}  // namespace

TEST(CudaCodegen, NvrtcIsFoundOrExplained) {
  const NvrtcInfo& info = nvrtc_info();
  if (info.usable)
    EXPECT_FALSE(info.version.empty());
  else
    EXPECT_NE(info.problem.find("NVRTC"), std::string::npos);
}

TEST(CudaCodegen, EveryReductionCompiles) {
  if (!have_nvrtc()) GTEST_SKIP() << nvrtc_info().problem;
  const Formula x = vi(0, 3), y = vj(1, 3), b = vj(2, 2), g = pm(3, 1);
  const Formula f = -g * sqdist(x, y);
  for (bool f64 : {false, true}) {
    expect_compiles(Reduction(ReductionOp::Sum, exp(f) * b), f64);
    expect_compiles(Reduction(ReductionOp::Sum, exp(f) * b, 0), f64);
    expect_compiles(Reduction(ReductionOp::Sum, exp(f) * b), f64, 0, {SumScheme::Kahan});
    expect_compiles(Reduction(ReductionOp::Sum, exp(f) * b), f64, 0, {SumScheme::Block, true});
    for (ReductionOp op : {ReductionOp::Min, ReductionOp::Max, ReductionOp::ArgMin,
                           ReductionOp::ArgMax, ReductionOp::MinArgMin, ReductionOp::MaxArgMax})
      expect_compiles(Reduction(op, x - y), f64);
    for (ReductionOp op : {ReductionOp::KMin, ReductionOp::ArgKMin, ReductionOp::KMinArgKMin}) {
      expect_compiles(Reduction(op, sqdist(x, y), 1, 5), f64);
      expect_compiles(Reduction(op, x - y, 1, 5), f64);  // one list per component
    }
    expect_compiles(Reduction(ReductionOp::LogSumExp, f), f64);
    expect_compiles(Reduction(ReductionOp::LogSumExp, f, 1, 0, b), f64);
    expect_compiles(Reduction(ReductionOp::SumSoftMaxWeight, f, 1, 0, b), f64);
    // gradients are reductions too
    expect_compiles(grad(Reduction(ReductionOp::Sum, exp(f) * b), 0), f64);
    expect_compiles(grad(Reduction(ReductionOp::LogSumExp, f), 1), f64);
  }
}

// The engine's small device kernels (add, sums over all rows, half conversions) compile.
TEST(CudaCodegen, RowKernelsCompile) {
  if (!have_nvrtc()) GTEST_SKIP() << nvrtc_info().problem;
  for (bool f64 : {false, true}) {
    const std::string ptx = nvrtc_compile(cuda_add_rows_source(f64), "tessel_add.cu", "compute_90");
    EXPECT_NE(ptx.find(".entry tessel_add_rows"), std::string::npos);
    const std::string sum = nvrtc_compile(cuda_sum_rows_source(f64), "tessel_sum.cu", "compute_90");
    EXPECT_NE(sum.find(".entry tessel_sum_rows"), std::string::npos);
  }
  for (DType x : {DType::Float32, DType::Float64})
    for (DType y : {DType::Float32, DType::Float64}) {
      EXPECT_NE(nvrtc_compile(cuda_axpby_source(x, y), "tessel_axpby.cu", "compute_90")
                    .find(".entry tessel_axpby"),
                std::string::npos);
      EXPECT_NE(nvrtc_compile(cuda_dot_source(x, y), "tessel_dot.cu", "compute_90")
                    .find(".entry tessel_dot"),
                std::string::npos);
    }
  for (DType h : {DType::Float16, DType::BFloat16})
    for (bool in : {true, false}) {
      const std::string src =
          in ? cuda_convert_source(h, DType::Float32) : cuda_convert_source(DType::Float32, h);
      EXPECT_NE(nvrtc_compile(src, "tessel_convert.cu", "compute_90").find(".entry tessel_convert"),
                std::string::npos)
          << src;
    }
}

// The gather/scatter kernels of gradients through Min and KMin (and a second derivative, whose
// slots are one-hot) compile.
TEST(CudaCodegen, IndexedKernelsCompile) {
  if (!have_nvrtc()) GTEST_SKIP() << nvrtc_info().problem;
  const Formula d = sqdist(vi(0, 3), vj(1, 3)) * vj(2, 1);
  const Reduction g1 = grad(Reduction(ReductionOp::Min, d), 1);
  const Reduction g2 = grad(grad(Reduction(ReductionOp::KMin, d, 1, 3), 0), 3);
  const Formula v = (vi(0, 3) - vj(1, 3)) * vj(2, 1);  // a vector: slots k * 3 + c
  const Reduction g3 = grad(grad(Reduction(ReductionOp::KMin, v, 1, 2), 1), 3);
  std::vector<const ReductionImpl*> todo = {&g1.impl(), &g2.impl(), &g3.impl()};
  int compiled = 0;
  for (size_t q = 0; q < todo.size(); ++q) {
    const ReductionImpl& r = *todo[q];
    for (const ComputedVar& c : r.computed) todo.push_back(c.source.get());
    for (const auto& a : r.addends) todo.push_back(a.get());
    if (!reduction_info(r.op).is_indexed()) continue;
    for (bool f64 : {false, true}) {
      const std::string src = cuda_indexed_source(r, f64);
      EXPECT_NE(nvrtc_compile(src, "tessel_indexed.cu", "compute_90").find(".entry tessel_indexed"),
                std::string::npos)
          << src;
      ++compiled;
    }
  }
  EXPECT_GE(compiled, 4);
}

TEST(CudaCodegen, EveryOpCompiles) {
  if (!have_nvrtc()) GTEST_SKIP() << nvrtc_info().problem;
  // One kernel holding every op of the table, so NVRTC runs once per dtype.
  const Formula x = vi(0, 3), y = vj(1, 3), a = x - y, pos = square(a) + 0.5, s = a[0];
  std::vector<Formula> parts = {
      x + y,
      x - y,
      x * y,
      x / pos,
      sin(-a),
      exp(a),
      log(pos),
      xlogx(pos),
      sqrt(pos),
      rsqrt(pos),
      inv(pos),
      pow(a, 3),
      powf(pos, y),
      square(a),
      abs(a),
      sign(a),
      step(a),
      relu(a),
      sin(a),
      cos(a),
      asin(0.5 * sin(a)),
      acos(0.5 * sin(a)),
      atan(a),
      atan2(x, y),
      sin_x_div_x(a),
      floor(a),
      round(a),
      make(OpCode::Round, {a}, {2}),
      mod(a, constant(1.5), constant(0.25)),
      clamp(a, constant(-0.3), y),
      clampint(a, -1, 2),
      ifelse(s, x, y),
      elem_min(x, y),
      elem_max(x, y),
      less(x, y),
      less_eq(x, y),
      greater(x, y),
      greater_eq(x, y),
      equal(x, y),
      not_equal(x, y),
      sum(a) + 0.0 * x,
      max(a) + 0.0 * x,
      min(a) + 0.0 * x,
      argmax(a) + 0.0 * x,
      argmin(a) + 0.0 * x,
      elem(a, 2) + 0.0 * x,
      concat(extract(a, 1, 2), s),
      one_hot(clampint(s, 0, 2), 3),
      sqnorm2(a) + 0.0 * x,
      norm2(a) + 0.0 * x,
      normalize(a),
      sqdist(x, y) + 0.0 * x,
      (x | y) + 0.0 * x,
      sqnorm_iso(s, a) + 0.0 * x,
      sqnorm_diag(pos, a) + 0.0 * x,
      sym_sqnorm(tensorprod(x, y), a) + 0.0 * x,
      matvecmult(tensorprod(x, y), a),
      vecmatmult(a, tensorprod(x, y)),
      extract(tensorprod(x, y), 0, 3),
      extract(tensordot(tensorprod(x, y), concat(y, x), {3, 3}, {2, 3}, {1}, {1}), 0, 3),
      complex_ops_sample(x, y),
      elem_t(sum(a), 3, 1),
      extract_t(extract(a, 0, 2), 1, 3),
      sum_t(s, 3),
      diff_clampint(a, -1, 2),
      bspline(concat(concat(s, s + 0.5), concat(concat(s + 0.5, s + 2.0), s + 3.0)), y[1], 1),
      softdtw_sqdist(x, y, pos[0]) + make(OpCode::SoftDTWGrad, {x, y[0], pos[0]})[0] +
          make(OpCode::SoftDTWGradDir, {x, y[0], pos[0], concat(concat(x, y[0]), s)})[1] + 0.0 * x,
      extract(difference_matrix(x, y), 2, 3)};
  Formula total = parts[0];
  for (size_t k = 1; k < parts.size(); ++k) total = total + parts[k];
  // Every op of the table must be in there: a new op without a CUDA check fails here.
  std::vector<bool> seen(static_cast<size_t>(OpCode::Count_), false);
  for (const NodePtr& n : topo_order(total.ptr())) seen[static_cast<size_t>(n->op)] = true;
  for (size_t k = static_cast<size_t>(OpCode::Add); k < seen.size(); ++k)
    EXPECT_TRUE(seen[k]) << "op " << op_info(static_cast<OpCode>(k)).name << " is not covered";
  for (bool f64 : {false, true}) expect_compiles(Reduction(ReductionOp::Sum, total), f64);
}

// What the kernels are built for, visible in the PTX: float32 exp as one ex2.approx.ftz, inner
// rows read from shared memory 16 bytes at a time, K-best lists in registers (no local memory)
// up to K = 16, and every rows-per-thread compiles.
TEST(CudaCodegen, KernelsUseTheFastPaths) {
  if (!have_nvrtc()) GTEST_SKIP() << nvrtc_info().problem;
  const Vars v;
  const Formula &x = v.x, &y = v.y, &b = v.b, &g = v.g;
  const Reduction kGauss = v.gauss();
  const std::string gauss = expect_compiles(kGauss, false);
  EXPECT_NE(gauss.find("ex2.approx.ftz.f32"), std::string::npos);
  EXPECT_NE(gauss.find("ld.shared.v4.f32"), std::string::npos);
  EXPECT_NE(expect_compiles(kGauss, true).find("ld.shared.v2.f64"), std::string::npos);
  const std::string kmin =
      expect_compiles(Reduction(ReductionOp::ArgKMin, sqdist(x, y), 1, 8), false);
  EXPECT_EQ(kmin.find("__local_depot"), std::string::npos) << "K = 8 spilled to local memory";
  expect_compiles(Reduction(ReductionOp::KMinArgKMin, sqdist(x, y), 1, 40), false);
  // The plan picks 4 for the Gaussian and 2 for this SoftMax: the other values here.
  for (int rows : {1, 2}) expect_compiles(kGauss, false, rows);
  for (int rows : {1, 4})
    expect_compiles(Reduction(ReductionOp::SumSoftMaxWeight, -sqdist(x, y), 1, 0, b), false, rows);
}

// ---- the launch plan --------------------------------------------------------------------------

// The launch-plan tests: the Gaussian kernel sum, its variables and an H100 (132 SMs).
class CudaCodegenPlan : public ::testing::Test, protected Vars {
 protected:
  const Reduction kGauss = gauss();
  const CudaDeviceCaps h100;
};

// The headline case: Gaussian kernel sum, D = 3, float32, on an H100 (132 SMs).
TEST_F(CudaCodegenPlan, GaussianSumOnAnH100) {
  const CudaKernelPlan big = plan_cuda_kernel(kGauss.impl(), false, 1000000, 1000000, h100);
  EXPECT_EQ(big.rows_per_thread, 4);
  EXPECT_EQ(big.block, 128);
  EXPECT_EQ(big.shared_bytes, 128u * 4 * 4);  // y (3) and b (1): one float4 per inner row
  // 1954 blocks of 512 rows are < 4 waves of 16 resident blocks on 132 SMs: 5 chunks of 2e5.
  EXPECT_EQ(big.split_j, 5);
  EXPECT_EQ(big.workspace_bytes, size_t{8} * 5 * 1000000);
  // The source does not depend on the sizes: one compile serves them all.
  EXPECT_EQ(plan_cuda_kernel(kGauss.impl(), false, 10, 7, h100).source, big.source);
  const CudaKernelPlan mid = plan_cuda_kernel(kGauss.impl(), false, 100000, 100000, h100);
  EXPECT_EQ(mid.split_j, 44);  // 196 blocks × 44 = 8624 >= 4 × 132 × 16
  const CudaKernelPlan few = plan_cuda_kernel(kGauss.impl(), false, 100000, 1000, h100);
  EXPECT_EQ(few.split_j, 1) << "chunks shorter than 4 tiles";
  EXPECT_EQ(few.workspace_bytes, 0u);
  const CudaKernelPlan f64 = plan_cuda_kernel(kGauss.impl(), true, 1000000, 1000000, h100);
  EXPECT_EQ(f64.rows_per_thread, 4);
  EXPECT_EQ(f64.shared_bytes, 128u * 4 * 8);
  // 4 rows in at most 40 registers (75 % occupancy): the launch bounds ask for 6 blocks of 256.
  EXPECT_NE(big.source.find("__launch_bounds__(256, 6)"), std::string::npos);
}

// The gradient in x: its factor -2 g e_i comes out of the pairs; 2 rows per thread, whose double
// totals live in shared memory after the tile, keep 75 % occupancy (4 rows needed 80 registers).
TEST_F(CudaCodegenPlan, GaussianGradientKeepsOccupancy) {
  const Reduction gr = grad(kGauss, 0);
  const CudaKernelPlan p = plan_cuda_kernel(gr.impl(), false, 1000000, 1000000, h100);
  EXPECT_EQ(p.rows_per_thread, 2);
  EXPECT_EQ(p.block, 128);
  EXPECT_EQ(p.shared_bytes, 128u * (4 * 4 + 2 * 3 * 8));  // the tile, then 2 rows x 3 totals
  EXPECT_NE(p.source.find("__launch_bounds__(256, 6)"), std::string::npos);
  EXPECT_NE(p.source.find("const bool fin_ ="), std::string::npos) << "the factor's fallback";
  // float64 keeps its 2 rows (80 registers of state and outer values for 4), their totals in
  // registers and ptxas's own register count.
  const CudaKernelPlan d = plan_cuda_kernel(gr.impl(), true, 1000000, 1000000, h100);
  EXPECT_EQ(d.rows_per_thread, 2);
  EXPECT_EQ(d.shared_bytes, 128u * 4 * 8);
  EXPECT_NE(d.source.find("__launch_bounds__(256)"), std::string::npos);
}

// Rows per thread: 4 for small states and formulas, fewer as the registers they need grow.
TEST_F(CudaCodegenPlan, RowsPerThreadFollowTheState) {
  auto rows = [](const Reduction& r, bool f64 = false) {
    return cuda_rows_per_thread(r.impl(), f64);
  };
  EXPECT_EQ(rows(Reduction(ReductionOp::MinArgMin, x - y)), 4);
  // 2 rows keep LogSumExp at 40 registers (75 % occupancy); 4 need 60. float64 keeps 4.
  EXPECT_EQ(rows(Reduction(ReductionOp::LogSumExp, -g * sqdist(x, y))), 2);
  EXPECT_EQ(rows(Reduction(ReductionOp::LogSumExp, -g * sqdist(x, y)), true), 4);
  EXPECT_EQ(rows(Reduction(ReductionOp::ArgKMin, sqdist(x, y), 1, 5)), 2);
  EXPECT_EQ(rows(Reduction(ReductionOp::ArgKMin, sqdist(x, y), 1, 20)), 1);
  EXPECT_EQ(rows(Reduction(ReductionOp::SumSoftMaxWeight, -sqdist(x, y), 1, 0, vj(2, 3))), 2);
  Formula big = sin(x - y);
  for (int k = 0; k < 12; ++k) big = big * cos(big + y);
  EXPECT_EQ(rows(Reduction(ReductionOp::Sum, big)), 1) << "a long formula";
  const CudaKernelPlan one = plan_cuda_kernel(Reduction(ReductionOp::Sum, big).impl(), false,
                                              100000, 100000, CudaDeviceCaps{});
  EXPECT_EQ(one.block, 256) << "one row per thread: 256 threads keep 256 rows per tile";
}

TEST_F(CudaCodegenPlan, SplitFillsTheGpuWithinLimits) {
  // 1000 rows make 2 blocks: split until 4 waves, chunks of ~2400 inner rows.
  const CudaKernelPlan p = plan_cuda_kernel(kGauss.impl(), false, 1000, 10000000, h100);
  EXPECT_EQ(p.split_j, 4224);
  EXPECT_EQ(p.workspace_bytes, size_t{8} * 4224 * 1000);
  // Chunks keep 4 tiles: 1e4 inner rows in at most 19 chunks.
  EXPECT_EQ(plan_cuda_kernel(kGauss.impl(), false, 1000, 10000, h100).split_j, 19);
  // A smaller GPU wants fewer blocks.
  CudaDeviceCaps small;
  small.sm_count = 8;
  EXPECT_EQ(plan_cuda_kernel(kGauss.impl(), false, 1000, 10000000, small).split_j, 256);
  // gridDim.y stops at 65535.
  CudaDeviceCaps huge;
  huge.sm_count = 100000;
  EXPECT_EQ(plan_cuda_kernel(kGauss.impl(), false, 1, int64_t{1} << 40, huge).split_j, 65535);
  // The workspace stays under 64 MiB: 16-best lists of 1e6 rows (256 bytes each) stay unsplit.
  const Reduction k16(ReductionOp::KMinArgKMin, sqdist(x, y), 1, 16);
  const CudaKernelPlan kp = plan_cuda_kernel(k16.impl(), false, 1000000, 1000000, h100);
  EXPECT_EQ(kp.split_j, 1);
  EXPECT_EQ(kp.workspace_bytes, 0u);
  // Workspace words per row: Sum D, Min/Max 2D, KMin 2KD, LogSumExp 2, SoftMax 2 + weights.
  const std::pair<Reduction, size_t> words[] = {
      {Reduction(ReductionOp::Sum, x - y), 3},
      {Reduction(ReductionOp::ArgMin, x - y), 6},
      {Reduction(ReductionOp::KMin, sqdist(x, y), 1, 4), 8},
      {Reduction(ReductionOp::KMin, x - y, 1, 4), 24},
      {Reduction(ReductionOp::LogSumExp, -sqdist(x, y)), 2},
      {Reduction(ReductionOp::SumSoftMaxWeight, -sqdist(x, y), 1, 0, vj(2, 3)), 5}};
  for (const auto& [r, n] : words)
    EXPECT_EQ(plan_cuda_kernel(r.impl(), false, 100, 1000, h100, {.split_j = 3}).workspace_bytes,
              8 * n * 3 * 100)
        << r.str();
}

TEST_F(CudaCodegenPlan, OverridesAndSharedMemoryLimits) {
  const CudaKernelPlan p = plan_cuda_kernel(kGauss.impl(), false, 1000000, 1000000, h100,
                                            {.block = 64, .rows_per_thread = 2, .split_j = 3});
  EXPECT_EQ(p.block, 64);
  EXPECT_EQ(p.rows_per_thread, 2);
  EXPECT_EQ(p.split_j, 3);
  EXPECT_EQ(p.shared_bytes, 64u * 16);
  // 200 float64 components per inner row: 256 rows need 400 KiB, 128 rows fit in 227 KiB.
  const Reduction wide(ReductionOp::Sum, sqdist(vi(0, 200), vj(1, 200)));
  const CudaKernelPlan w = plan_cuda_kernel(wide.impl(), true, 100000, 100000, h100);
  EXPECT_EQ(w.block, 128);
  EXPECT_EQ(w.shared_bytes, 128u * 200 * 8);
  // 1000 of them do not fit even 32 rows: an error that says why.
  const Reduction wider(ReductionOp::Sum, sqdist(vi(0, 1000), vj(1, 1000)));
  try {
    plan_cuda_kernel(wider.impl(), true, 10, 10, h100);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shared memory"), std::string::npos) << e.what();
  }
}

TEST(CudaCodegen, CompileErrorsCarryTheLog) {
  if (!have_nvrtc()) GTEST_SKIP() << nvrtc_info().problem;
  try {
    nvrtc_compile("extern \"C\" __global__ void k() { undefined_thing(); }", "bad.cu",
                  "compute_90");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.cu"), std::string::npos) << m;
    EXPECT_NE(m.find("undefined_thing"), std::string::npos) << m;
  }
}
