// The stand-in CUDA driver and NVRTC (tests/standin) as tessel loads them: devices, copies,
// device memory that host code cannot touch, launches through the emulator, and injected faults.
// Run by ctest's `standin` label (TESSEL_LIBCUDA and TESSEL_NVRTC name the stand-ins); skipped
// when another driver, or none, is loaded.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/driver.hpp"
#include "reduction_helpers.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// Under TESSEL_TEST_STANDIN=1 (ctest's `standin` label) the stand-ins built beside this binary
// are the driver and NVRTC, with their own kernel cache (TESSEL_TEST_STANDIN_CACHE names another:
// the native and sanitized builds compile the same kernels, keyed by their source and flags), and
// the largest GPU tests shrink their sizes for the emulator; set before main, so before tessel
// first loads either library.
const bool kStandinEnv = [] {
  const char* on = std::getenv("TESSEL_TEST_STANDIN");
  if (!on || std::string(on) != "1") return false;
  ::setenv("TESSEL_LIBCUDA", TESSEL_STANDIN_CUDA, 0);
  ::setenv("TESSEL_NVRTC", TESSEL_STANDIN_NVRTC, 0);
  const char* shared = std::getenv("TESSEL_TEST_STANDIN_CACHE");
  ::setenv("TESSEL_CACHE_DIR", shared && *shared ? shared : TESSEL_BINARY_DIR "/standin-cache", 1);
  ::setenv("TESSEL_TEST_CUDA_SHRINK", "10", 0);
  return true;
}();

bool on_standin() {
  return cuda_info().usable && cuda_info().path.find("tessel_standin_cuda") != std::string::npos;
}

#define SKIP_OFF_STANDIN() \
  if (!on_standin()) GTEST_SKIP() << "not on the stand-in driver: " << cuda_status()

// One of the stand-in's control calls, from the library tessel loaded.
template <class F>
F* control(const char* name) {
  void* lib = dlopen(cuda_info().path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  void* f = lib ? dlsym(lib, name) : nullptr;
  if (!f) throw std::runtime_error(std::string("the stand-in lacks ") + name);
  return reinterpret_cast<F*>(f);
}

std::string launches() { return control<const char*()>("tessel_standin_launches")(); }

const Reduction kGauss(ReductionOp::Sum, exp(-sqdist(vi(0, 3), vj(1, 3))) * vj(2, 2));

std::vector<Array> gauss_inputs(int64_t n, int64_t m) {
  return {random_array(DType::Float32, {n, 3}, 1), random_array(DType::Float32, {m, 3}, 2),
          random_array(DType::Float32, {m, 2}, 3)};
}

Options cuda_options() {
  Options o;
  o.backend = Backend::Cuda;
  return o;
}

TEST(Standin, ReportsAnH200LikeDevice) {
  SKIP_OFF_STANDIN();
  const CudaDevice& d = cuda_device(0, "test");
  EXPECT_EQ(d.cc_major, 9);
  EXPECT_EQ(d.cc_minor, 0);
  EXPECT_EQ(d.arch(), "compute_90");
  EXPECT_GT(d.sm_count, 0);
  EXPECT_EQ(d.max_shared_per_block, 227 * 1024);
  EXPECT_EQ(d.memory, int64_t{141} << 30);
  EXPECT_NE(cuda_status().find("stand-in"), std::string::npos) << cuda_status();
}

TEST(Standin, CopiesRoundTripThroughDeviceMemory) {
  SKIP_OFF_STANDIN();
  cuda_set_device(0);
  std::vector<float> host(1000), back(1000, -1.0f);
  for (size_t k = 0; k < host.size(); ++k) host[k] = static_cast<float>(k) * 0.5f;
  CudaBuffer buf(0, host.size() * sizeof(float));
  EXPECT_EQ(cuda_pointer_device(reinterpret_cast<void*>(buf.ptr())), 0);
  EXPECT_EQ(cuda_pointer_device(host.data()), -1);
  EXPECT_EQ(buf.ptr() % 16, 0u);
  auto* dev = reinterpret_cast<void*>(buf.ptr());
  cuda_copy_2d(dev, 40, host.data(), 40, 40, 25, nullptr);  // contiguous: one linear copy
  // Strided both ways: every other row of 20 bytes back, through cuMemcpy2DAsync.
  cuda_copy_2d(back.data(), 20, dev, 40, 20, 25, nullptr);
  cuda_synchronize(nullptr);
  for (size_t r = 0; r < 25; ++r)
    for (size_t c = 0; c < 5; ++c) ASSERT_EQ(back[r * 5 + c], host[r * 10 + c]) << r << "," << c;
  // Past the allocation's end is refused, as the driver refuses it.
  EXPECT_THROW(cuda_copy_2d(back.data(), 8, static_cast<char*>(dev) + 3996, 8, 8, 1, nullptr),
               Error);
}

TEST(Standin, PinnedMemoryIsHostMemory) {
  SKIP_OFF_STANDIN();
  cuda_set_device(0);
  void* pinned = cuda_host_alloc(64);
  EXPECT_EQ(cuda_pointer_device(pinned), -1);
  cuda_host_free(pinned);
}

TEST(Standin, AdoptedHostMemoryIsDeviceMemory) {
  SKIP_OFF_STANDIN();
  std::vector<double> v(16, 1.0);
  using Adopt = int(void*, size_t, int);
  ASSERT_EQ(control<Adopt>("tessel_standin_adopt")(v.data(), v.size() * 8, 0), 0);
  EXPECT_EQ(cuda_pointer_device(v.data() + 3), 0);
  ASSERT_EQ(control<int(void*)>("tessel_standin_release")(v.data()), 0);
  EXPECT_EQ(cuda_pointer_device(v.data() + 3), -1);
}

TEST(StandinDeathTest, HostAccessToDevicePointersFaults) {
  SKIP_OFF_STANDIN();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        cuda_set_device(0);
        CudaBuffer buf(0, 64);
        std::printf("%f\n", *reinterpret_cast<volatile float*>(buf.ptr()));
      },
      "");
}

TEST(Standin, LaunchesAreLoggedAndComputeWhatTheCpuDoes) {
  SKIP_OFF_STANDIN();
  control<int()>("tessel_standin_reset_log")();
  const std::vector<Array> in = gauss_inputs(300, 200);
  Options cpu;
  cpu.backend = Backend::Interpreter;
  expect_outputs_near(evaluate(kGauss, in, cuda_options()), evaluate(kGauss, in, cpu), 2e-5,
                      "Gaussian sum on the stand-in");
  const std::string log = launches();
  EXPECT_NE(log.find("\"kernel\": \"tessel_kernel\""), std::string::npos) << log;
  EXPECT_NE(log.find("\"stream\": \"legacy\""), std::string::npos) << log;
}

TEST(Standin, InjectedFaultsBecomeErrorsAndLeaveTesselUsable) {
  SKIP_OFF_STANDIN();
  const auto fail = control<int(const char*, int)>("tessel_standin_fail");
  int64_t n = 100;
  for (const char* kind : {"launch", "copy", "alloc"}) {
    // Each call larger than the last: the device workspace must grow, so the call allocates.
    const std::vector<Array> in = gauss_inputs(n *= 2, 50);
    ASSERT_EQ(fail(kind, 1), 0);
    try {
      evaluate(kGauss, in, cuda_options());
      ADD_FAILURE() << "an injected " << kind << " failure passed";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("CUDA_ERROR_") != std::string::npos) << what;
    }
    ASSERT_EQ(fail(kind, 0), 0);
    Options cpu;
    cpu.backend = Backend::Interpreter;
    expect_outputs_near(evaluate(kGauss, in, cuda_options()), evaluate(kGauss, in, cpu), 2e-5,
                        std::string("after an injected ") + kind + " failure");
  }
}

}  // namespace
