// CUDA run time without a GPU: the PTX cache (memory, disk, keys) and the driver's absence reported
// in plain words.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "backend/registry.hpp"
#include "backend/cuda/driver.hpp"
#include "backend/cuda/nvrtc.hpp"
#include "backend/cuda/ptx_cache.hpp"
#include "codegen/cuda_codegen.hpp"
#include "reduction/reduction_impl.hpp"
#include "reduction_helpers.hpp"
#include "temp_env.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;
using tessel::test_env::ScopedEnv;
using tessel::test_env::TempDir;
using tessel::testing::expect_error;

namespace {

std::string gaussian_source(bool f64) {
  const Reduction r(ReductionOp::Sum, exp(-sqdist(vi(0, 3), vj(1, 3))) * vj(2, 1));
  KernelLayout lay;
  return generate_cuda_kernel(r.impl(), f64, lay);
}

int count_files(const std::string& dir, const std::string& ext) {
  int n = 0;
  if (!std::filesystem::exists(dir)) return 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.path().extension() == ext) ++n;
  return n;
}

TEST(PtxCache, CompilesOnceThenHitsMemoryThenDisk) {
  if (!nvrtc_info().usable) GTEST_SKIP() << nvrtc_info().problem;
  TempDir tmp;
  ScopedEnv dir("TESSEL_CACHE_DIR", tmp.path());
  BackendRegistry::instance().forget_loaded();
  const std::string src = gaussian_source(false);
  const PtxCacheStats s0 = cuda_ptx_stats();
  const std::string ptx = cuda_ptx(src, "compute_90");
  EXPECT_NE(ptx.find(".entry tessel_kernel"), std::string::npos);
  const PtxCacheStats s1 = cuda_ptx_stats();
  EXPECT_EQ(s1.compiles, s0.compiles + 1);
  EXPECT_EQ(count_files(tmp.path() + "/cuda", ".ptx"), 1);
  EXPECT_EQ(count_files(tmp.path() + "/cuda", ".cu"), 1);  // the source, kept for debugging
  EXPECT_EQ(cuda_ptx(src, "compute_90"), ptx);
  EXPECT_EQ(cuda_ptx_stats().memory_hits, s1.memory_hits + 1);
  // A new process (here: a forgotten memory table) finds it on disk without NVRTC.
  BackendRegistry::instance().forget_loaded();
  EXPECT_EQ(cuda_ptx(src, "compute_90"), ptx);
  const PtxCacheStats s2 = cuda_ptx_stats();
  EXPECT_EQ(s2.disk_hits, s1.disk_hits + 1);
  EXPECT_EQ(s2.compiles, s1.compiles);
  // The listing and `cache clear` cover CUDA entries too.
  bool listed = false;
  for (const CacheEntry& e : cache_list()) listed |= e.path.ends_with(".ptx");
  EXPECT_TRUE(listed);
  EXPECT_GE(cache_clear(), 1);
  EXPECT_EQ(count_files(tmp.path() + "/cuda", ".ptx"), 0);
}

TEST(PtxCache, KeyCoversArchitectureOptionsAndSource) {
  if (!nvrtc_info().usable) GTEST_SKIP() << nvrtc_info().problem;
  TempDir tmp;
  ScopedEnv dir("TESSEL_CACHE_DIR", tmp.path());
  BackendRegistry::instance().forget_loaded();  // earlier tests loaded some of these kernels from another folder
  const std::string f32 = gaussian_source(false), f64 = gaussian_source(true);
  const std::string a = cuda_ptx(f32, "compute_90");
  const std::string b = cuda_ptx(f32, "compute_80");
  const std::string c = cuda_ptx(f32, "compute_90", {"--use_fast_math"});
  const std::string d = cuda_ptx(f64, "compute_90");
  EXPECT_NE(a.find(".target sm_90"), std::string::npos);
  EXPECT_NE(b.find(".target sm_80"), std::string::npos);
  EXPECT_NE(a, d);
  EXPECT_EQ(count_files(tmp.path() + "/cuda", ".ptx"), 4);
  (void)c;
}

TEST(PtxCache, CompileErrorGivesTheLogAndTheSavedSource) {
  if (!nvrtc_info().usable) GTEST_SKIP() << nvrtc_info().problem;
  TempDir tmp;
  ScopedEnv dir("TESSEL_CACHE_DIR", tmp.path());
  try {
    cuda_ptx("extern \"C\" __global__ void tessel_kernel() { undeclared_thing(); }", "compute_90");
    FAIL() << "expected a compile error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("undeclared_thing"), std::string::npos) << msg;
    EXPECT_NE(msg.find("generated source kept at: "), std::string::npos) << msg;
    EXPECT_NE(msg.find(".cu"), std::string::npos) << msg;
  }
  EXPECT_EQ(count_files(tmp.path() + "/cuda", ".ptx"), 0);  // nothing published
}

TEST(CudaDriver, StatusExplainsWhatIsMissing) {
  const CudaInfo& info = cuda_info();
  const std::string status = cuda_status();
  ASSERT_FALSE(status.empty());
  if (info.usable) {
    EXPECT_NE(status.find("GPU 0"), std::string::npos) << status;
    EXPECT_FALSE(info.devices.empty());
    EXPECT_EQ(info.devices[0].arch().rfind("compute_", 0), 0u);
  } else {
    EXPECT_EQ(status, info.problem);
    // Plain words: what was looked for and how to fix it, not a bare error code.
    EXPECT_TRUE(status.find("no CUDA driver") != std::string::npos ||
                status.find("cuInit failed") != std::string::npos ||
                status.find("no GPU") != std::string::npos)
        << status;
  }
}

TEST(CudaDriver, CallsWithoutAGpuAreClearErrors) {
  if (cuda_info().usable) GTEST_SKIP() << "a GPU is present: " << cuda_status();
  try {
    cuda_device(0, "evaluate");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("evaluate"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA is not usable"), std::string::npos) << e.what();
  }
  EXPECT_THROW(CudaBuffer(0, 16), Error);
}

TEST(CudaDriver, MissingDeviceIndexIsNamed) {
  if (!cuda_info().usable) GTEST_SKIP() << cuda_status();
  const int n = static_cast<int>(cuda_info().devices.size());
  try {
    cuda_device(n, "evaluate");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

// Host memory labelled as CUDA: the engine must decide where to run before touching it.
ArrayView on_cuda(const Array& a, int device) {
  ArrayView v = a.view();
  v.device = Device{DeviceKind::CUDA, device};
  return v;
}

TEST(CudaEvaluate, DeviceChoiceErrorsAreClear) {
  const Reduction r(ReductionOp::Sum, exp(-sqdist(vi(0, 3), vj(1, 3))) * vj(2, 1));
  const Array x(DType::Float32, {4, 3}), y(DType::Float32, {5, 3}), b(DType::Float32, {5, 1});
  Array out(DType::Float32, {4, 1});
  auto run = [&](std::vector<ArrayView> in, Options opt = {}) {
    const ArrayView o[1] = {out.view()};
    evaluate(r, in, o, opt);
  };
  expect_error(
      [&] {
        run({on_cuda(x, 0), on_cuda(y, 1), b.view()});
      },
      {"all CUDA arrays must be on one device"});
  Options cpu;
  cpu.backend = Backend::Compiled;
  expect_error(
      [&] {
        run({on_cuda(x, 0), y.view(), b.view()}, cpu);
      },
      {"but a CPU backend was requested"});
  if (cuda_info().usable) return;  // the rest is about machines without a GPU
  expect_error([&] { run({on_cuda(x, 0), y.view(), b.view()}); }, {"CUDA is not usable"});
  Options gpu;
  gpu.backend = Backend::Cuda;
  expect_error([&] { run({x.view(), y.view(), b.view()}, gpu); }, {"CUDA is not usable"});
}

}  // namespace
