// On a real GPU: every reduction and some gradients through the CUDA backend, against the
// interpreter; skipped without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/driver.hpp"
#include "reduction_helpers.hpp"
#include "tessel/half.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_info().usable) GTEST_SKIP() << "no usable GPU: " << cuda_status()

// Rows of the largest cases divided by TESSEL_TEST_CUDA_SHRINK (default 1): the stand-in driver
// runs kernels on the CPU emulator, one thread per CUDA thread, where 20000 x 30000 takes minutes.
int64_t shrunk(int64_t rows) {
  const char* e = std::getenv("TESSEL_TEST_CUDA_SHRINK");
  const int64_t by = e && std::atoi(e) > 1 ? std::atoi(e) : 1;
  return std::max<int64_t>(rows / by, 1);
}

struct GpuCase {
  std::string name;
  Reduction r;
};

std::vector<GpuCase> cases() {
  const Formula x = vi(0, 3), y = vj(1, 3), b = vj(2, 2), g = pm(3, 1);
  const Formula k = exp(-g * sqdist(x, y));
  const Formula d = sqdist(x, y);
  return {
      {"Sum", Reduction(ReductionOp::Sum, k * b)},
      {"SumOverI", Reduction(ReductionOp::Sum, exp(-g * sqdist(vj(0, 3), vi(1, 3))) * vi(2, 2), 0)},
      {"Min", Reduction(ReductionOp::Min, d)},
      {"ArgMax", Reduction(ReductionOp::ArgMax, d)},
      {"MinArgMin", Reduction(ReductionOp::MinArgMin, d)},
      {"KMinArgKMin", Reduction(ReductionOp::KMinArgKMin, d, 1, 7)},
      {"ArgKMin", Reduction(ReductionOp::ArgKMin, d, 1, 3)},
      {"LogSumExp", Reduction(ReductionOp::LogSumExp, -g * d)},
      {"LogSumExpWeighted", Reduction(ReductionOp::LogSumExp, -g * d, 1, 0, exp(b[0]))},
      {"SoftMax", Reduction(ReductionOp::SumSoftMaxWeight, -g * d, 1, 0, b)},
  };
}

std::vector<Array> inputs(DType t, int64_t n, int64_t m) {
  return {random_array(t, {n, 3}, 1), random_array(t, {m, 3}, 2), random_array(t, {m, 2}, 3),
          Array::from(std::vector<double>{4.0}, {1})};
}

// The first inputs, as many as r reads: evaluate refuses arrays a reduction does not use (the
// cases share one list of inputs, of which Min and ArgKMin read X and Y only).
std::vector<Array> used_by(const Reduction& r, std::vector<Array> in) {
  int n = 0;
  for (const VarSlot& v : r.inputs())
    if (!v.computed) n = std::max(n, v.index + 1);
  in.resize(static_cast<size_t>(n));
  return in;
}

std::vector<Array> with_dtype(std::vector<Array> in, DType t) {
  if (t == DType::Float32) in[3] = Array::from(std::vector<float>{4.0f}, {1});
  return in;
}

// Host arrays copied to the GPU, viewed as CUDA arrays.
struct OnDevice {
  std::vector<CudaBuffer> buffers;
  std::vector<ArrayView> views;
  explicit OnDevice(const std::vector<Array>& host) {
    cuda_set_device(0);  // the test's own copies need a current context; tessel's calls keep it
    for (const Array& a : host) {
      const size_t bytes = static_cast<size_t>(a.size()) * dtype_size(a.dtype());
      buffers.emplace_back(0, bytes);
      cuda_copy_2d(reinterpret_cast<void*>(buffers.back().ptr()), bytes, a.data(), bytes, bytes, 1,
                   nullptr);
      ArrayView v = a.view();
      v.data = reinterpret_cast<void*>(buffers.back().ptr());
      v.device = Device{DeviceKind::CUDA, 0};
      views.push_back(v);
    }
    cuda_synchronize(nullptr);
  }
};

// Each test runs in float32 and in float64 (the parameter), the GPU against the interpreter.
class CudaGpu : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    t = GetParam() ? DType::Float64 : DType::Float32;
    cpu.backend = Backend::Interpreter;
    gpu.backend = Backend::Cuda;
  }
  // The tolerance of this run's dtype.
  double tol_for(double f64, double f32) const { return t == DType::Float64 ? f64 : f32; }

  DType t = DType::Float32;
  Options cpu, gpu;
};

TEST_P(CudaGpu, EveryReductionMatchesTheInterpreter) {
  const double tol = tol_for(1e-11, 2e-5);
  // Sizes that leave partial blocks and tiles, and a short outer side that makes the plan split.
  for (auto [n, m] : {std::pair<int64_t, int64_t>{1000, 1500}, {37, 20000}}) {
    for (const GpuCase& c : cases()) {
      const std::vector<Array> in = used_by(c.r, with_dtype(inputs(t, n, m), t));
      const std::string what = c.name + " n=" + std::to_string(n) + " m=" + std::to_string(m);
      const std::vector<Array> want = evaluate(c.r, in, cpu);
      expect_outputs_near(evaluate(c.r, in, gpu), want, tol, what + " (host arrays)");
      const OnDevice dev(in);
      expect_outputs_near(evaluate(c.r, std::span<const ArrayView>(dev.views)), want, tol,
                          what + " (device arrays)");
    }
  }
}

TEST_P(CudaGpu, GradientsMatchTheInterpreter) {
  const double tol = tol_for(1e-10, 1e-4);
  const int64_t n = 700, m = 900;
  for (const GpuCase& c : cases()) {
    if (c.name != "Sum" && c.name != "LogSumExp" && c.name != "SoftMax") continue;
    for (int var : {0, 1, 3}) {
      const Reduction gr = grad(c.r, var);
      std::vector<Array> in = with_dtype(inputs(t, n, m), t);
      in.push_back(random_array(t, {n, c.r.output_dim(0)}, 9));
      const std::vector<Array> want = evaluate(gr, in, cpu);
      const std::string what = c.name + " gradient in var " + std::to_string(var);
      expect_outputs_near(evaluate(gr, in, gpu), want, tol, what);
      // On CUDA arrays (where LogSumExp's and SumSoftMaxWeight's gradients crashed on a GPU):
      // the sub-reduction they read and the chain rule's terms stay in device memory.
      const OnDevice dev(in);
      expect_outputs_near(evaluate(gr, std::span<const ArrayView>(dev.views)), want, tol,
                          what + " (device arrays)");
    }
  }
}

// Gradients through Min, Max and KMin (gathers and scatters, and a second derivative) of device
// arrays, on the device, against the interpreter.
TEST_P(CudaGpu, SelectionGradientsOfDeviceArrays) {
  const double tol = tol_for(1e-10, 1e-4);
  const int64_t n = 700, m = 900;
  for (const GpuCase& c : cases()) {
    if (c.name != "Min" && c.name != "KMinArgKMin" && c.name != "MinArgMin") continue;
    const Reduction r = c.name == "KMinArgKMin"
                            ? Reduction(ReductionOp::KMin, sqdist(vi(0, 3), vj(1, 3)), 1, 7)
                        : c.name == "Min" ? c.r
                                          : Reduction(ReductionOp::Min, c.r.formula());
    for (int var : {0, 1}) {
      const Reduction g = grad(r, var);
      std::vector<Array> in = {random_array(t, {n, 3}, 1), random_array(t, {m, 3}, 2),
                               random_array(t, {n, r.output_dim(0)}, 9)};
      const OnDevice dev(in);
      const std::string what = c.name + " gradient in var " + std::to_string(var);
      expect_outputs_near(evaluate(g, std::span<const ArrayView>(dev.views)), evaluate(g, in, cpu),
                          tol, what);
      const Reduction g2 = grad(g, 2);  // in the cotangent: one-hot slots
      in.push_back(random_array(t, {var == 0 ? n : m, 3}, 11));
      const OnDevice dev2(in);
      expect_outputs_near(evaluate(g2, std::span<const ArrayView>(dev2.views)),
                          evaluate(g2, in, cpu), tol, what + ", then in the cotangent");
    }
  }
}

// Batch dimensions and a second derivative (its sub-reduction and the chain rule's extra term
// kept in device memory), on device arrays against the interpreter.
TEST_P(CudaGpu, BatchesAndSecondDerivatives) {
  const double tol = tol_for(1e-10, 1e-4);
  const Formula x = vi(0, 3), y = vj(1, 3);
  const Reduction lse(ReductionOp::LogSumExp, -sqdist(x, y) * 2.0);
  const std::vector<Array> batched = {random_array(t, {3, 500, 3}, 1),
                                      random_array(t, {1, 700, 3}, 2)};
  const OnDevice dev_b(batched);
  expect_outputs_near(evaluate(lse, std::span<const ArrayView>(dev_b.views)),
                      evaluate(lse, batched, cpu), tol, "batched LogSumExp");
  const Reduction g2 = grad(grad(lse, 0), 0);
  const std::vector<Array> in = {random_array(t, {500, 3}, 1), random_array(t, {700, 3}, 2),
                                 random_array(t, {500, 1}, 3), random_array(t, {500, 3}, 4)};
  const OnDevice dev(in);
  expect_outputs_near(evaluate(g2, std::span<const ArrayView>(dev.views)), evaluate(g2, in, cpu),
                      tol, "second derivative of LogSumExp");
}

// Block-sparse ranges: clusters of 1 to 300 rows (within and across CUDA blocks), a random
// keep mask, rows no range covers; every reduction against the interpreter with the same ranges.
TEST_P(CudaGpu, BlockSparseRangesMatchTheInterpreter) {
  const double tol = tol_for(1e-11, 2e-5);
  const int64_t n = 1500, m = 2000;
  auto br = std::make_shared<BlockRanges>();
  uint64_t state = 12345;
  auto next = [&state] {
    return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33;
  };
  std::vector<int64_t> ci = {0}, cj = {0};
  while (ci.back() < n) ci.push_back(std::min<int64_t>(n, ci.back() + 1 + next() % 300));
  while (cj.back() < m) cj.push_back(std::min<int64_t>(m, cj.back() + 1 + next() % 300));
  for (size_t a = 0; a + 1 < ci.size(); ++a) {
    if (a % 4 == 3) continue;  // rows that reduce over nothing
    br->ranges_i.insert(br->ranges_i.end(), {ci[a], ci[a + 1]});
    for (size_t b = 0; b + 1 < cj.size(); ++b)
      if (next() % 3) br->redranges_j.insert(br->redranges_j.end(), {cj[b], cj[b + 1]});
    br->slices_i.push_back(static_cast<int64_t>(br->redranges_j.size() / 2));
  }
  cpu.ranges = gpu.ranges = br;
  for (const GpuCase& c : cases()) {
    if (c.r.axis() != 1) continue;
    const std::vector<Array> in = used_by(c.r, with_dtype(inputs(t, n, m), t));
    const std::vector<Array> want = evaluate(c.r, in, cpu);
    expect_outputs_near(evaluate(c.r, in, gpu), want, tol, c.name + " with ranges");
    const OnDevice dev(in);
    expect_outputs_near(evaluate(c.r, std::span<const ArrayView>(dev.views), gpu), want, tol,
                        c.name + " with ranges (device arrays)");
  }
}

// Host arrays larger than a small gpu_memory_budget: streamed block by block (outer blocks only,
// then both sides), the same results as one launch.
TEST_P(CudaGpu, MemoryBudgetStreamsBlocks) {
  const double tol = tol_for(1e-11, 2e-5);
  // Shrunk, the inner side stays twice as long, so the smaller budget below still streams.
  const int64_t n = shrunk(20000), m = std::min<int64_t>(30000, 2 * shrunk(30000));
  const std::vector<Array> all = with_dtype(inputs(t, n, m), t);
  for (const GpuCase& c : cases()) {
    if (c.r.axis() != 1) continue;
    const std::vector<Array> in = used_by(c.r, all);
    const std::vector<Array> want = evaluate(c.r, in, gpu);
    // The smaller budget no less than the 128 KiB that the plan's smallest blocks may need.
    for (int64_t budget : {shrunk(int64_t{2} << 20), std::max(shrunk(int64_t{256} << 10),
                                                               int64_t{128} << 10)}) {
      Options o = gpu;
      o.gpu_memory_budget = budget;
      expect_outputs_near(evaluate(c.r, in, o), want, tol,
                          c.name + " budget " + std::to_string(budget));
    }
  }
}

// Device outputs the engine finishes on the device: a gradient with respect to a parameter (a sum
// over all rows, summed there) and, in float32, half-precision arrays (converted there).
TEST_P(CudaGpu, SumsOverAllRowsAndHalfArraysOnTheDevice) {
  const double tol = tol_for(1e-10, 1e-4);
  const int64_t n = 3000, m = 700;
  const Reduction gp = grad(cases()[0].r, 3);
  ASSERT_TRUE(gp.full_sum());
  std::vector<Array> in = with_dtype(inputs(t, n, m), t);
  in.push_back(random_array(t, {n, 2}, 9));
  const OnDevice dev(in);
  const OnDevice out(std::vector<Array>{Array(t, {1})});
  evaluate(gp, std::span<const ArrayView>(dev.views), std::span<const ArrayView>(out.views));
  Array got(t, {1});
  cuda_copy_2d(got.data(), dtype_size(t), out.views[0].data, dtype_size(t), dtype_size(t), 1,
               nullptr);
  cuda_synchronize(nullptr);
  expect_outputs_near({got}, evaluate(gp, in, cpu), tol, "gradient in a parameter, device output");
  if (t != DType::Float32) return;
  for (DType h : {DType::Float16, DType::BFloat16}) {
    // The half inputs' values, in float32, give the reference: rounded once to the half dtype.
    std::vector<Array> hin, fin;
    for (int k = 0; k < 3; ++k) {
      Array a(h, in[k].shape()), f(DType::Float32, in[k].shape());
      for (int64_t q = 0; q < a.size(); ++q) {
        const float v = in[k].as<float>()[q];
        a.as<uint16_t>()[q] = h == DType::Float16 ? float_to_half(v) : float_to_bfloat16(v);
        f.as<float>()[q] = h == DType::Float16 ? half_to_float(a.as<uint16_t>()[q])
                                               : bfloat16_to_float(a.as<uint16_t>()[q]);
      }
      hin.push_back(a), fin.push_back(f);
    }
    hin.push_back(Array(h, {1})), fin.push_back(Array::from(std::vector<float>{4.0f}, {1}));
    hin[3].as<uint16_t>()[0] = h == DType::Float16 ? float_to_half(4.0f) : float_to_bfloat16(4.0f);
    const Reduction r = cases()[0].r;  // a copy: cases() is a temporary
    const OnDevice hdev(hin);
    const OnDevice hout(std::vector<Array>{Array(h, {n, 2})});
    evaluate(r, std::span<const ArrayView>(hdev.views), std::span<const ArrayView>(hout.views));
    Array bits(h, {n, 2});
    cuda_copy_2d(bits.data(), bits.size() * 2, hout.views[0].data, bits.size() * 2, bits.size() * 2,
                 1, nullptr);
    cuda_synchronize(nullptr);
    const Array want = evaluate(r, fin, gpu)[0];
    for (int64_t q = 0; q < bits.size(); ++q) {
      const float w = want.as<float>()[q];
      const uint16_t b = bits.as<uint16_t>()[q];
      EXPECT_EQ(b, h == DType::Float16 ? float_to_half(w) : float_to_bfloat16(w))
          << dtype_name(h) << " entry " << q;
    }
  }
}

// KernelSolve with every array on the GPU: CG's vectors and steps there, the solution and the
// gradient in the points as on the host (same tolerance: CG's order of sums differs).
TEST_P(CudaGpu, KernelSolveKeepsItsVectorsOnTheDevice) {
  const int64_t n = shrunk(2000);
  const Reduction k(ReductionOp::Sum, exp(-pm(3, 1) * sqdist(vi(0, 3), vj(1, 3))) * vj(2, 2));
  std::vector<Array> in = with_dtype(inputs(t, n, n), t);
  in[1] = in[0];
  SolveOptions opt;
  // A large ridge keeps the system well conditioned (condition number below 1 + n / alpha), so
  // that two CG runs stopping at `tol` agree to about cond * tol.
  opt.alpha = 200;
  opt.tol = t == DType::Float64 ? 1e-10 : 1e-5;
  Array hx(t, {n, 2});
  std::vector<ArrayView> hin;
  for (const Array& a : in) hin.push_back(a.view());
  const SolveReport hrep = kernel_solve(k, 2, hin, hx.view(), opt);
  const OnDevice dev(in);
  const OnDevice out(std::vector<Array>{Array(t, {n, 2}), Array(t, {n, 3})});
  const SolveReport rep = kernel_solve(k, 2, dev.views, out.views[0], opt);
  EXPECT_TRUE(rep.converged) << rep.str();
  EXPECT_NEAR(rep.iterations, hrep.iterations, 2 + hrep.iterations / 5);
  Array x(t, {n, 2});
  const size_t bytes = static_cast<size_t>(x.size()) * dtype_size(t);
  cuda_copy_2d(x.data(), bytes, out.views[0].data, bytes, bytes, 1, nullptr);
  cuda_synchronize(nullptr);
  expect_outputs_near({x}, {hx}, t == DType::Float64 ? 1e-8 : 1e-3, "device solve");
  // The gradient in the points, its cotangent on the device too.
  const OnDevice gx(std::vector<Array>{random_array(t, {n, 2}, 7)});
  const int wrt[1] = {0};
  const ArrayView grads[1] = {out.views[1]};
  kernel_solve_grad(k, 2, dev.views, out.views[0], gx.views[0], wrt, grads, opt, nullptr);
  Array hd(t, {n, 3}), d(t, {n, 3});
  const ArrayView hgrads[1] = {hd.view()};
  const Array hgx = random_array(t, {n, 2}, 7);
  kernel_solve_grad(k, 2, hin, hx.view(), hgx.view(), wrt, hgrads, opt, nullptr);
  const size_t gb = static_cast<size_t>(d.size()) * dtype_size(t);
  cuda_copy_2d(d.data(), gb, out.views[1].data, gb, gb, 1, nullptr);
  cuda_synchronize(nullptr);
  expect_outputs_near({d}, {hd}, t == DType::Float64 ? 1e-7 : 1e-2, "device solve's gradient");
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaGpu, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "f64" : "f32");
                         });

}  // namespace
