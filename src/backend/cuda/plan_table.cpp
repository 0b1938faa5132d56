// The CUDA launch plan table: plans made outside the lock, kept in a bounded map.
#include "backend/cuda/plan_table.hpp"

#include <algorithm>

namespace tessel {

std::shared_ptr<const CudaKernelPlan> CudaPlanTable::get(const ReductionImpl& r, bool f64,
                                                         int64_t n_outer, int64_t n_inner,
                                                         CudaSumMode sum, const CudaDevice& dev) {
  const int sum_mode = static_cast<int>(sum.scheme) * 2 + sum.acc_f64;
  const Key key = std::make_tuple(r.hash.lo, r.hash.hi, f64, dev.index, n_outer, n_inner, sum_mode);
  {
    std::lock_guard lk(mu_);
    if (auto* have = plans_.find(key)) return *have;
  }
  // Planned outside the lock: it generates source, and other devices' calls need not wait.
  CudaDeviceCaps caps;
  caps.sm_count = dev.sm_count;
  caps.max_shared_per_block = static_cast<size_t>(std::max(dev.max_shared_per_block, 48 * 1024));
  auto plan = std::make_shared<const CudaKernelPlan>(
      plan_cuda_kernel(r, f64, n_outer, n_inner, caps, {}, sum));
  std::lock_guard lk(mu_);
  ++misses_;
  return plans_.insert(key, std::move(plan));  // a racing call's plan, if it came first
}

size_t CudaPlanTable::size() const {
  std::lock_guard lk(mu_);
  return plans_.size();
}

int64_t CudaPlanTable::misses() const {
  std::lock_guard lk(mu_);
  return misses_;
}

void CudaPlanTable::clear() {
  std::lock_guard lk(mu_);
  plans_.clear();
}

}  // namespace tessel
