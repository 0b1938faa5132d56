// The CUDA emulator's host side: source rewriting, compilation, and the block/thread launcher.
//
// A block's threads are fibers that meet in a barrier of our own rather than real threads at a
// std::barrier: a deadlock has to fail the test (found at once: a round in which no thread can go
// on), threads that arrive at different __syncthreads or exit while others wait have to be
// noticed, and __syncthreads_count needs its predicate count. Warp intrinsics are rendezvous of
// the lanes named in their mask, with the same checks.
#include "cuda_emulator.hpp"

#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <system_error>
#include <vector>

#include "cache/compiler.hpp"
#include "cache/disk_cache.hpp"
#include "ir/node.hpp"
#include "tessel/error.hpp"
#include "tessel/runtime.hpp"

// Sanitizers must be told when a stack is switched in user space (see Fibers).
#if defined(__SANITIZE_ADDRESS__)
#define TESSEL_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define TESSEL_EMU_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSEL_EMU_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define TESSEL_EMU_TSAN 1
#endif
#endif
extern "C" {
#ifdef TESSEL_EMU_ASAN
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old,
                                     size_t* size_old);
#endif
#ifdef TESSEL_EMU_TSAN
void* __tsan_get_current_fiber();
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
#endif
}

namespace tessel::emu {

const char* shim_source();  // cuda_emulator_shim.cpp

namespace {

// What the shim's tessel_emu_thread holds, in the same layout (checked through tessel_emu_abi).
struct ThreadCtx {
  unsigned tid[3], bid[3], bdim[3], gdim[3];
  unsigned linear;
  unsigned char* smem;
  void* block;
  int (*sync)(void*, unsigned, int, int);
  void (*exchange)(void*, unsigned, unsigned, unsigned long long, unsigned long long*, int);
  void* (*static_smem)(void*, int, unsigned long long);
  void (*trap)(void*, unsigned, const char*, int);
};

// Unwinds a thread out of the kernel once its block has failed; never escapes launch().
struct BlockAbort {};

const CacheKind kEmuCache{"cuda-emu", ".so", ".cpp"};
const std::vector<std::string> kFlags = {
    "-std=c++17", "-O1", "-shared", "-fPIC", "-w", "-ffp-contract=off", "-pthread", "-fexceptions"};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// `extern __shared__ T s[];` becomes a pointer to the block's dynamic buffer, and a static
// `__shared__ T s[N]...;` a reference to a per-block allocation; newlines are kept so that line
// numbers in messages still match the CUDA source.
std::string rewrite_shared(const std::string& cuda) {
  static const std::regex decl_re(R"((extern\s+)?__shared__\s+([^;={}]*?)\s*;)");
  static const std::regex align_re(R"((__align__|alignas)\s*\(\s*\w+\s*\))");
  static const std::regex parts_re(R"(^([\s\S]*?)([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*)$)");
  std::string out;
  int next_id = 0;
  auto last = cuda.cbegin();
  for (std::sregex_iterator it(cuda.begin(), cuda.end(), decl_re), end; it != end; ++it) {
    const std::smatch& m = *it;
    out.append(last, m[0].first);
    last = m[0].second;
    const std::string decl = trim(std::regex_replace(m[2].str(), align_re, ""));
    std::smatch p;
    if (!std::regex_match(decl, p, parts_re) || trim(p[1].str()).empty()) {
      out += m[0].str();  // left to the shim's macro, which reports it
      continue;
    }
    const std::string type = trim(p[1].str()), name = p[2].str(), dims = trim(p[3].str());
    if (m[1].matched) {
      if (dims != "[]") {
        out += m[0].str();
        continue;
      }
      out += type + "* const " + name + " = (" + type + "*)tessel_emu_t_->smem;";
    } else {
      out += type + " (&" + name + ")" + dims + " = *(" + type + " (*)" + dims +
             ")tessel_emu_t_->static_smem(tessel_emu_t_->block, " + std::to_string(next_id++) +
             ", sizeof(" + type + " " + dims + "));";
    }
    out.append(static_cast<size_t>(std::count(m[0].first, m[0].second, '\n')), '\n');
  }
  out.append(last, cuda.cend());
  return out;
}

// The `extern "C" __global__` functions of the source (name, launch bound), and the trampolines
// that call each with an argument array, appended after the source.
std::vector<KernelEntry> find_kernels(const std::string& cuda, std::string& trampolines) {
  static const std::regex re(
      R"re(extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\(\s*(\d+)[^)]*\)\s*)?([A-Za-z_]\w*)\s*\()re");
  std::vector<KernelEntry> found;
  for (std::sregex_iterator it(cuda.begin(), cuda.end(), re), end; it != end; ++it) {
    KernelEntry k;
    k.name = (*it)[2].str();
    if ((*it)[1].matched) k.max_threads = static_cast<unsigned>(std::stoul((*it)[1].str()));
    const std::string vis = "extern \"C\" __attribute__((visibility(\"default\"))) ";
    trampolines += vis + "void tessel_emu_call_" + k.name + "(void** a) { tessel_emu_apply(" +
                   k.name + ", a); }\n" + vis + "int tessel_emu_params_" + k.name +
                   "(unsigned long* o, int cap) { return tessel_emu_params(" + k.name +
                   ", o, cap); }\n";
    found.push_back(std::move(k));
  }
  return found;
}

std::string who(unsigned t, const unsigned* bdim) {
  return "thread (" + std::to_string(t % bdim[0]) + "," + std::to_string(t / bdim[0] % bdim[1]) +
         "," + std::to_string(t / (bdim[0] * bdim[1])) + ")";
}

std::string hex(unsigned v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

class Block;

// A block's threads as fibers of the launching thread. __syncthreads and the warp intrinsics
// switch stacks in user space (swapcontext, well under a microsecond); with one real thread per
// CUDA thread each of them cost a futex wake and a context switch (a 1e4-point launch spent 90 %
// of its time in the kernel, 3 million switches). Blocks run one after another on the launching
// thread; the threads of a block take turns, each running until it waits or leaves the kernel.
class Fibers {
 public:
  Fibers(unsigned n, void (*bind)(const void*), const std::function<void()>& body);
  ~Fibers();
  Fibers(const Fibers&) = delete;
  Fibers& operator=(const Fibers&) = delete;

  // Runs every thread of `block` until all have left the kernel (normally or by an error).
  void run(Block& block, std::vector<ThreadCtx>& ctx);
  // From a thread that waits: back to the scheduler, which resumes the others.
  void yield();

 private:
  struct Fiber {
    ucontext_t uc{};
    char* stack = nullptr;
    bool done = true;
    void* fake = nullptr;  // ASan's fake stack while the fiber is switched out
    void* tsan = nullptr;  // TSan's state for the fiber
  };
  static void entry();
  void body_of(unsigned t);
  [[noreturn]] void leave();
  void resume(unsigned t);

  const unsigned n_;
  void (*bind_)(const void*);
  const std::function<void()>& body_;
  std::vector<Fiber> fibers_;
  ucontext_t main_{};
  const void* main_bottom_ = nullptr;  // the launching thread's stack, for ASan
  size_t main_size_ = 0;
  void* main_tsan_ = nullptr;
  unsigned current_ = 0;
  Block* block_ = nullptr;
  std::vector<ThreadCtx>* ctx_ = nullptr;
};

// The state one block's threads share: barrier, warp rendezvous, static shared memory. Only the
// fibers of one launching thread touch it, one at a time, so it needs no lock.
class Block {
 public:
  Block(const LaunchConfig& cfg, unsigned n, const unsigned* bdim, Fibers& fibers)
      : n_(n),
        bdim_(bdim),
        fibers_(fibers),
        done_(n, 0),
        warps_((n + 31) / 32),
        smem_(cfg.dynamic_smem, 16, "extern __shared__ memory") {
    std::memset(smem_.data(), 0xff, smem_.size());  // NaN as float and double: unwritten reads show
  }

  unsigned char* smem() const { return smem_.as<unsigned char>(); }
  // Counts arrivals and exits: a round of the scheduler that leaves it unchanged is a deadlock.
  uint64_t progress() const { return progress_; }

  int sync(unsigned t, int line, int pred) {
    check_alive(t, line, true);
    if (arrived_ == 0) line_ = line;
    if (line != line_)
      fail(who(t, bdim_) + " reached __syncthreads at line " + std::to_string(line) + " while " +
           std::to_string(arrived_) + " threads wait at the one at line " + std::to_string(line_) +
           " (divergent barriers)");
    ++arrived_;
    ++progress_;
    count_ += pred;
    if (arrived_ == n_) {
      result_ = count_;
      arrived_ = 0;
      count_ = 0;
      ++gen_;
      return result_;
    }
    const uint64_t gen = gen_;
    wait([&] { return gen_ != gen; });
    return result_;  // the next barrier cannot complete before this thread arrives at it
  }

  void exchange(unsigned t, unsigned mask, unsigned long long v, unsigned long long* all,
                int line) {
    const unsigned lane = t % 32, w = t / 32;
    const unsigned lanes = std::min(32u, n_ - 32 * w);
    const unsigned exists = lanes == 32 ? ~0u : (1u << lanes) - 1;
    check_alive(t, line, false);
    // Built only when a check fails: this runs for every lane of every shuffle.
    auto where = [line] { return "the warp intrinsic at line " + std::to_string(line); };
    if (!((mask >> lane) & 1u))
      fail(who(t, bdim_) + " calls " + where() + " with mask " + hex(mask) +
           ", which leaves it out");
    if (mask & ~exists)
      fail(where() + " names lanes " + hex(mask & ~exists) + " of warp " + std::to_string(w) +
           " that do not exist (the block has " + std::to_string(n_) + " threads)");
    for (unsigned l = 0; l < 32; ++l)
      if (((mask >> l) & 1u) && done_[32 * w + l])
        fail(where() + ": lane " + std::to_string(l) + " of its mask has already exited");
    Group& g = warps_[w][mask];
    if (g.arrived == 0) g.line = line;
    if (g.line != line)
      fail(who(t, bdim_) + " reached " + where() + " while lanes of its mask wait at line " +
           std::to_string(g.line));
    g.vals[lane] = v;
    ++progress_;
    if (++g.arrived == static_cast<unsigned>(__builtin_popcount(mask))) {
      std::memcpy(g.snap, g.vals, sizeof g.vals);
      g.arrived = 0;
      ++g.gen;
    } else {
      const uint64_t gen = g.gen;
      wait([&] { return g.gen != gen; });
    }
    std::memcpy(all, g.snap, sizeof g.snap);
  }

  void* static_smem(int id, size_t bytes) {
    auto& b = statics_[id];
    if (!b) {
      b = std::make_unique<GuardedBuffer>(bytes, 16, "static __shared__ #" + std::to_string(id));
      std::memset(b->data(), 0xff, bytes);
    }
    return b->data();
  }

  [[noreturn]] void trap(unsigned t, const char* what, int line) {
    fail(who(t, bdim_) + ": " + what + " at line " + std::to_string(line));
  }

  // A thread left the kernel (normally or not): peers waiting for it would wait forever.
  void exited(unsigned t, const std::string& error) {
    if (!error.empty() && error_.empty()) error_ = who(t, bdim_) + ": " + error;
    if (error.empty() && !aborted_ && arrived_ > 0)
      record(who(t, bdim_) + " exited while " + std::to_string(arrived_) +
             " threads wait at __syncthreads at line " + std::to_string(line_));
    for (const auto& [mask, g] : warps_[t / 32])
      if (error.empty() && !aborted_ && g.arrived > 0 && ((mask >> (t % 32)) & 1u))
        record(who(t, bdim_) +
               " exited while lanes of its warp wait for it at the warp intrinsic "
               "at line " +
               std::to_string(g.line));
    if (!error.empty()) aborted_ = true;
    done_[t] = 1;
    ++n_done_;
    ++progress_;
  }

  // Every thread still in the kernel waits for one that never arrives: the block fails, and
  // the waiting threads unwind when next resumed.
  void deadlock() {
    unsigned at_warps = 0;
    std::string lines;
    for (const auto& warp : warps_)
      for (const auto& [mask, g] : warp)
        if (g.arrived > 0) {
          at_warps += g.arrived;
          lines += (lines.empty() ? " (line " : ", ") + std::to_string(g.line);
        }
    if (!lines.empty()) lines += ")";
    record("no thread can go on: " + std::to_string(arrived_) + " of " + std::to_string(n_) +
           " threads wait at __syncthreads" +
           (arrived_ > 0 ? " (line " + std::to_string(line_) + ")" : std::string()) + ", " +
           std::to_string(at_warps) + " at warp intrinsics" + lines + ", " +
           std::to_string(n_done_) + " exited; the others they wait for never arrive (deadlock)");
  }

  std::string error() const { return error_; }

 private:
  struct Group {
    unsigned arrived = 0;
    int line = 0;
    uint64_t gen = 0;
    unsigned long long vals[32] = {}, snap[32] = {};
  };

  void record(const std::string& why) {
    if (error_.empty()) error_ = why;
    aborted_ = true;
  }
  [[noreturn]] void fail(const std::string& why) {
    record(why);
    throw BlockAbort{};
  }
  // Before a barrier (whole_block) or a warp intrinsic at `line`.
  void check_alive(unsigned t, int line, bool whole_block) {
    if (aborted_) throw BlockAbort{};
    if (whole_block && n_done_ > 0)
      fail(who(t, bdim_) + " reached __syncthreads at line " + std::to_string(line) + " after " +
           std::to_string(n_done_) +
           " threads of its block exited (a barrier not every thread reaches)");
  }
  template <class Pred>
  void wait(Pred done) {
    while (!done()) {
      if (aborted_) throw BlockAbort{};
      fibers_.yield();
    }
  }

  const unsigned n_;
  const unsigned* bdim_;
  Fibers& fibers_;
  bool aborted_ = false;
  std::string error_;
  unsigned arrived_ = 0, n_done_ = 0;
  int line_ = 0, count_ = 0, result_ = 0;
  uint64_t gen_ = 0, progress_ = 0;
  std::vector<char> done_;
  std::vector<std::map<unsigned, Group>> warps_;
  std::map<int, std::unique_ptr<GuardedBuffer>> statics_;
  GuardedBuffer smem_;
};

int sync_cb(void* b, unsigned t, int line, int pred) {
  return static_cast<Block*>(b)->sync(t, line, pred);
}
void exchange_cb(void* b, unsigned t, unsigned mask, unsigned long long v, unsigned long long* all,
                 int line) {
  static_cast<Block*>(b)->exchange(t, mask, v, all, line);
}
void* static_smem_cb(void* b, int id, unsigned long long bytes) {
  return static_cast<Block*>(b)->static_smem(id, bytes);
}
void trap_cb(void* b, unsigned t, const char* what, int line) {
  static_cast<Block*>(b)->trap(t, what, line);
}

void check_config(const LaunchConfig& c) {
  const Dim3 &g = c.grid, &b = c.block;
  const uint64_t threads = uint64_t{b.x} * b.y * b.z;
  auto bad = [](const std::string& m) {
    throw EmulationError("invalid launch configuration: " + m);
  };
  if (g.x == 0 || g.y == 0 || g.z == 0) bad("a grid dimension is 0");
  if (g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) bad("grid too large");
  if (threads == 0 || threads > 1024 || b.z > 64)
    bad(std::to_string(threads) + " threads per block");
  if (c.dynamic_smem > c.smem_limit)
    bad(std::to_string(c.dynamic_smem) + " bytes of dynamic shared memory exceed the limit of " +
        std::to_string(c.smem_limit) + " (cudaFuncSetAttribute would be needed)");
}

}  // namespace

std::string unavailable_reason() {
  const CompilerInfo cc = compiler_info();
  return cc.usable ? std::string() : cc.problem;
}

Module::Module(const std::string& cuda_source) {
  std::string trampolines;
  kernels_ = find_kernels(cuda_source, trampolines);
  source_ = std::string(shim_source()) + "#line 1 \"tessel_kernel.cu\"\n" +
            rewrite_shared(cuda_source) + "\n" + trampolines;
  const CompilerInfo cc = compiler_info();
  if (!cc.usable) detail::fail("emu::Module", "no usable C++ compiler: ", cc.problem);
  std::string key_text = source_;
  for (const std::string& f : kFlags) key_text += "\n" + f;
  const std::string key = hash_bytes(key_text + "\n" + compiler_identity()).hex();
  DiskCache& cache = DiskCache::instance(kEmuCache);
  source_path_ = cache.files(key).source_path;
  const std::string so =
      cache.get_or_build(key, source_, [&](const std::string& src, const std::string& out) {
        std::vector<std::string> args = kFlags;
        args.insert(args.end(), {"-o", out, src, "-lm"});
        run_compiler(cc.path, args, src + ".log");
      });
  handle_.reset(::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (!handle_) detail::fail("emu::Module", "cannot load ", so, ": ", ::dlerror());
  bind_ = reinterpret_cast<void (*)(const void*)>(symbol("tessel_emu_bind"));
  auto abi = reinterpret_cast<unsigned long (*)()>(symbol("tessel_emu_abi"));
  if (abi() != sizeof(ThreadCtx))
    detail::fail("emu::Module", "the shim's thread context has ", abi(), " bytes, the launcher's ",
                 sizeof(ThreadCtx));
  for (KernelEntry& k : kernels_) {
    k.call = reinterpret_cast<void (*)(void**)>(symbol(("tessel_emu_call_" + k.name).c_str()));
    auto params = reinterpret_cast<int (*)(unsigned long*, int)>(
        symbol(("tessel_emu_params_" + k.name).c_str()));
    unsigned long p[64];
    const int n = params(p, 64);
    if (n > 64) detail::fail("emu::Module", "kernel ", k.name, " has more than 64 parameters");
    for (int i = 0; i < n; ++i) {
      k.param_bytes.push_back(static_cast<size_t>(p[i] & ~(1ul << 63)));
      k.param_is_pointer.push_back((p[i] >> 63) != 0);
    }
  }
}

const KernelEntry* Module::find(const std::string& name) const {
  for (const KernelEntry& k : kernels_)
    if (k.name == name) return &k;
  return nullptr;
}

void Module::Unload::operator()(void* handle) const { ::dlclose(handle); }

void* Module::symbol(const char* name) const {
  void* p = ::dlsym(handle_.get(), name);
  if (!p) detail::fail("emu::Module", "the emulated kernel has no symbol ", name);
  return p;
}

// ---- fibers -------------------------------------------------------------------------------------
namespace {

constexpr size_t kStackBytes = 256 * 1024;

size_t page_bytes() {
  static const size_t p = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

// Fiber stacks, kept by the launching thread for its next launches: mapping up to 1024 stacks and
// their guard pages for every launch would cost more than a small launch itself. A guard page
// below each stack makes an overflow fault instead of running into the neighbour's stack.
class Stacks {
 public:
  ~Stacks() {
    if (base_) ::munmap(base_, count_ * slot());
  }
  void reserve(unsigned n) {
    if (n <= count_) return;
    if (base_) ::munmap(base_, count_ * slot());
    base_ = nullptr;
    count_ = 0;
    void* m = ::mmap(nullptr, n * slot(), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED)
      throw EmulationError("cannot map the stacks of " + std::to_string(n) + " threads");
    base_ = static_cast<char*>(m);
    count_ = n;
    for (unsigned t = 0; t < n; ++t) ::mprotect(base_ + t * slot(), page_bytes(), PROT_NONE);
  }
  char* bottom(unsigned t) const { return base_ + t * slot() + page_bytes(); }

 private:
  static size_t slot() { return kStackBytes + page_bytes(); }
  char* base_ = nullptr;
  unsigned count_ = 0;
};

thread_local Stacks t_stacks;
thread_local Fibers* t_fibers = nullptr;  // the scheduler running on this thread, for entry()

}  // namespace

Fibers::Fibers(unsigned n, void (*bind)(const void*), const std::function<void()>& body)
    : n_(n), bind_(bind), body_(body), fibers_(n) {
  t_stacks.reserve(n);
  for (unsigned t = 0; t < n; ++t) fibers_[t].stack = t_stacks.bottom(t);
#ifdef TESSEL_EMU_TSAN
  main_tsan_ = __tsan_get_current_fiber();
  for (Fiber& f : fibers_) f.tsan = __tsan_create_fiber(0);
#endif
}

Fibers::~Fibers() {
#ifdef TESSEL_EMU_TSAN
  for (Fiber& f : fibers_) __tsan_destroy_fiber(f.tsan);
#endif
}

void Fibers::run(Block& block, std::vector<ThreadCtx>& ctx) {
  block_ = &block;
  ctx_ = &ctx;
  t_fibers = this;
  for (Fiber& f : fibers_) {
    f.done = false;
    f.fake = nullptr;
    ::getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = f.stack;
    f.uc.uc_stack.ss_size = kStackBytes;
    f.uc.uc_link = nullptr;  // entry() never returns: it switches back itself
    ::makecontext(&f.uc, &Fibers::entry, 0);
  }
  for (unsigned live = n_; live > 0;) {
    const uint64_t before = block.progress();
    for (unsigned t = 0; t < n_; ++t)
      if (!fibers_[t].done) resume(t);
    live = static_cast<unsigned>(
        std::count_if(fibers_.begin(), fibers_.end(), [](const Fiber& f) { return !f.done; }));
    if (live > 0 && block.progress() == before) block.deadlock();
  }
  t_fibers = nullptr;
}

// Sanitizers are told of each switch: ASan keeps stack bounds and fake stacks per stack, TSan its
// state per fiber (switching with synchronisation: the emulated threads take turns).
void Fibers::resume(unsigned t) {
  current_ = t;
  bind_(&(*ctx_)[t]);
  Fiber& f = fibers_[t];
#ifdef TESSEL_EMU_TSAN
  __tsan_switch_to_fiber(f.tsan, 0);
#endif
#ifdef TESSEL_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
  ::swapcontext(&main_, &f.uc);
#ifdef TESSEL_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void Fibers::yield() {
  Fiber& f = fibers_[current_];
#ifdef TESSEL_EMU_TSAN
  __tsan_switch_to_fiber(main_tsan_, 0);
#endif
#ifdef TESSEL_EMU_ASAN
  __sanitizer_start_switch_fiber(&f.fake, main_bottom_, main_size_);
#endif
  ::swapcontext(&f.uc, &main_);
#ifdef TESSEL_EMU_ASAN
  __sanitizer_finish_switch_fiber(f.fake, &main_bottom_, &main_size_);
#endif
}

void Fibers::entry() {
  Fibers* self = t_fibers;
#ifdef TESSEL_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &self->main_bottom_, &self->main_size_);
#endif
  self->body_of(self->current_);
  self->leave();
}

// Runs the kernel on thread t; everything it allocated is gone when it returns, as leave() never
// unwinds the fiber's stack.
void Fibers::body_of(unsigned t) {
  std::string error;
  try {
    body_();
  } catch (const BlockAbort&) {
    error = "aborted";
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "an exception that is not a std::exception";
  }
  fibers_[t].done = true;
  block_->exited(t, error);
}

void Fibers::leave() {
#ifdef TESSEL_EMU_TSAN
  __tsan_switch_to_fiber(main_tsan_, 0);
#endif
#ifdef TESSEL_EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, main_bottom_, main_size_);  // frees its fake stack
#endif
  ::setcontext(&main_);
  std::abort();  // setcontext returns only on failure
}

void Module::launch(const LaunchConfig& cfg, const std::function<void()>& body) const {
  check_config(cfg);
  const unsigned bdim[3] = {cfg.block.x, cfg.block.y, cfg.block.z};
  const unsigned n = bdim[0] * bdim[1] * bdim[2];
  Fibers fibers(n, bind_, body);
  for (unsigned bz = 0; bz < cfg.grid.z; ++bz)
    for (unsigned by = 0; by < cfg.grid.y; ++by)
      for (unsigned bx = 0; bx < cfg.grid.x; ++bx) {
        Block block(cfg, n, bdim, fibers);
        std::vector<ThreadCtx> ctx(n);
        for (unsigned t = 0; t < n; ++t)
          ctx[t] = ThreadCtx{{t % bdim[0], t / bdim[0] % bdim[1], t / (bdim[0] * bdim[1])},
                             {bx, by, bz},
                             {bdim[0], bdim[1], bdim[2]},
                             {cfg.grid.x, cfg.grid.y, cfg.grid.z},
                             t,
                             block.smem(),
                             &block,
                             sync_cb,
                             exchange_cb,
                             static_smem_cb,
                             trap_cb};
        fibers.run(block, ctx);
        const std::string error = block.error();
        if (!error.empty())
          throw EmulationError("block (" + std::to_string(bx) + "," + std::to_string(by) + "," +
                               std::to_string(bz) + "): " + error + " [source: " + source_path_ +
                               "]");
      }
}

// ---- guarded buffers ----------------------------------------------------------------------------
namespace {

// Guard pages of live buffers, read by the SIGSEGV handler (which may not lock or allocate).
struct GuardSlot {
  std::atomic<bool> used{false};
  uintptr_t before = 0, after = 0, data = 0, end = 0;  // guard pages start at before / after
  char name[64] = {};
};
constexpr int kSlots = 512;
GuardSlot g_slots[kSlots];
std::mutex g_slots_mu;
size_t g_page = 4096;
struct sigaction g_previous;

void put(const char* s) { (void)!::write(2, s, std::strlen(s)); }
void put_num(uint64_t v) {
  char b[24];
  int n = 0;
  do b[n++] = static_cast<char>('0' + v % 10);
  while (v /= 10);
  for (int k = 0; k < n / 2; ++k) std::swap(b[k], b[n - 1 - k]);
  (void)!::write(2, b, n);
}

void on_segv(int, siginfo_t* si, void*) {
  // Many kernel threads may fault at once: one reports, the others give it time to finish.
  static std::atomic<bool> reporting{false};
  if (reporting.exchange(true)) {
    const timespec pause{1, 0};
    ::nanosleep(&pause, nullptr);
    return;
  }
  const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  for (GuardSlot& s : g_slots) {
    if (!s.used.load(std::memory_order_acquire)) continue;
    const bool past = a >= s.after && a < s.after + g_page;
    const bool before = a >= s.before && a < s.before + g_page;
    if (!past && !before) continue;
    put("\n[CUDA emulator] out-of-bounds access at byte offset ");
    if (!past) put("-");
    put_num(past ? a - s.data : s.data - a);
    put(" of buffer '");
    put(s.name);
    put("' (");
    put_num(s.end - s.data);
    put(" bytes)\n");
    break;
  }
  ::sigaction(SIGSEGV, &g_previous, nullptr);  // returning re-runs the access: it faults as before
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGSEGV, &sa, &g_previous);
  });
}

}  // namespace

GuardedBuffer::GuardedBuffer(size_t bytes, size_t align, std::string name) : bytes_(bytes) {
  install_handler();
  const size_t span = (bytes + g_page - 1) / g_page * g_page;
  mapped_ = span + 2 * g_page;
  base_ = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base_ == MAP_FAILED) throw std::bad_alloc();
  char* b = static_cast<char*>(base_);
  ::mprotect(b, g_page, PROT_NONE);
  ::mprotect(b + g_page + span, g_page, PROT_NONE);
  const size_t padded = (bytes + align - 1) / align * align;
  data_ = b + g_page + span - padded;
  std::lock_guard lk(g_slots_mu);
  for (int k = 0; k < kSlots; ++k)
    if (!g_slots[k].used.load(std::memory_order_relaxed)) {
      GuardSlot& s = g_slots[k];
      s.before = reinterpret_cast<uintptr_t>(b);
      s.after = reinterpret_cast<uintptr_t>(b + g_page + span);
      s.data = reinterpret_cast<uintptr_t>(data_);
      s.end = s.data + bytes;
      std::snprintf(s.name, sizeof s.name, "%s", name.c_str());
      s.used.store(true, std::memory_order_release);
      slot_ = k;
      break;
    }
}

GuardedBuffer::~GuardedBuffer() {
  if (slot_ >= 0) {
    std::lock_guard lk(g_slots_mu);
    g_slots[slot_].used.store(false, std::memory_order_release);
  }
  if (base_) ::munmap(base_, mapped_);
}

}  // namespace tessel::emu
