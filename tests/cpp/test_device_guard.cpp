// Host code must never touch device memory: the cases that crashed on a first GPU (batch
// dimensions, LogSumExp and SumSoftMaxWeight gradients, block-sparse ranges), run on guarded
// "device" arrays (faulting outside the null backend's entry points) and checked against the
// interpreter on host arrays.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "support/guarded_memory.hpp"
#include "support/null_backend.hpp"
#include "backend/registry.hpp"
#include "reduction_helpers.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// A fault says where it was and whether the address was guarded device memory, then aborts: the
// test fails with the place of the host access instead of a bare "SEGFAULT".
void on_fault(int, siginfo_t* info, void*) {
  char line[160];
  const int n =
      std::snprintf(line, sizeof line, "\nhost access to %s at %p; backtrace:\n",
                    in_guarded_region(info->si_addr) ? "guarded device memory" : "unguarded memory",
                    info->si_addr);
  if (write(STDERR_FILENO, line, static_cast<size_t>(n)) < 0) _exit(2);
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  signal(SIGABRT, SIG_DFL);
  abort();
}

class DeviceGuard : public ::testing::Test {
 protected:
  void SetUp() override {
    void* warm[1];
    backtrace(warm, 1);  // loads the unwinder now, not inside the handler
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, &old_segv_);
    sigaction(SIGBUS, &sa, &old_bus_);
  }
  void TearDown() override {
    sigaction(SIGSEGV, &old_segv_, nullptr);
    sigaction(SIGBUS, &old_bus_, nullptr);
  }

  NullBackend dev_{true, true, true};
  ScopedBackend use_{BackendId::Cuda, dev_};

 private:
  struct sigaction old_segv_ {
  }, old_bus_{};
};

// A guarded array on "CUDA device 0": its view, and the mapping that owns it.
struct DeviceArray {
  std::shared_ptr<void> owner;
  ArrayView view;
};

// A guarded copy of `a`; `strides` (elements) other than C order spread it out (or broadcast).
DeviceArray to_device(const Array& a, std::vector<int64_t> strides = {}) {
  DeviceArray d;
  d.view = a.view();
  if (!strides.empty()) d.view.strides = strides;
  int64_t extent = 1;  // elements up to the last one, whatever the strides
  for (size_t k = 0; k < a.shape().size(); ++k)
    extent += (a.shape()[k] - 1) * d.view.stride(static_cast<int>(k));
  const size_t es = dtype_size(a.dtype());
  d.owner = guarded_alloc(static_cast<size_t>(std::max<int64_t>(extent, 1)) * es, &d.view.data);
  d.view.device = Device{DeviceKind::CUDA, 0};
  const GuardedAccess open;
  std::vector<int64_t> idx(a.shape().size(), 0);
  for (int64_t q = 0; q < a.size(); ++q) {
    int64_t off = 0;
    int64_t rest = q;
    for (int k = static_cast<int>(idx.size()) - 1; k >= 0; --k) {
      off += rest % a.shape()[k] * d.view.stride(k);
      rest /= a.shape()[k];
    }
    std::memcpy(static_cast<uint8_t*>(d.view.data) + off * es,
                static_cast<const uint8_t*>(a.data()) + q * es, es);
  }
  return d;
}

Array to_host(const DeviceArray& d) {
  Array a(d.view.dtype, d.view.shape);
  const GuardedAccess open;
  std::memcpy(a.data(), d.view.data, static_cast<size_t>(a.size()) * dtype_size(a.dtype()));
  return a;
}

// Random inputs for every slot the caller fills: (batch..., rows, dim) for i and j variables,
// (batch..., dim) for parameters, positive parameters (scales).
std::vector<Array> inputs_for(const Reduction& r, const std::vector<int64_t>& batch, int64_t n,
                              int64_t m, uint64_t seed) {
  std::vector<Array> in;
  for (const VarSlot& v : r.inputs()) {
    if (static_cast<int>(in.size()) <= v.index) in.resize(v.index + 1, Array(DType::Float64, {1}));
    std::vector<int64_t> shape = batch;
    if (v.cat != Category::Param) shape.push_back(v.cat == Category::I ? n : m);
    shape.push_back(v.dim);
    in[v.index] = v.cat == Category::Param
                      ? random_array(DType::Float64, shape, seed + v.index, 0.5, 1.5)
                      : random_array(DType::Float64, shape, seed + v.index);
  }
  return in;
}

// Element strides of some device inputs (by input index), where they are not C order.
using Strides = std::map<int, std::vector<int64_t>>;

// Evaluates r on guarded device copies of `in` into guarded device outputs, on a (fake) caller
// stream, and compares with the interpreter on the host arrays; checks that the null backend ran
// on the "device" (else the guard proves nothing).
void expect_device_equals_host(NullBackend& dev, const Reduction& r, const std::vector<Array>& in,
                               Options opt, const std::string& what, const Strides& strides = {}) {
  SCOPED_TRACE(what + ": " + r.str());
  Options host = opt;
  host.backend = Backend::Interpreter;
  const std::vector<Array> want = evaluate(r, in, host);
  std::vector<DeviceArray> din;
  std::vector<ArrayView> views;
  for (size_t k = 0; k < in.size(); ++k) {
    const auto it = strides.find(static_cast<int>(k));
    din.push_back(to_device(in[k], it == strides.end() ? std::vector<int64_t>{} : it->second));
  }
  for (const DeviceArray& d : din) views.push_back(d.view);
  std::vector<DeviceArray> dout;
  std::vector<ArrayView> outs;
  for (const Array& w : want) dout.push_back(to_device(Array(w.dtype(), w.shape())));
  for (const DeviceArray& d : dout) outs.push_back(d.view);
  static int token = 0;
  opt.backend = Backend::Auto;
  opt.stream = &token;  // a caller's stream, as from PyTorch; the null backend only records it
  const size_t calls = dev.calls().size();
  evaluate(r, views, outs, opt);
  ASSERT_GT(dev.calls().size(), calls);
  for (size_t k = calls; k < dev.calls().size(); ++k) ASSERT_EQ(dev.calls()[k].device, 0);
  for (size_t k = 0; k < want.size(); ++k) {
    const Array got = to_host(dout[k]);
    ASSERT_EQ(got.size(), want[k].size());
    for (int64_t q = 0; q < got.size(); ++q) {
      // Rows that reduce over nothing (ranges) hold -inf, or NaN in gradients: equal as such.
      const double a = got.at(q), b = want[k].at(q);
      if (a == b || (std::isnan(a) && std::isnan(b))) continue;
      ASSERT_NEAR(got.at(q), want[k].at(q), 1e-10 * (1 + std::abs(want[k].at(q))))
          << "output " << k << " element " << q;
    }
  }
}

const std::vector<std::string> kAliases = {"X = Vi(0, 2)", "Y = Vj(1, 2)", "B = Vj(2, 3)",
                                           "S = Pm(3, 1)"};
const Formula kF1 = parse("Sin(S * (X | Y)) - S * SqDist(X, Y) * Sum(B)", kAliases);
const Formula kF2 = parse("Sin(S * (X - Y)) * Elem(B, 0)", kAliases);

std::vector<Reduction> forward_cases() {
  std::vector<Reduction> rs;
  for (const Formula& f : {kF1, kF2}) {
    rs.emplace_back(ReductionOp::Sum, f);
    if (f.dim() != 1) continue;  // LogSumExp and ArgKMin reduce scalars
    rs.emplace_back(ReductionOp::LogSumExp, f);
    rs.emplace_back(ReductionOp::ArgKMin, f, 1, 3);
  }
  return rs;
}

// LogSumExp and SumSoftMaxWeight read their forward's outputs in their gradients (computed
// variables): first and second order, in each variable.
std::vector<Reduction> gradient_cases() {
  std::vector<Reduction> rs;
  for (const Reduction& r : {Reduction(ReductionOp::LogSumExp, kF1),
                             Reduction(ReductionOp::SumSoftMaxWeight, kF1, 1, 0, vj(2, 3))})
    for (int var : {0, 1, 2, 3}) {
      const Reduction g = grad(r, var);
      rs.push_back(g);
      rs.push_back(grad(g, var));
      if (var != 0) rs.push_back(grad(g, 0));
    }
  return rs;
}

}  // namespace

TEST_F(DeviceGuard, BatchedForwardWithABatchedParameter) {
  for (const Reduction& r : forward_cases())
    expect_device_equals_host(dev_, r, inputs_for(r, {2, 3}, 300, 517, 1), {}, "batched");
}

TEST_F(DeviceGuard, LogSumExpAndSoftMaxGradients) {
  for (const Reduction& r : gradient_cases())
    expect_device_equals_host(dev_, r, inputs_for(r, {}, 300, 517, 2), {}, "gradient");
}

TEST_F(DeviceGuard, BatchedGradients) {
  for (const Reduction& r : gradient_cases())
    expect_device_equals_host(dev_, r, inputs_for(r, {2, 3}, 30, 51, 3), {}, "batched gradient");
}

TEST_F(DeviceGuard, BlockSparseRanges) {
  const int64_t n = 300, m = 517;
  auto br = std::make_shared<BlockRanges>();
  // Three blocks of i rows, each reducing over some j blocks; rows 200..250 over none.
  br->ranges_i = {0, 120, 120, 200, 250, 300};
  br->redranges_j = {0, 100, 300, 517, 100, 300, 0, 517};
  br->slices_i = {2, 3, 4};
  Options opt;
  opt.ranges = br;
  std::vector<Reduction> rs = forward_cases();
  for (const Reduction& g : gradient_cases())
    if (g.axis() == 1) rs.push_back(g);
  for (const Reduction& r : rs) {
    if (r.axis() != 1) continue;  // ranges as given index the i rows
    expect_device_equals_host(dev_, r, inputs_for(r, {}, n, m, 4), opt, "ranges");
  }
}

// The guard itself: a host read of a device array outside the backend faults.
TEST(DeviceGuardDeathTest, HostReadsOfDeviceMemoryFault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const DeviceArray d = to_device(random_array(DType::Float64, {4, 2}, 5));
  EXPECT_DEATH(std::fprintf(stderr, "%g\n", *static_cast<volatile double*>(d.view.data)), "");
  const GuardedAccess open;  // and is allowed inside an access scope
  EXPECT_EQ(static_cast<const double*>(d.view.data)[0], to_host(d).at(0));
}

// Inputs as PyTorch hands them over: autograd's cotangent of a sum is an expanded tensor (every
// stride 0), batch dimensions of a slice are strided, a batched parameter broadcasts against
// unbatched data.
TEST_F(DeviceGuard, ExpandedStridedAndBroadcastInputs) {
  for (const Reduction& g : gradient_cases()) {
    std::vector<Array> in = inputs_for(g, {}, 300, 517, 6);
    Array& cot = in.back();  // the last gradient's cotangent
    for (int64_t q = 0; q < cot.size(); ++q) cot.as<double>()[q] = 0.75;
    std::vector<int64_t> zeros(cot.shape().size(), 0);
    expect_device_equals_host(dev_, g, in, {}, "expanded cotangent",
                              Strides{{static_cast<int>(in.size()) - 1, zeros}});
  }
  for (const Reduction& r : forward_cases()) {
    std::vector<Array> in = inputs_for(r, {2, 3}, 30, 51, 7);
    // X with its batch dimensions transposed in memory: (2, 3, 30, 2) stored as (3, 2, 30, 2).
    expect_device_equals_host(dev_, r, in, {}, "strided batch", Strides{{0, {60, 120, 2, 1}}});
    in[0] = random_array(DType::Float64, {30, 2}, 8);  // unbatched X, batched S and B, Y
    expect_device_equals_host(dev_, r, in, {}, "broadcast batch");
  }
}
