// The backend interface: selection rules, the registry, the engine's problem as the null backend
// sees it (shapes, strides, blocks, batches, devices), and the CUDA plan table's bound.
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "backend/cuda/driver.hpp"
#include "backend/cuda/plan_table.hpp"
#include "backend/lru_map.hpp"
#include "backend/registry.hpp"
#include "engine/engine_impl.hpp"
#include "reduction/reduction_info.hpp"
#include "reduction_helpers.hpp"
#include "support/null_backend.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

const Reduction kGauss(ReductionOp::Sum, exp(-sqdist(vi(0, 3), vj(1, 3))) * vj(2, 2));

// kGauss's inputs for n rows i and m rows j: x (n, 3), y (m, 3), b (m, 2), from seeds 1, 2, 3.
std::array<Array, 3> gauss_inputs(DType t, int64_t n, int64_t m) {
  return {random_array(t, {n, 3}, 1), random_array(t, {m, 3}, 2), random_array(t, {m, 2}, 3)};
}

ArrayView on_cuda(ArrayView v, int device) {
  v.device = Device{DeviceKind::CUDA, device};
  return v;
}

void expect_choice(Backend b, int device, bool interp_only, BackendId first, bool fallback) {
  const BackendChoice c = choose_backend(b, device, interp_only);
  EXPECT_EQ(c.first, first) << static_cast<int>(b) << " " << device << " " << interp_only;
  EXPECT_EQ(c.interpreter_fallback, fallback) << static_cast<int>(b) << " " << device;
}

}  // namespace

TEST(BackendSelection, RulesByRequestDeviceAndReduction) {
  using enum BackendId;
  expect_choice(Backend::Auto, -1, false, Compiled, true);
  expect_choice(Backend::Compiled, -1, false, Compiled, false);
  expect_choice(Backend::Interpreter, -1, false, Interpreter, false);
  // Gather/scatter reductions exist in the interpreter only, whatever was asked for.
  expect_choice(Backend::Auto, -1, true, Interpreter, false);
  expect_choice(Backend::Compiled, -1, true, Interpreter, false);
  // Arrays on a GPU (or Backend::Cuda's device) run there.
  for (Backend b : {Backend::Auto, Backend::Cuda, Backend::Compiled})
    for (bool interp_only : {false, true}) expect_choice(b, 1, interp_only, Cuda, false);
  // Backend::Cuda with no device (negative Options::device) keeps the CPU's automatic rule.
  expect_choice(Backend::Cuda, -1, false, Compiled, true);
}

TEST(BackendRegistry, SlotsHoldTheBuiltInsUnlessReplaced) {
  BackendRegistry& reg = BackendRegistry::instance();
  EXPECT_STREQ(reg.get(BackendId::Compiled).name(), "compiled");
  EXPECT_STREQ(reg.get(BackendId::Interpreter).name(), "interpreter");
  EXPECT_STREQ(reg.get(BackendId::Cuda).name(), "cuda");
  NullBackend null;
  {
    ScopedBackend use(BackendId::Interpreter, null);
    EXPECT_EQ(&reg.get(BackendId::Interpreter), &null);
    EXPECT_STREQ(reg.get(BackendId::Compiled).name(), "compiled");
  }
  EXPECT_EQ(&reg.get(BackendId::Interpreter), &interpreter_backend());
  EXPECT_EQ(reg.replace(BackendId::Cuda, nullptr), &cuda_backend());
}

TEST(NullBackend, SeesTheBoundProblem) {
  NullBackend null;
  ScopedBackend use(BackendId::Interpreter, null);
  // x is a transposed (5, 3) view of a (3, 5) array: strides (1, 5).
  Array xt = random_array(DType::Float64, {3, 5}, 1);
  ArrayView x = xt.view();
  x.shape = {5, 3};
  x.strides = {1, 5};
  const Array y = random_array(DType::Float64, {7, 3}, 2),
              b = random_array(DType::Float64, {7, 2}, 3);
  Array out(DType::Float64, {5, 2});
  for (int64_t q = 0; q < out.size(); ++q) out.as<double>()[q] = -1;
  Options o = with(Backend::Interpreter);
  o.threads = 3;
  const ArrayView in[] = {x, y.view(), b.view()}, outs[] = {out.view()};
  evaluate(kGauss, in, outs, o);

  const auto calls = null.calls();
  ASSERT_EQ(calls.size(), 1u);
  const NullCall& c = calls[0];
  EXPECT_EQ(c.op, ReductionOp::Sum);
  EXPECT_EQ(c.hash_lo, kGauss.impl().hash.lo);
  EXPECT_EQ(c.n_outer, 5);
  EXPECT_EQ(c.n_inner, 7);
  EXPECT_EQ(c.dtype, DType::Float64);
  EXPECT_EQ(c.device, -1);
  EXPECT_EQ(c.threads, 3);
  ASSERT_EQ(c.vars.size(), 3u);
  const struct {
    const void* data;
    int64_t rows;
    int dim;
    int64_t s_row, s_col;
    Category cat;
  } want[] = {{xt.data(), 5, 3, 1, 5, Category::I},
              {y.data(), 7, 3, 3, 1, Category::J},
              {b.data(), 7, 2, 2, 1, Category::J}};
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(c.vars[k].index, k);
    EXPECT_EQ(c.vars[k].data, want[k].data) << k;
    EXPECT_EQ(c.vars[k].rows, want[k].rows) << k;
    EXPECT_EQ(c.vars[k].dim, want[k].dim) << k;
    EXPECT_EQ(c.vars[k].s_row, want[k].s_row) << k;
    EXPECT_EQ(c.vars[k].s_col, want[k].s_col) << k;
    EXPECT_EQ(c.vars[k].cat, want[k].cat) << k;
  }
  ASSERT_EQ(c.blocks.size(), 1u);
  EXPECT_EQ(c.blocks[0].begin, 0);
  EXPECT_EQ(c.blocks[0].end, 5);
  EXPECT_EQ(c.blocks[0].iv, (std::vector<int64_t>{0, 7}));
  ASSERT_EQ(c.out_shapes.size(), 1u);
  EXPECT_EQ(c.out_shapes[0], (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(c.out_dtypes[0], DType::Float64);
  // A contiguous output is handed over as is: the backend wrote call number 0 into it.
  for (int64_t q = 0; q < out.size(); ++q) EXPECT_EQ(out.at(q), 0.0);
  // Validation still runs before any backend: a wrong shape never reaches it.
  const Array bad(DType::Float64, {7, 4});
  const ArrayView in_bad[] = {x, y.view(), bad.view()};
  expect_error([&] { evaluate(kGauss, in_bad, outs, o); }, {"input 2", "expected (n, 2)"});
  EXPECT_EQ(null.calls().size(), 1u);
}

TEST(NullBackend, AutoFallsBackOnlyWhenCompiledDeclines) {
  NullBackend compiled(true), interp(true);
  ScopedBackend use_c(BackendId::Compiled, compiled), use_i(BackendId::Interpreter, interp);
  const auto [x, y, b] = gauss_inputs(DType::Float32, 4, 6);
  const std::vector<Array> in{x, y, b};
  evaluate(kGauss, in, with(Backend::Auto));
  EXPECT_EQ(compiled.calls().size(), 1u);
  EXPECT_EQ(interp.calls().size(), 0u);

  NullBackend declines(false);
  ScopedBackend use_d(BackendId::Compiled, declines);
  evaluate(kGauss, in, with(Backend::Auto));
  EXPECT_EQ(interp.calls().size(), 1u);
  expect_error([&] { evaluate(kGauss, in, with(Backend::Compiled)); },
               {"evaluate", "cannot run this reduction"});
  EXPECT_EQ(interp.calls().size(), 1u);  // Compiled never falls back
}

TEST(NullBackend, BatchPlanSlicesInputsAndOutputs) {
  NullBackend null;
  ScopedBackend use(BackendId::Interpreter, null);
  // x: (2, 5, 3); y: (7, 3) shared by both batch elements; b: (2, 7, 2).
  const Array x = random_array(DType::Float64, {2, 5, 3}, 1),
              y = random_array(DType::Float64, {7, 3}, 2),
              b = random_array(DType::Float64, {2, 7, 2}, 3);
  const Array out = evaluate(kGauss, std::vector<Array>{x, y, b}, with(Backend::Interpreter))[0];
  ASSERT_EQ(out.shape(), (std::vector<int64_t>{2, 5, 2}));
  const auto calls = null.calls();
  ASSERT_EQ(calls.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(calls[k].n_outer, 5);
    EXPECT_EQ(calls[k].n_inner, 7);
    EXPECT_EQ(calls[k].vars[0].data, static_cast<const double*>(x.data()) + k * 15);
    EXPECT_EQ(calls[k].vars[1].data, y.data());
    EXPECT_EQ(calls[k].vars[2].data, static_cast<const double*>(b.data()) + k * 14);
    // Call k's result is batch element k of the output.
    for (int q = 0; q < 10; ++q) EXPECT_EQ(out.at(k * 10 + q), k);
  }
}

TEST(NullBackend, BlockSparseRangesAndComputedVariables) {
  NullBackend null;
  ScopedBackend use(BackendId::Interpreter, null);
  const auto [x, y, b] = gauss_inputs(DType::Float64, 5, 7);
  auto br = std::make_shared<BlockRanges>();
  br->ranges_i = {0, 2, 3, 5};
  br->slices_i = {1, 2};
  br->redranges_j = {0, 3, 4, 7};
  Options o = with(Backend::Interpreter);
  o.ranges = br;
  evaluate(kGauss, std::vector<Array>{x, y, b}, o);
  auto calls = null.calls();
  ASSERT_EQ(calls.size(), 1u);
  const auto& bl = calls[0].blocks;
  ASSERT_EQ(bl.size(), 3u);  // row 2 is in no block: an empty block of its own
  EXPECT_EQ(std::vector<int64_t>(
                {bl[0].begin, bl[0].end, bl[1].begin, bl[1].end, bl[2].begin, bl[2].end}),
            std::vector<int64_t>({0, 2, 2, 3, 3, 5}));
  EXPECT_EQ(bl[0].iv, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(bl[1].iv.empty());
  EXPECT_EQ(bl[2].iv, (std::vector<int64_t>{4, 7}));

  // The gradient of LogSumExp reads its forward value: a sub-problem run first, once.
  const Reduction lse(ReductionOp::LogSumExp, -sqdist(vi(0, 3), vj(1, 3)));
  const Array e = random_array(DType::Float64, {5, 1}, 4);
  evaluate(grad(lse, 0), std::vector<Array>{x, y, e}, with(Backend::Interpreter));
  calls = null.calls();
  ASSERT_GE(calls.size(), 3u);
  EXPECT_EQ(calls[1].op, ReductionOp::LogSumExp);
  EXPECT_EQ(calls[1].n_outer, 5);
}

TEST(NullBackend, CudaSlotGetsDeviceArraysAndOwnsTheirCopies) {
  NullBackend null;
  ScopedBackend use(BackendId::Cuda, null);
  const auto [x, y, b] = gauss_inputs(DType::Float32, 4, 6);
  // Backend::Cuda on host arrays: the device asked for is opened and named in the problem.
  Options gpu = with(Backend::Cuda);
  gpu.device = 2;
  evaluate(kGauss, std::vector<Array>{x, y, b}, gpu);
  ASSERT_EQ(null.calls().size(), 1u);
  EXPECT_EQ(null.calls()[0].device, 2);
  EXPECT_EQ(null.opened(), (std::vector<int>{2}));
  // A device output is filled through the backend that owns its memory (the null backend's
  // "device" memory is host memory).
  Array out(DType::Float32, {4, 2});
  const ArrayView in[] = {on_cuda(x.view(), 1), y.view(), b.view()};
  const ArrayView outs[] = {on_cuda(out.view(), 1)};
  evaluate(kGauss, in, outs, with(Backend::Auto));
  ASSERT_EQ(null.calls().size(), 2u);
  EXPECT_EQ(null.calls()[1].device, 1);
  EXPECT_EQ(null.stores(), 1);
  for (int64_t q = 0; q < out.size(); ++q) EXPECT_EQ(out.at(q), 1.0f);
  expect_error([&] { evaluate(kGauss, in, outs, with(Backend::Compiled)); },
               {"input 0 is on CUDA device 1 but a CPU backend was requested"});
  // The device's default stream is ordered after the caller's stream before anything runs (not
  // for the default stream itself: the device's own steps run on it, in order).
  EXPECT_TRUE(null.waits().empty());
  Options on_stream = with(Backend::Auto);
  int token = 0;
  on_stream.stream = &token;
  evaluate(kGauss, in, outs, on_stream);
  ASSERT_EQ(null.waits().size(), 1u);
  EXPECT_EQ(null.waits()[0], (std::pair<int, void*>{1, &token}));
}

// Gradients through Min/Max/KMin gather and scatter. On device arrays the whole call stays on the
// device, gather/scatter parts included (no load, no store). When one input is a host array, the
// gather/scatter parts run in the interpreter on host copies of the device data (loaded through
// the CUDA slot) and the device output is stored back. The same values as on host arrays.
TEST(NullBackend, GatherReductionsOfDeviceArraysStayOnTheDevice) {
  NullBackend dev(true, true);
  ScopedBackend use(BackendId::Cuda, dev);
  const Formula x = vi(0, 3), y = vj(1, 3);
  for (const Reduction& r : {Reduction(ReductionOp::Min, sqdist(x, y) * vj(2, 1)),
                             Reduction(ReductionOp::KMin, sqdist(x, y) * vj(2, 1), 1, 3)}) {
    const Reduction g = grad(r, 1);  // scatter into y's rows
    const int64_t n = 9, m = 14;
    const std::vector<Array> in = {random_array(DType::Float64, {n, 3}, 1),
                                   random_array(DType::Float64, {m, 3}, 2),
                                   random_array(DType::Float64, {m, 1}, 3),
                                   random_array(DType::Float64, {n, r.output_dim(0)}, 4)};
    const std::vector<Array> want = evaluate(g, in, with(Backend::Interpreter));
    for (const bool mixed : {false, true}) {
      const std::string what = r.str() + (mixed ? ", one host input" : "");
      std::vector<ArrayView> views;
      for (const Array& a : in) views.push_back(on_cuda(a.view(), 0));
      if (mixed) views[2] = in[2].view();
      Array out(DType::Float64, {m, 3});
      const ArrayView outs[] = {on_cuda(out.view(), 0)};
      const int loads = dev.loads(), stores = dev.stores();
      const size_t calls = dev.calls().size();
      evaluate(g, views, outs, with(Backend::Auto));
      bool indexed_on_device = false;
      for (size_t k = calls; k < dev.calls().size(); ++k)
        indexed_on_device |= reduction_info(dev.calls()[k].op).is_indexed();
      EXPECT_EQ(indexed_on_device, !mixed) << what;
      EXPECT_EQ(dev.loads() > loads, mixed) << what;    // host copies of the device data
      EXPECT_EQ(dev.stores() > stores, mixed) << what;  // the device output written back
      for (int64_t q = 0; q < out.size(); ++q) EXPECT_DOUBLE_EQ(out.at(q), want[0].at(q)) << what;
    }
  }
}

namespace {

// Evaluates r on `args` as CUDA arrays on "device" 0 (the null backend computing in the CUDA
// slot), into a CUDA output; returns it.
Array eval_on_null_device(const Reduction& r, const std::vector<Array>& args,
                          const std::vector<int64_t>& shape) {
  std::vector<ArrayView> views;
  for (const Array& a : args) views.push_back(on_cuda(a.view(), 0));
  Array out(DType::Float64, shape);
  const ArrayView outs[] = {on_cuda(out.view(), 0)};
  evaluate(r, views, outs, with(Backend::Auto));
  return out;
}

void expect_near_all(const Array& got, const Array& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (int64_t q = 0; q < got.size(); ++q)
    EXPECT_NEAR(got.at(q), want.at(q), 1e-12 * (1 + std::abs(want.at(q)))) << what;
}

// Evaluates r on the null device as above and checks what holds whenever results stay there: no
// load from or store to the host, one device add per chain-rule addend, the interpreter's values.
// `more(dev)` checks the device's other counters.
template <class More>
void expect_stays_on_device(const Reduction& r, const std::vector<Array>& args, More more) {
  const std::vector<Array> want = evaluate(r, args, with(Backend::Interpreter));
  NullBackend dev(true, true);
  ScopedBackend use(BackendId::Cuda, dev);
  const Array out = eval_on_null_device(r, args, want[0].shape());
  EXPECT_EQ(dev.loads(), 0) << r.str();
  EXPECT_EQ(dev.stores(), 0) << r.str();
  EXPECT_EQ(dev.adds(), static_cast<int>(r.impl().addends.size())) << r.str();
  more(dev);
  expect_near_all(out, want[0], r.str());
}

}  // namespace

// A call on a GPU whose backend keeps results there makes no host round trip: outputs written in
// place, computed variables (LogSumExp's forward value inside its gradient) in device memory, the
// chain rule's extra terms (second derivatives) added on the device. Same values as on the host.
TEST(NullBackend, DeviceResultsStayOnTheDevice) {
  const Formula x = vi(0, 3), y = vj(1, 3);
  const Reduction lse(ReductionOp::LogSumExp, -sqdist(x, y) * 2.0);
  const Reduction g1 = grad(lse, 0), g2 = grad(g1, 0);
  ASSERT_FALSE(g1.impl().computed.empty());
  ASSERT_FALSE(g2.impl().addends.empty());
  const int64_t n = 17, m = 23;
  const std::vector<Array> in = {
      random_array(DType::Float64, {n, 3}, 1), random_array(DType::Float64, {m, 3}, 2),
      random_array(DType::Float64, {n, 1}, 3), random_array(DType::Float64, {n, 3}, 4)};
  for (const auto& [r, n_in] : {std::pair{lse, 2}, std::pair{g1, 3}, std::pair{g2, 4}}) {
    const std::vector<Array> args(in.begin(), in.begin() + n_in);
    expect_stays_on_device(r, args, [&](const NullBackend& dev) {
      EXPECT_EQ(dev.allocs(),
                static_cast<int>(r.impl().computed.size() + 2 * r.impl().addends.size()))
          << r.str();
      for (const NullCall& c : dev.calls()) EXPECT_EQ(c.device, 0);
    });
  }
}

// A sum over all rows into a device output (a gradient with respect to a parameter, and its own
// derivative) is summed on the device: the rows computed into device memory, no host round trip.
TEST(NullBackend, SumsOverAllRowsStayOnTheDevice) {
  const Formula x = vi(0, 3), y = vj(1, 3);
  const Reduction r(ReductionOp::Sum, exp(-sqdist(x, y) * pm(2, 1)) * vj(3, 2));
  const Reduction g1 = grad(r, 2), g2 = grad(g1, 2);
  ASSERT_TRUE(g1.full_sum());
  ASSERT_TRUE(g2.full_sum());
  const int64_t n = 300, m = 23;
  const std::vector<Array> in = {
      random_array(DType::Float64, {n, 3}, 1),      random_array(DType::Float64, {m, 3}, 2),
      random_array(DType::Float64, {1}, 3, 0.5, 2), random_array(DType::Float64, {m, 2}, 4),
      random_array(DType::Float64, {n, 2}, 5),      random_array(DType::Float64, {1}, 6)};
  for (const auto& [g, n_in] : {std::pair{g1, 5}, std::pair{g2, 6}}) {
    const std::vector<Array> args(in.begin(), in.begin() + n_in);
    expect_stays_on_device(g, args,
                           [&](const NullBackend& dev) { EXPECT_GE(dev.sums(), 1) << g.str(); });
  }
}

TEST(MultiGpu, SplitRowsDealsWholeGranulesEvenly) {
  using Shares = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(engine::split_rows(1000, 3, 256), (Shares{{0, 512}, {512, 768}, {768, 1000}}));
  EXPECT_EQ(engine::split_rows(1024, 4, 256),
            (Shares{{0, 256}, {256, 512}, {512, 768}, {768, 1024}}));
  EXPECT_EQ(engine::split_rows(100, 4, 256), (Shares{{0, 100}}));  // one granule: one device
  EXPECT_EQ(engine::split_rows(0, 2, 256), (Shares{{0, 0}}));
  for (int64_t n : {1, 255, 257, 5000, 100003})
    for (int parts : {1, 2, 3, 8}) {
      const Shares s = engine::split_rows(n, parts, 256);
      EXPECT_LE(static_cast<int>(s.size()), parts);
      int64_t at = 0, lo = INT64_MAX, hi = 0;
      for (const auto& [b, e] : s) {
        EXPECT_EQ(b, at);
        EXPECT_GT(e, b);
        at = e;
        lo = std::min(lo, e - b), hi = std::max(hi, e - b);
      }
      EXPECT_EQ(at, n);
      // One granule more or fewer, plus the last share's partial granule.
      EXPECT_LT(hi - lo, 2 * 256) << n << " rows on " << parts;
    }
}

// gpu_devices: a host-array call on the GPU shares its outer rows between the devices (the null
// backend computing in the CUDA slot), with the same results; a gradient whose sub-reduction runs
// over all rows (LogSumExp's, inside its y-gradient) too.
TEST(MultiGpu, HostCallsShareOuterRowsBetweenDevices) {
  NullBackend dev(true, true);
  ScopedBackend use(BackendId::Cuda, dev);
  const Formula x = vi(0, 3), y = vj(1, 3);
  const Reduction lse(ReductionOp::LogSumExp, -sqdist(x, y) * 2.0);
  const Reduction gauss(ReductionOp::Sum, exp(-sqdist(x, y)) * vj(2, 2));
  const int64_t n = 1000, m = 700;
  const std::vector<Array> in = {random_array(DType::Float64, {n, 3}, 1),
                                 random_array(DType::Float64, {m, 3}, 2),
                                 random_array(DType::Float64, {m, 2}, 3)};
  Options gpus = with(Backend::Cuda);
  gpus.gpu_devices = {3, 1, 2};
  for (const auto& [r, n_in, rows] :
       {std::tuple{gauss, 3, n}, std::tuple{lse, 2, n}, std::tuple{grad(lse, 1), 3, m}}) {
    std::vector<Array> args(in.begin(), in.begin() + std::min<int>(n_in, 2));
    if (n_in == 3)
      args.push_back(r.op() == ReductionOp::Sum && rows == n
                         ? in[2]
                         : random_array(DType::Float64, {n, 1}, 4));
    const std::vector<Array> want = evaluate(r, args, with(Backend::Interpreter));
    const size_t before = dev.calls().size();
    const std::vector<Array> got = evaluate(r, args, gpus);
    for (int64_t q = 0; q < want[0].size(); ++q)
      EXPECT_NEAR(got[0].at(q), want[0].at(q), 1e-12 * (1 + std::abs(want[0].at(q)))) << r.str();
    // The last calls are the shares of r itself: the devices in order, their rows adding up.
    const std::vector<NullCall> calls = dev.calls();
    ASSERT_GE(calls.size(), before + 3);
    int64_t total = 0;
    for (size_t k = calls.size() - 3; k < calls.size(); ++k) total += calls[k].n_outer;
    EXPECT_EQ(total, rows) << r.str();
    std::vector<int> devices;
    for (size_t k = calls.size() - 3; k < calls.size(); ++k) devices.push_back(calls[k].device);
    std::sort(devices.begin(), devices.end());
    EXPECT_EQ(devices, (std::vector<int>{1, 2, 3})) << r.str();
  }
}

TEST(CudaBackend, RequestWithoutGpuGivesTheDriverError) {
  if (cuda_info().usable) GTEST_SKIP() << "a GPU is usable here";
  std::string want;
  try {
    cuda_device(0, "evaluate");
  } catch (const Error& e) {
    want = e.what();
  }
  ASSERT_NE(want.find("CUDA is not usable"), std::string::npos) << want;
  const auto [x, y, b] = gauss_inputs(DType::Float32, 4, 6);
  try {
    evaluate(kGauss, std::vector<Array>{x, y, b}, with(Backend::Cuda));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
}

TEST(CudaPlanTable, BoundedLeastRecentlyUsedFirstOut) {
  CudaDevice dev;
  dev.sm_count = 132;
  dev.max_shared_per_block = 227 * 1024;
  CudaPlanTable t(3);
  const ReductionImpl& r = kGauss.impl();
  auto get = [&](int64_t n) { return t.get(r, false, n, 100, CudaSumMode{}, dev); };
  const auto first = get(1);
  EXPECT_FALSE(first->source.empty());
  get(2);
  get(3);
  EXPECT_EQ(t.misses(), 3);
  get(1);  // a hit, and now the most recent
  EXPECT_EQ(t.misses(), 3);
  get(4);  // evicts 2, the least recently used
  EXPECT_EQ(t.size(), 3u);
  get(1);
  get(3);
  EXPECT_EQ(t.misses(), 4);
  get(2);
  EXPECT_EQ(t.misses(), 5);
  for (int64_t n = 10; n < 50; ++n) get(n);
  EXPECT_EQ(t.size(), 3u);
  // A plan a caller holds outlives its eviction.
  EXPECT_EQ(first->layout.vars.size(), 3u);
  EXPECT_EQ(CudaPlanTable().capacity(), CudaPlanTable::kDefaultCapacity);
}

TEST(LruMap, KeepsTheMostRecentlyUsedWithinItsCapacity) {
  LruMap<std::string, int> m(2);
  m.insert("a", 1);
  m.insert("b", 2);
  ASSERT_NE(m.find("a"), nullptr);  // "b" is now the least recently used
  EXPECT_EQ(m.insert("c", 3), 3);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m.find("b"), nullptr);
  EXPECT_EQ(*m.find("a"), 1);
  EXPECT_EQ(m.insert("a", 9), 1);  // an existing value stays
  m.clear();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ((LruMap<int, int>(0).capacity()), 1u);
}
