// The CUDA emulator itself: shared memory, barriers, atomics and warp intrinsics give CUDA's
// results, and kernels that would deadlock, diverge around a barrier or overrun a buffer fail.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "cuda_emulator.hpp"

using namespace tessel;

namespace {

#define SKIP_WITHOUT_COMPILER()                                        \
  if (const std::string why = emu::unavailable_reason(); !why.empty()) \
  GTEST_SKIP() << "the CUDA emulator needs a C++ compiler: " << why

// Hand-written kernels with known answers, and kernels that break CUDA's rules on purpose.
const char* kKernels = R"CUDA(
extern "C" __global__ void block_stats(const float* x, long long n, float* sums, int* counts,
                                       float* warp_sums, float* warp_max, unsigned* ballots) {
  extern __shared__ float s[];
  __shared__ int arrivals;
  __shared__ __align__(16) float firsts[8][4];
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x == 0) arrivals = 0;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  if (threadIdx.x < 32) firsts[threadIdx.x / 4][threadIdx.x % 4] = s[threadIdx.x];
  __syncthreads();
  float first_sum = 0.0f;
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 4; ++c) first_sum += firsts[r][c];
  atomicAdd(&arrivals, 1);
  for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
    __syncthreads();
  }
  const int in_range = __syncthreads_count(i < n);
  float v = i < n ? x[i] : 0.0f, m = v;
  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
  for (int d = 1; d < 32; d *= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, d));
  const unsigned positive = __ballot_sync(0xffffffffu, i < n && x[i] > 0.0f);
  if (threadIdx.x == 0) {
    sums[2 * blockIdx.x] = s[0];
    sums[2 * blockIdx.x + 1] = first_sum;
    counts[2 * blockIdx.x] = arrivals;
    counts[2 * blockIdx.x + 1] = in_range;
  }
  if (threadIdx.x % 32 == 0) warp_sums[i / 32] = v, ballots[i / 32] = positive;
  if (threadIdx.x % 32 == 31) warp_max[i / 32] = m;
}
extern "C" __global__ void barrier_in_branch(int* out) {
  if (threadIdx.x < 5) __syncthreads();
  out[threadIdx.x] = 1;
}
extern "C" __global__ void two_barriers(int* out) {
  if (threadIdx.x % 2)
    __syncthreads();
  else
    __syncthreads();
  out[threadIdx.x] = 1;
}
extern "C" __global__ void half_warp_shuffle(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x < 16) v = __shfl_down_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}
extern "C" __global__ void deadlock(int* out) {
  if (threadIdx.x == 0) __syncwarp(3u);  // waits for lane 1, which waits at the barrier
  __syncthreads();
  out[threadIdx.x] = 1;
}
extern "C" __global__ void failing_assert(int* out) {
  assert(threadIdx.x != 7);
  out[threadIdx.x] = 1;
}
extern "C" __global__ void write_all(int* out) { out[threadIdx.x] = 1; }
)CUDA";

using IntKernel = void(int*);

const emu::Module& module() {
  static emu::Module m(kKernels);
  return m;
}

emu::LaunchConfig one_block(unsigned threads) {
  emu::LaunchConfig c;
  c.block.x = threads;
  return c;
}

// The launch must fail with a message that contains `expect`.
void expect_error(const char* kernel, unsigned threads, const std::string& expect) {
  emu::GuardedBuffer out(threads * sizeof(int), sizeof(int), "out");
  IntKernel* fn = module().kernel<IntKernel>(kernel);
  try {
    module().launch(one_block(threads), [&] { fn(out.as<int>()); });
    ADD_FAILURE() << kernel << ": expected an EmulationError";
  } catch (const emu::EmulationError& e) {
    EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << kernel << ": " << e.what();
  }
}

}  // namespace

TEST(CudaEmulatedRuntime, SharedMemoryBarriersAtomicsAndShuffles) {
  SKIP_WITHOUT_COMPILER();
  using Fn = void(const float*, long long, float*, int*, float*, float*, unsigned*);
  Fn* fn = module().kernel<Fn>("block_stats");
  const long long n = 1000;
  std::vector<float> x(n);
  for (long long i = 0; i < n; ++i) x[i] = static_cast<float>((i * 7) % 9 - 4);  // exact sums
  for (unsigned block : {32u, 64u, 256u}) {
    const unsigned grid = static_cast<unsigned>((n + block - 1) / block), warps = grid * block / 32;
    emu::GuardedBuffer xs(n * sizeof(float), sizeof(float), "x");
    std::copy(x.begin(), x.end(), xs.as<float>());
    emu::GuardedBuffer sums(grid * 2 * sizeof(float), 4, "sums"),
        counts(grid * 2 * sizeof(int), 4, "counts");
    emu::GuardedBuffer wsum(warps * 4, 4, "warp_sums"), wmax(warps * 4, 4, "warp_max"),
        ballots(warps * 4, 4, "ballots");
    emu::LaunchConfig cfg = one_block(block);
    cfg.grid.x = grid;
    cfg.dynamic_smem = block * sizeof(float);
    module().launch(cfg, [&] {
      fn(xs.as<float>(), n, sums.as<float>(), counts.as<int>(), wsum.as<float>(), wmax.as<float>(),
         ballots.as<unsigned>());
    });
    for (unsigned b = 0; b < grid; ++b) {
      const long long lo = b * static_cast<long long>(block), hi = std::min(n, lo + block);
      const float first = std::accumulate(x.begin() + lo, x.begin() + std::min(hi, lo + 32), 0.0f);
      EXPECT_EQ(sums.as<float>()[2 * b], std::accumulate(x.begin() + lo, x.begin() + hi, 0.0f))
          << "tree sum in dynamic shared memory, block " << b;
      EXPECT_EQ(sums.as<float>()[2 * b + 1], first) << "static __shared__ array, block " << b;
      EXPECT_EQ(counts.as<int>()[2 * b], static_cast<int>(block)) << "atomicAdd, block " << b;
      EXPECT_EQ(counts.as<int>()[2 * b + 1], hi - lo) << "__syncthreads_count, block " << b;
    }
    for (unsigned w = 0; w < warps; ++w) {
      float sum = 0, mx = -1e30f;
      unsigned bits = 0;
      for (unsigned l = 0; l < 32; ++l) {
        const long long i = w * 32LL + l;
        const float v = i < n ? x[i] : 0.0f;
        sum += v, mx = std::max(mx, v);
        if (v > 0) bits |= 1u << l;
      }
      EXPECT_EQ(wsum.as<float>()[w], sum) << "__shfl_down_sync, warp " << w;
      EXPECT_EQ(wmax.as<float>()[w], mx) << "__shfl_xor_sync, warp " << w;
      EXPECT_EQ(ballots.as<unsigned>()[w], bits) << "__ballot_sync, warp " << w;
    }
  }
}

TEST(CudaEmulatedRuntime, BrokenKernelsFailInsteadOfHanging) {
  SKIP_WITHOUT_COMPILER();
  expect_error("barrier_in_branch", 64, "__syncthreads");
  expect_error("two_barriers", 64, "divergent barriers");
  expect_error("half_warp_shuffle", 32, "exited");
  expect_error("deadlock", 64, "(deadlock)");  // found in the first round no thread goes on
  expect_error("failing_assert", 32, "assert(threadIdx.x != 7) failed");
  // Launch limits are CUDA's: 1024 threads, 48 KiB of dynamic shared memory by default.
  expect_error("write_all", 1025, "threads per block");
  emu::GuardedBuffer out(64 * sizeof(int), sizeof(int), "out");
  emu::LaunchConfig cfg = one_block(64);
  cfg.dynamic_smem = 49 * 1024;
  EXPECT_THROW(module().launch(cfg, [] {}), emu::EmulationError);
}

TEST(CudaEmulatedRuntime, OutOfBoundsAccessStopsWithTheBufferName) {
  SKIP_WITHOUT_COMPILER();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  IntKernel* fn = module().kernel<IntKernel>("write_all");
  EXPECT_DEATH(
      {
        emu::GuardedBuffer out(33 * sizeof(int), sizeof(int), "out");
        module().launch(one_block(40), [&] { fn(out.as<int>()); });
      },
      "out-of-bounds access at byte offset 1[3-5][0-9] of buffer .out. \\(132 bytes\\)");
}
