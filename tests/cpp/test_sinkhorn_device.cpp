// The Sinkhorn loop with its points on a CUDA device, checked without a GPU: the null backend in
// the CUDA registry slot, computing on host memory (the test's "device" arrays are host memory
// tagged CUDA), shows that every reduction goes to the GPU backend, on the points' device, and that
// the potentials and their gradient equal the CPU loop's.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "support/null_backend.hpp"
#include "backend/registry.hpp"
#include "reduction_helpers.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;
using tessel::testing::expect_error;

namespace {

// The devices the CUDA slot ran each call on.
std::vector<int> devices_of(const NullBackend& b) {
  std::vector<int> d;
  for (const NullCall& c : b.calls()) d.push_back(c.device);
  return d;
}

ArrayView on_cuda(ArrayView v, int device) {
  v.device = Device{DeviceKind::CUDA, device};
  return v;
}

struct Clouds {
  Array a, x, b, y;
};

Clouds make_problem(int n, int m, int d) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(0, 1);
  Clouds p{Array(DType::Float64, {n}), Array(DType::Float64, {n, d}), Array(DType::Float64, {m}),
           Array(DType::Float64, {m, d})};
  for (Array* w : {&p.a, &p.b}) {
    double s = 0;
    for (int64_t i = 0; i < w->size(); ++i) s += (w->as<double>()[i] = u(gen) + 0.1);
    for (int64_t i = 0; i < w->size(); ++i) w->as<double>()[i] /= s;
  }
  for (int64_t i = 0; i < p.x.size(); ++i) p.x.as<double>()[i] = u(gen);
  for (int64_t i = 0; i < p.y.size(); ++i) p.y.as<double>()[i] = u(gen) + 0.3;
  return p;
}

void expect_same(const Array& got, const Array& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (int64_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got.at(i), want.at(i)) << what << "[" << i << "]";
}

SinkhornOptions options() {
  SinkhornOptions o;
  o.blur = 0.1;
  o.reach = 0.7;
  o.tol = 1e-9;
  o.update = SinkhornUpdate::Alternating;
  return o;
}

}  // namespace

TEST(SinkhornDevice, PointsOnAGpuRunEveryReductionThereAndGiveTheCpuPotentials) {
  const Clouds pb = make_problem(23, 17, 3);
  SinkhornOptions o = options();
  const SinkhornResult cpu = sinkhorn(pb.a.view(), pb.x.view(), pb.b.view(), pb.y.view(), o);
  ASSERT_TRUE(cpu.converged) << cpu.str();

  NullBackend dev(true, true);
  ScopedBackend use(BackendId::Cuda, dev);
  o.diameter = cpu.diameter;
  const ArrayView xd = on_cuda(pb.x.view(), 1), yd = on_cuda(pb.y.view(), 1);
  const SinkhornResult gpu = sinkhorn(pb.a.view(), xd, pb.b.view(), yd, o);
  EXPECT_EQ(gpu.history.size(), cpu.history.size());
  EXPECT_TRUE(gpu.converged);
  expect_same(gpu.f, cpu.f, "f");
  expect_same(gpu.g, cpu.g, "g");
  expect_same(gpu.p, cpu.p, "p");
  expect_same(gpu.q, cpu.q, "q");
  // Initialisation (4 softmins), 3 or 4 per iteration (alternating: f, g; debias: p, q), the
  // last extrapolation (4): all on device 1.
  const std::vector<int> devices = devices_of(dev);
  EXPECT_EQ(devices.size(), 8 + 4 * cpu.history.size());
  for (int d : devices) EXPECT_EQ(d, 1);

  // The envelope gradient reads the device points too; its outputs are host arrays.
  const int64_t n = pb.x.shape()[0], m = pb.y.shape()[0];
  Array cf(DType::Float64, {n}), cq(DType::Float64, {m});
  for (int64_t i = 0; i < n; ++i) cf.as<double>()[i] = 1.0 + 0.1 * static_cast<double>(i);
  for (int64_t j = 0; j < m; ++j) cq.as<double>()[j] = -0.5 + 0.05 * static_cast<double>(j);
  Array gx_cpu(DType::Float64, {n, 3}), gy_cpu(DType::Float64, {m, 3});
  Array gx_gpu(DType::Float64, {n, 3}), gy_gpu(DType::Float64, {m, 3});
  const size_t before = devices.size();
  sinkhorn_potentials_vjp(pb.a.view(), xd, pb.b.view(), yd, o, gpu, cf.view(), {}, {}, cq.view(),
                          gx_gpu.view(), gy_gpu.view());
  EXPECT_EQ(devices_of(dev).size(), before + 2);
  sinkhorn_potentials_vjp(pb.a.view(), pb.x.view(), pb.b.view(), pb.y.view(), o, cpu, cf.view(), {},
                          {}, cq.view(), gx_cpu.view(), gy_cpu.view());
  EXPECT_EQ(devices_of(dev).size(), before + 2);  // host points: the CPU backends
  expect_same(gx_gpu, gx_cpu, "grad_x");
  expect_same(gy_gpu, gy_cpu, "grad_y");
}

TEST(SinkhornDevice, HostPointsWithTheCudaBackendRunOnTheRequestedDevice) {
  const Clouds pb = make_problem(11, 13, 2);
  SinkhornOptions o = options();
  o.debias = false;
  const SinkhornResult cpu = sinkhorn(pb.a.view(), pb.x.view(), pb.b.view(), pb.y.view(), o);
  NullBackend dev(true, true);
  ScopedBackend use(BackendId::Cuda, dev);
  o.eval.backend = Backend::Cuda;
  o.eval.device = 2;
  const SinkhornResult gpu = sinkhorn(pb.a.view(), pb.x.view(), pb.b.view(), pb.y.view(), o);
  expect_same(gpu.f, cpu.f, "f");
  expect_same(gpu.g, cpu.g, "g");
  const std::vector<int> devices = devices_of(dev);
  EXPECT_EQ(devices.size(), 4 + 2 * cpu.history.size());
  for (int d : devices) EXPECT_EQ(d, 2);
  for (int d : dev.opened()) EXPECT_EQ(d, 2);
}

TEST(SinkhornDevice, ClearErrorsForWhatTheLoopCannotReadOnADevice) {
  const Clouds pb = make_problem(5, 6, 2);
  NullBackend dev(true, true);
  ScopedBackend use(BackendId::Cuda, dev);
  SinkhornOptions o = options();
  const ArrayView xd = on_cuda(pb.x.view(), 0), yd = on_cuda(pb.y.view(), 0);
  expect_error([&] { sinkhorn(pb.a.view(), xd, pb.b.view(), yd, o); },
               {"sinkhorn", "x and y are on a CUDA device: give the diameter"});
  o.diameter = 2.0;
  expect_error([&] { sinkhorn(on_cuda(pb.a.view(), 0), xd, pb.b.view(), yd, o); },
               {"sinkhorn", "a is on a CUDA device; expected a CPU array"});
  expect_error([&] { sinkhorn(pb.a.view(), xd, pb.b.view(), pb.y.view(), o); },
               {"sinkhorn", "x and y must be on the same device"});
  expect_error([&] { sinkhorn(pb.a.view(), xd, pb.b.view(), on_cuda(pb.y.view(), 1), o); },
               {"sinkhorn", "x and y must be on the same device"});
  EXPECT_TRUE(devices_of(dev).empty());
}
