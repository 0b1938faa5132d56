// Guarded test memory: a registry of mmap'd regions, protected together whenever no backend call
// (nor a test's own access) is in progress.
#include "support/guarded_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>

namespace tessel {

namespace {

struct Region {
  size_t open_bytes;   // the pages that hold data, opened while access is granted
  size_t total_bytes;  // those and the trailing page that never opens
};

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Region> regions;  // by base address
  int depth = 0;                        // live GuardedAccess objects
};

// Never destroyed: owners freed by static destructors still find it.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

void protect(uintptr_t base, const Region& g, bool open) {
  mprotect(reinterpret_cast<void*>(base), g.open_bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

}  // namespace

std::shared_ptr<void> guarded_alloc(size_t bytes, void** data) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t used = (std::max<size_t>(bytes, 1) + 7) / 8 * 8;
  const size_t open = (used + page - 1) / page * page, total = open + page;
  void* base = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) throw std::bad_alloc();
  const auto at = reinterpret_cast<uintptr_t>(base);
  Registry& reg = registry();
  {
    std::lock_guard lk(reg.mu);
    const Region& r = reg.regions[at] = Region{open, total};
    // Memory allocated inside a backend call (its scratch rows) is usable at once.
    if (reg.depth > 0) protect(at, r, true);
  }
  *data = reinterpret_cast<void*>(at + open - used);
  return std::shared_ptr<void>(base, [at, total](void*) {
    Registry& reg = registry();
    std::lock_guard lk(reg.mu);
    reg.regions.erase(at);
    munmap(reinterpret_cast<void*>(at), total);
  });
}

GuardedAccess::GuardedAccess(bool active) : active_(active) {
  if (!active_) return;
  Registry& reg = registry();
  std::lock_guard lk(reg.mu);
  if (reg.depth++ == 0)
    for (const auto& [base, g] : reg.regions) protect(base, g, true);
}

GuardedAccess::~GuardedAccess() {
  if (!active_) return;
  Registry& reg = registry();
  std::lock_guard lk(reg.mu);
  if (--reg.depth == 0)
    for (const auto& [base, g] : reg.regions) protect(base, g, false);
}

bool in_guarded_region(const void* p) {
  // No lock: called from a fault handler, which may interrupt a thread holding it. A torn read
  // of the map could only happen while regions are added or removed at the fault, a risk a
  // diagnostic can take.
  const auto a = reinterpret_cast<uintptr_t>(p);
  const Registry& reg = registry();
  auto it = reg.regions.upper_bound(a);
  if (it == reg.regions.begin()) return false;
  --it;
  return a < it->first + it->second.total_bytes;
}

}  // namespace tessel
