// Reductions larger than the GPU's memory budget, run block by block: the block plan's bounds, and
// the pipeline on a fake asynchronous device that defers every copy and kernel until the host
// waits, then runs them in a random order the streams and events allow, the kernels being the
// generated CUDA source in the emulator. A missing wait (a staging buffer refilled before its
// copy ran, a device buffer overwritten before its kernels read it) corrupts the results.
#include <deque>
#include <functional>
#include <memory>
#include <random>

#include "backend/cuda/stream_plan.hpp"
#include "cuda_emulated_harness.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

class FakeStreamDevice final : public StreamDevice {
 public:
  FakeStreamDevice(const CudaKernelPlan& plan, uint64_t seed)
      : plan_(plan), rng_(seed), fn_(module_for(plan.source).kernel<KernelFn>("tessel_kernel")) {}

  void* alloc(size_t bytes) override { return mem_.emplace_back(new unsigned char[bytes]).get(); }
  void* alloc_host(size_t bytes) override { return alloc(bytes); }
  int stream() override {
    queues_.emplace_back();
    return static_cast<int>(queues_.size()) - 1;
  }
  void copy(void* dst, const void* src, size_t bytes, int s) override {
    queues_[s].push_back({Op::Copy, [=] { std::memcpy(dst, src, bytes); }, -1});
  }
  int record(int s) override {
    done_.push_back(false);
    const int e = static_cast<int>(done_.size()) - 1;
    queues_[s].push_back({Op::Record, nullptr, e});
    return e;
  }
  void wait(int s, int e) override { queues_[s].push_back({Op::Wait, nullptr, e}); }
  void host_wait(int e) override {
    run_until([&] { return done_[e]; });
  }
  void launch(const StreamLaunch& l, int s) override {
    queues_[s].push_back({Op::Launch, [this, l] { run_kernel(l); }, -1});
  }
  void finish() override {
    run_until([&] {
      for (const auto& q : queues_)
        if (!q.empty()) return false;
      return true;
    });
  }

  int launches = 0;
  int overlaps = 0;  // copies run while a kernel was waiting on another stream: overlap possible

 private:
  struct Op {
    enum Kind { Copy, Launch, Record, Wait } kind;
    std::function<void()> run;
    int event;
  };

  void run_until(const std::function<bool()>& done) {
    while (!done()) {
      std::vector<int> ready;
      for (int s = 0; s < static_cast<int>(queues_.size()); ++s)
        if (!queues_[s].empty() &&
            (queues_[s].front().kind != Op::Wait || done_[queues_[s].front().event]))
          ready.push_back(s);
      if (ready.empty()) throw std::runtime_error("the streams wait on each other: a deadlock");
      auto& q = queues_[ready[rng_() % ready.size()]];
      const Op op = q.front();
      q.pop_front();
      if (op.kind == Op::Copy)
        for (const auto& other : queues_)
          for (const Op& o : other)
            if (o.kind == Op::Launch && &other != &q) {
              ++overlaps;
              goto counted;
            }
    counted:
      if (op.kind == Op::Record) done_[op.event] = true;
      if (op.run) op.run();
    }
  }

  void run_kernel(const StreamLaunch& l) {
    ++launches;
    const int64_t per_block = int64_t{plan_.block} * plan_.rows_per_thread;
    emu::LaunchConfig cfg;
    cfg.block.x = static_cast<unsigned>(plan_.block);
    cfg.grid.x = static_cast<unsigned>((l.n_outer + per_block - 1) / per_block);
    cfg.dynamic_smem = plan_.shared_bytes;
    cfg.smem_limit = kCaps.max_shared_per_block;
    if (l.n_outer == 0) return;
    module_for(plan_.source).launch(cfg, [&] {
      fn_(l.X, l.Y, l.P, l.n_outer, l.n_inner, l.out0, static_cast<long long*>(l.outi), l.work,
          l.n_inner, nullptr, nullptr, l.flags, l.j_offset);
    });
  }

  const CudaKernelPlan& plan_;
  std::mt19937_64 rng_;
  KernelFn* fn_;
  std::vector<std::unique_ptr<unsigned char[]>> mem_;
  std::vector<std::deque<Op>> queues_;
  std::vector<bool> done_;
};

struct Streamed {
  std::vector<Array> outs;
  StreamPlan plan;
  size_t budget = 0;
  int launches = 0, overlaps = 0;
};

// r over `in` (host arrays, one per variable) through run_streamed on the fake device.
Streamed run_fake(const Reduction& r, const std::vector<Array>& in,
                  const std::function<size_t(const StreamSizes&)>& budget_of,
                  const CudaPlanOverrides& force, uint64_t seed) {
  const ReductionImpl& R = r.impl();
  const DType t = in.at(0).dtype();
  const int64_t n_outer = in.at(R.outer() == Category::I ? 0 : 1).shape()[0];
  const int64_t n_inner = in.at(R.outer() == Category::I ? 1 : 0).shape()[0];
  const CudaKernelPlan plan =
      plan_cuda_kernel(R, t == DType::Float64, n_outer, n_inner, kCaps, force);
  std::vector<PackSource> by_index;
  for (const Array& a : in) {
    const int64_t cols = a.shape().size() == 2 ? a.shape()[1] : a.shape()[0];
    by_index.push_back(PackSource{a.data(), a.shape().size() == 2 ? cols : 0, 1});
  }
  Streamed s;
  std::vector<void*> ptrs;
  for (int k = 0; k < R.num_outputs(); ++k) {
    s.outs.emplace_back(R.output_is_index(k) ? DType::Int64 : t,
                        std::vector<int64_t>{n_outer, R.output_dim(k)});
    ptrs.push_back(s.outs.back().data());
  }
  StreamJob job = stream_job(R, plan.layout, t, n_outer, n_inner, by_index, ptrs);
  const StreamSizes sizes = stream_sizes(job);
  job.plan = s.plan =
      plan_stream(sizes, budget_of(sizes), int64_t{plan.block} * plan.rows_per_thread, plan.block);
  s.budget = budget_of(sizes);
  FakeStreamDevice dev(plan, seed);
  run_streamed(job, dev);
  s.launches = dev.launches;
  s.overlaps = dev.overlaps;
  return s;
}

}  // namespace

TEST(StreamPlan, FitsTheBudgetInWholeGranules) {
  StreamSizes s{100000, 200000, 16, 16, 8, 24, 16};
  for (size_t budget : {size_t{0}, size_t{1} << 30}) {
    const StreamPlan p = plan_stream(s, budget, 512, 128);
    EXPECT_FALSE(p.streamed());
    EXPECT_EQ(p.device_bytes, 100000 * 24 + 200000 * 16 + 16u);
  }
  // The inner side fits whole beside two outer blocks: outer blocks only.
  StreamPlan p = plan_stream(s, 4'000'000, 512, 128);
  EXPECT_EQ(p.inner_blocks, 1);
  EXPECT_GT(p.outer_blocks, 1);
  EXPECT_EQ(p.outer_block % 512, 0);
  EXPECT_LE(p.device_bytes, 4'000'000u);
  // Not even that: both sides in blocks, states kept between inner blocks.
  for (size_t budget : {size_t{1'000'000}, size_t{200'000}, size_t{60'000}}) {
    p = plan_stream(s, budget, 512, 128);
    EXPECT_GT(p.inner_blocks, 1) << budget;
    EXPECT_EQ(p.outer_block % 512, 0) << budget;
    EXPECT_EQ(p.inner_block % 128, 0) << budget;
    EXPECT_LE(p.device_bytes, budget);
    EXPECT_GE(p.outer_block * p.outer_blocks, 100000);
    EXPECT_GE(p.inner_block * p.inner_blocks, 200000);
  }
  // The least budget: one granule of each side, as the error says.
  const size_t least = 16 + 512 * (2 * 24 + 24) + 128 * 2 * 16;
  p = plan_stream(s, least, 512, 128);
  EXPECT_EQ(p.outer_block, 512);
  EXPECT_EQ(p.inner_block, 128);
  EXPECT_LE(p.device_bytes, least);
  const std::string msg = "gpu_memory_budget = " + std::to_string(least - 1) +
                          " bytes is too small: blocks of 512 outer and 128 inner rows need " +
                          std::to_string(least) + " bytes";
  expect_error([&] { plan_stream(s, least - 1, 512, 128); }, {"evaluate", msg.c_str()});
  // Sides smaller than a granule are one block each.
  p = plan_stream(StreamSizes{10, 1000000, 16, 16, 8, 24, 16}, 100'000, 512, 128);
  EXPECT_EQ(p.outer_block, 10);
  EXPECT_LE(p.device_bytes, 100'000u);
}

// Every reduction family through the pipeline on a small budget (outer blocks only, then both
// sides in blocks), against the interpreter; copies overlap kernels.
TEST_P(CudaEmulatedKernels, StreamedBlocksEqualTheInterpreter) {
  SKIP_WITHOUT_COMPILER();
  const DType t = dtype();
  const double tol = tol_of(t);
  const Formula x = vi(0, 3), y = vj(1, 3), b = vj(2, 2);
  const int64_t n = 300, m = 400;
  const std::vector<Array> in = {random_array(t, {n, 3}, 1), random_array(t, {m, 3}, 2),
                                 random_array(t, {m, 2}, 3, 0.1, 1)};
  const std::vector<std::pair<Reduction, int>> cases = {
      {Reduction(ReductionOp::Sum, exp(-sqdist(x, y)) * b), 3},
      {Reduction(ReductionOp::LogSumExp, -sqdist(x, y) * 3.0), 2},
      {Reduction(ReductionOp::MinArgMin, round(sqdist(x, y) * 4.0)), 2},
      {Reduction(ReductionOp::KMinArgKMin, round(sqdist(x, y) * 4.0), 1, 3), 2},
      {Reduction(ReductionOp::SumSoftMaxWeight, -sqdist(x, y), 1, 0, b), 3}};
  // Budgets: the inner side whole beside two blocks of 64 outer rows; then blocks of 64 outer
  // and 64 inner rows.
  const std::function<size_t(const StreamSizes&)> budgets[] = {
      [](const StreamSizes& z) {
        return z.fixed + z.n_inner * z.inner_row + 2 * 64 * (z.outer_row + z.out_row);
      },
      [](const StreamSizes& z) {
        return z.fixed + 64 * (2 * (z.outer_row + z.out_row) + z.state_row) + 2 * 64 * z.inner_row;
      }};
  uint64_t seed = 1;
  for (const auto& [r, n_in] : cases) {
    const std::vector<Array> args(in.begin(), in.begin() + n_in);
    const std::vector<Array> want = evaluate(r, args, interpreter());
    for (int which = 0; which < 2; ++which) {
      const Streamed got =
          run_fake(r, args, budgets[which], {.block = 32, .rows_per_thread = 2}, ++seed);
      const size_t budget = got.budget;
      ASSERT_TRUE(got.plan.streamed()) << r.str() << " budget " << budget;
      EXPECT_EQ(got.plan.inner_blocks > 1, which == 1) << r.str();
      EXPECT_LE(got.plan.device_bytes, budget);
      EXPECT_EQ(got.launches, got.plan.outer_blocks * got.plan.inner_blocks);
      EXPECT_GT(got.overlaps, 0) << r.str();
      for (size_t k = 0; k < want.size(); ++k) {
        std::vector<double> w(want[k].size());
        for (int64_t q = 0; q < want[k].size(); ++q) w[q] = want[k].at(q);
        const bool idx = r.output_is_index(static_cast<int>(k));
        expect_close(got.outs[k], w, idx ? 0 : tol, idx ? 0 : tol,
                     r.str() + " output " + std::to_string(k) + " budget " +
                         std::to_string(budget) + " (" + std::to_string(got.plan.outer_blocks) +
                         " x " + std::to_string(got.plan.inner_blocks) + " blocks)");
      }
    }
  }
}
