// A backend that records what it was asked to run and computes nothing (or, on request, computes
// on the CPU), and the device it stands in for: with it in a registry slot (see ScopedBackend), a
// test checks the engine's binding, planning and dispatch, and device paths without a GPU. Built
// into the tests' support library, not into libtessel.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"

namespace tessel {

// One run() as the backend saw it: the problem, copied, and the outputs it was given.
struct NullCall {
  ReductionOp op = ReductionOp::Sum;
  uint64_t hash_lo = 0, hash_hi = 0;  // of the reduction
  int64_t n_outer = 0, n_inner = 0;
  DType dtype = DType::Float32;
  int device = -1;
  int threads = 1;
  std::vector<Bound> vars;
  std::vector<RowBlock> blocks;
  std::vector<std::vector<int64_t>> out_shapes;
  std::vector<DType> out_dtypes;
};

// Both halves in one object: in the CUDA slot it is the backend for CUDA arrays and, through
// device(), the device that owns their memory, so one ScopedBackend swaps both.
class NullBackend final : public KernelBackend, public DeviceApi {
 public:
  // `accept` false: the backend declines every problem (run() returns false), as compiled code
  // does for reductions it has no kernel for. `compute`: run() computes the problem with the CPU
  // backends instead of writing call numbers, so that in the CUDA slot it stands in for a GPU
  // whose "device" memory is host memory (what runs on the device, and on which, is recorded).
  // `guarded` (with compute): that memory is guarded (guarded_memory.hpp), open only while one of
  // this backend's entry points runs, so that the engine's host code faults on any access to
  // device data that a real GPU would not allow; alloc_rows hands out guarded memory too.
  explicit NullBackend(bool accept = true, bool compute = false, bool guarded = false)
      : accept_(accept), compute_(compute), guarded_(guarded) {}
  const char* name() const override { return "null"; }

  // Records p and fills every output element with the number of this call (0, 1, ...), so that
  // a test can tell which call's result landed where.
  bool run(const Problem& p, std::span<const ArrayView> outs) override;
  DeviceApi* device() override { return this; }
  // "Device" outputs of a test are host memory: copied as such, and counted.
  void open_device(int device) override;
  void wait_for_stream(int device, void* stream) override;
  void store_rows(const Array& src, const ArrayView& dst) override;
  Array load_rows(const ArrayView& src) override;

  // In compute mode, results stay on the "device" as on a GPU: outputs written in place, device
  // scratch memory (host memory tagged CUDA) and adds there, each counted.
  bool writes_device_outputs() const override { return compute_; }
  DeviceRows alloc_rows(DType dtype, int64_t rows, int64_t cols, int device) override;
  void add_rows_device(const ArrayView& src, const ArrayView& dst) override;
  void sum_rows_device(const ArrayView& src, const ArrayView& dst) override;
  void convert_device(const ArrayView& src, const ArrayView& dst) override;
  void axpby_device(double a, const ArrayView& x, double b, const ArrayView& y) override;
  double dot_device(const ArrayView& x, const ArrayView& y) override;

  // What was recorded, read under the lock.
  std::vector<NullCall> calls() const { return locked(calls_); }
  std::vector<int> opened() const { return locked(opened_); }  // open_device arguments, in order
  // wait_for_stream arguments, in order
  std::vector<std::pair<int, void*>> waits() const { return locked(waits_); }
  int stores() const { return locked(stores_); }
  int loads() const { return locked(loads_); }
  int allocs() const { return locked(allocs_); }
  int adds() const { return locked(adds_); }
  int sums() const { return locked(sums_); }
  int converts() const { return locked(converts_); }
  int vector_ops() const { return locked(vector_ops_); }  // axpby_device and dot_device calls

 private:
  template <class T>
  T locked(const T& recorded) const {
    std::lock_guard lk(mu_);
    return recorded;
  }

  bool accept_, compute_, guarded_;
  mutable std::mutex mu_;
  std::vector<NullCall> calls_;
  std::vector<int> opened_;
  std::vector<std::pair<int, void*>> waits_;
  int stores_ = 0, loads_ = 0, allocs_ = 0, adds_ = 0, sums_ = 0, converts_ = 0, vector_ops_ = 0;
};

}  // namespace tessel
