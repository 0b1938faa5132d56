// Guarded "device" memory for tests: host pages that fault on any access made outside a backend
// call, so that host code reading or writing device memory crashes on a machine without a GPU.
#pragma once

#include <cstddef>
#include <memory>

namespace tessel {

// `bytes` of guarded memory (at least one byte), its data ending where an always inaccessible
// page starts, so that a copy running past the end faults too; `*data` is where it starts
// (8-byte aligned). Unmapped with the last copy of the owner returned.
std::shared_ptr<void> guarded_alloc(size_t bytes, void** data);

// While one of these is alive (on any thread; they nest), every guarded region is readable and
// writable: what a backend does in its entry points, and what a test does to fill and read its
// device arrays. `active` false: does nothing (a backend that does not guard).
class GuardedAccess {
 public:
  explicit GuardedAccess(bool active = true);
  ~GuardedAccess();
  GuardedAccess(const GuardedAccess&) = delete;
  GuardedAccess& operator=(const GuardedAccess&) = delete;

 private:
  bool active_;
};

// Whether p lies in a guarded region (inaccessible end pages included): lets a fault handler
// say that a crash was a host access to device memory.
bool in_guarded_region(const void* p);

}  // namespace tessel
