// The CUDA backend's launch plans by (reduction, dtype, device, sizes, sum mode), bounded: the key
// holds the exact sizes, so a process that calls with ever new sizes would otherwise keep a plan
// (and its source) per size forever.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <tuple>

#include "backend/cuda/driver.hpp"
#include "backend/lru_map.hpp"
#include "codegen/cuda_codegen.hpp"

namespace tessel {

class CudaPlanTable {
 public:
  static constexpr size_t kDefaultCapacity = 256;
  explicit CudaPlanTable(size_t capacity = kDefaultCapacity) : plans_(capacity) {}

  // The plan for r on `dev`, made on a miss. Shared, so that a caller keeps it while another
  // thread's call evicts it.
  std::shared_ptr<const CudaKernelPlan> get(const ReductionImpl& r, bool f64, int64_t n_outer,
                                            int64_t n_inner, CudaSumMode sum,
                                            const CudaDevice& dev);

  size_t size() const;
  size_t capacity() const { return plans_.capacity(); }
  int64_t misses() const;  // plans made since construction
  void clear();

 private:
  using Key = std::tuple<uint64_t, uint64_t, bool, int, int64_t, int64_t, int>;
  mutable std::mutex mu_;
  LruMap<Key, std::shared_ptr<const CudaKernelPlan>> plans_;
  int64_t misses_ = 0;
};

}  // namespace tessel
