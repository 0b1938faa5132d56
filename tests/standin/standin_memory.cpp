// The stand-in's memory: device allocations as doubly mapped memfds, pinned host memory, and
// host ranges adopted as device memory; what any address is, for copies and pointer attributes.
//
// An allocation's device view is PROT_NONE, so host code that dereferences a device pointer
// faults (AddressSanitizer reports it as a SEGV with the stack). The alias, a second shared
// mapping of the same memfd, is what copies and kernel arguments use. Both sit between PROT_NONE
// guard pages; the data starts 16-byte aligned (the widest vector load a kernel makes) and ends
// within 15 bytes of the guard page after it, so an overflow past the end faults. (CUDA's own
// 256-byte alignment would leave up to 255 unguarded bytes after an odd-sized buffer.)
// Kernels that read a device pointer stored in device memory (a table of pointers) cannot have
// it translated to the alias: the fault handler opens that allocation's device view for the
// kernel's threads, and the launch closes it again when the kernel ends.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "standin.hpp"

namespace tessel::standin {

namespace {

struct Alloc {
  int device = 0;
  size_t bytes = 0, span = 0;
  char* view = nullptr;   // the reserved device-view range, guard pages included
  char* alias = nullptr;  // likewise for the alias
  uintptr_t data = 0;     // the device pointer
  int slot = -1;          // its entry in the fault handler's table
};
struct Adopted {
  uintptr_t end = 0;
  int device = 0;
};

// Device views the fault handler may open for a kernel thread; read without locks.
struct ViewSlot {
  std::atomic<uintptr_t> begin{0}, end{0};  // the pages of the view; 0: unused
  std::atomic<bool> open{false};
};
constexpr int kSlots = 8192;
ViewSlot g_views[kSlots];
thread_local bool t_in_kernel = false;
struct sigaction g_previous_segv;

struct Table {
  std::mutex mu;
  std::map<uintptr_t, Alloc> allocs;      // by device pointer
  std::map<uintptr_t, Adopted> adopted;   // by start
  std::map<uintptr_t, uintptr_t> pinned;  // start -> end
  std::vector<size_t> used;               // bytes allocated per device
};
Table& table() {
  static Table* t = new Table();  // kept for the process: static destructors may still free
  return *t;
}
size_t page() {
  static const size_t p = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

void on_segv(int sig, siginfo_t* si, void* uc) {
  const auto a = reinterpret_cast<uintptr_t>(si->si_addr);
  if (t_in_kernel)
    for (ViewSlot& s : g_views) {
      const uintptr_t b = s.begin.load(std::memory_order_acquire);
      if (b == 0 || a < b || a >= s.end.load(std::memory_order_acquire)) continue;
      ::mprotect(reinterpret_cast<void*>(b), s.end.load() - b, PROT_READ | PROT_WRITE);
      s.open.store(true, std::memory_order_release);
      return;  // the access runs again, now on the opened view
    }
  // Not ours: whoever handled SIGSEGV before (a sanitizer, the emulator's guard pages, the
  // default action) sees the fault as if we were not there.
  if (g_previous_segv.sa_flags & SA_SIGINFO) {
    g_previous_segv.sa_sigaction(sig, si, uc);
  } else if (g_previous_segv.sa_handler != SIG_IGN && g_previous_segv.sa_handler != SIG_DFL) {
    g_previous_segv.sa_handler(sig);
  } else {
    ::signal(SIGSEGV, SIG_DFL);  // returning re-runs the access, which now ends the process
  }
}

// Reserves `span` bytes between guard pages and maps the memfd over the middle.
char* map_between_guards(int fd, size_t span, int prot) {
  void* base = ::mmap(nullptr, span + 2 * page(), PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  char* b = static_cast<char*>(base);
  if (::mmap(b + page(), span, prot, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    ::munmap(base, span + 2 * page());
    return nullptr;
  }
  return b;
}

template <class Map>
auto containing(Map& m, uintptr_t p) {
  auto it = m.upper_bound(p);
  return it == m.begin() ? m.end() : std::prev(it);
}

}  // namespace

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGSEGV, &sa, &g_previous_segv);
  });
}

void set_in_kernel(bool on) { t_in_kernel = on; }

void close_opened_views() {
  for (ViewSlot& s : g_views)
    if (s.open.exchange(false)) {
      const uintptr_t b = s.begin.load();
      if (b) ::mprotect(reinterpret_cast<void*>(b), s.end.load() - b, PROT_NONE);
    }
}

int mem_alloc(uint64_t* out, size_t bytes, int device) {
  if (!out || bytes == 0) return kInvalidValue;
  Table& t = table();
  std::lock_guard lk(t.mu);
  t.used.resize(devices().size(), 0);
  if (bytes > devices()[device].memory - t.used[device]) return kOutOfMemory;
  Alloc a;
  a.device = device;
  a.bytes = bytes;
  const size_t padded = (bytes + 15) / 16 * 16;
  a.span = (padded + page() - 1) / page() * page();
  const int fd = ::memfd_create("tessel-standin", MFD_CLOEXEC);
  if (fd < 0) return kOutOfMemory;
  if (::ftruncate(fd, static_cast<off_t>(a.span)) == 0) {
    a.view = map_between_guards(fd, a.span, PROT_NONE);
    a.alias = map_between_guards(fd, a.span, PROT_READ | PROT_WRITE);
  }
  ::close(fd);  // the mappings keep the memory
  if (!a.view || !a.alias) {
    if (a.view) ::munmap(a.view, a.span + 2 * page());
    if (a.alias) ::munmap(a.alias, a.span + 2 * page());
    return kOutOfMemory;
  }
  a.data = reinterpret_cast<uintptr_t>(a.view + page() + a.span - padded);
  for (int k = 0; k < kSlots; ++k)
    if (g_views[k].begin.load() == 0) {
      g_views[k].end.store(reinterpret_cast<uintptr_t>(a.view + page() + a.span));
      g_views[k].begin.store(reinterpret_cast<uintptr_t>(a.view + page()));
      a.slot = k;
      break;
    }
  t.used[device] += bytes;
  *out = a.data;
  t.allocs.emplace(a.data, a);
  return kSuccess;
}

int mem_free(uint64_t p) {
  Table& t = table();
  Alloc a;
  {
    std::lock_guard lk(t.mu);
    auto it = t.allocs.find(p);
    if (it == t.allocs.end()) return kInvalidValue;  // not the start of a live allocation
    a = it->second;
    t.allocs.erase(it);
    t.used[a.device] -= a.bytes;
  }
  if (a.slot >= 0) {
    g_views[a.slot].begin.store(0);
    g_views[a.slot].open.store(false);
  }
  ::munmap(a.view, a.span + 2 * page());
  ::munmap(a.alias, a.span + 2 * page());
  return kSuccess;
}

int host_alloc(void** out, size_t bytes) {
  if (!out) return kInvalidValue;
  void* p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  if (!p) return kOutOfMemory;
  Table& t = table();
  std::lock_guard lk(t.mu);
  t.pinned[reinterpret_cast<uintptr_t>(p)] = reinterpret_cast<uintptr_t>(p) + bytes;
  *out = p;
  return kSuccess;
}

int host_free(void* p) {
  Table& t = table();
  {
    std::lock_guard lk(t.mu);
    if (!t.pinned.erase(reinterpret_cast<uintptr_t>(p))) return kInvalidValue;
  }
  std::free(p);
  return kSuccess;
}

int adopt(void* p, size_t bytes, int device) {
  if (!p || bytes == 0 || device < 0 || device >= static_cast<int>(devices().size()))
    return kInvalidValue;
  const auto b = reinterpret_cast<uintptr_t>(p), e = b + bytes;
  Table& t = table();
  std::lock_guard lk(t.mu);
  for (auto it = t.adopted.begin(); it != t.adopted.end();)  // overlapping older ones go
    it = it->first < e && b < it->second.end ? t.adopted.erase(it) : std::next(it);
  t.adopted[b] = Adopted{e, device};
  return kSuccess;
}

int release(void* p) {
  Table& t = table();
  std::lock_guard lk(t.mu);
  return t.adopted.erase(reinterpret_cast<uintptr_t>(p)) ? kSuccess : kInvalidValue;
}

Region classify(const void* ptr) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  Table& t = table();
  std::lock_guard lk(t.mu);
  Region r;
  if (auto it = containing(t.allocs, p); it != t.allocs.end() && p < it->first + it->second.bytes) {
    const Alloc& a = it->second;
    return Region{Kind::Device, a.device, a.data, a.data + a.bytes,
                  a.alias + (a.data - reinterpret_cast<uintptr_t>(a.view))};
  }
  if (auto it = containing(t.adopted, p); it != t.adopted.end() && p < it->second.end)
    return Region{Kind::Device, it->second.device, it->first, it->second.end,
                  reinterpret_cast<char*>(it->first)};
  if (auto it = containing(t.pinned, p); it != t.pinned.end() && p < it->second)
    return Region{Kind::Pinned, -1, it->first, it->second, reinterpret_cast<char*>(it->first)};
  r.begin = p;
  r.host = const_cast<char*>(static_cast<const char*>(ptr));
  return r;
}

char* device_alias(uintptr_t p, size_t bytes, int* device) {
  const Region r = classify(reinterpret_cast<const void*>(p));
  if (r.kind != Kind::Device || bytes > r.end - p) return nullptr;
  if (device) *device = r.device;
  return r.host + (p - r.begin);
}

}  // namespace tessel::standin
