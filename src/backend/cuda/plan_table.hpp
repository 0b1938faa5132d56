// The CUDA backend's launch plans by (reduction, dtype, device, sizes, sum mode), least recently
// used first out: the key holds the exact sizes, so a process that calls with ever new sizes would
// otherwise keep a plan (and its source) per size forever.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "backend/cuda/driver.hpp"
#include "codegen/cuda_codegen.hpp"

namespace tessel {

class CudaPlanTable {
 public:
  static constexpr size_t kDefaultCapacity = 256;
  explicit CudaPlanTable(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // The plan for r on `dev`, made on a miss. Shared, so that a caller keeps it while another
  // thread's call evicts it.
  std::shared_ptr<const CudaKernelPlan> get(const ReductionImpl& r, bool f64, int64_t n_outer,
                                            int64_t n_inner, CudaSumMode sum,
                                            const CudaDevice& dev);

  size_t size() const;
  size_t capacity() const { return capacity_; }
  int64_t misses() const;  // plans made since construction
  void clear();

 private:
  using Key = std::tuple<uint64_t, uint64_t, bool, int, int64_t, int64_t, int>;
  struct Entry {
    std::shared_ptr<const CudaKernelPlan> plan;
    std::list<Key>::iterator age;  // position in lru_, most recent at the front
  };
  size_t capacity_;
  mutable std::mutex mu_;
  std::map<Key, Entry> plans_;
  std::list<Key> lru_;
  int64_t misses_ = 0;
};

}  // namespace tessel
