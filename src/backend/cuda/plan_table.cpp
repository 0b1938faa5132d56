// The CUDA launch plan table: a map for lookup and a list for the order of use.
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
    if (auto it = plans_.find(key); it != plans_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.age);
      return it->second.plan;
    }
  }
  // Planned outside the lock: it generates source, and other devices' calls need not wait.
  CudaDeviceCaps caps;
  caps.sm_count = dev.sm_count;
  caps.max_shared_per_block = static_cast<size_t>(std::max(dev.max_shared_per_block, 48 * 1024));
  auto plan = std::make_shared<const CudaKernelPlan>(
      plan_cuda_kernel(r, f64, n_outer, n_inner, caps, {}, sum));
  std::lock_guard lk(mu_);
  ++misses_;
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.plan;  // a racing call
  while (!lru_.empty() && plans_.size() >= std::max<size_t>(1, capacity_)) {
    plans_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(key);
  plans_.emplace(key, Entry{plan, lru_.begin()});
  return plan;
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
  lru_.clear();
}

}  // namespace tessel
