// The CUDA emulator's host side: source rewriting, compilation, and the block/thread launcher.
//
// Each block runs as blockDim real threads that meet in a mutex/condition-variable barrier of our
// own rather than std::barrier: it has to time out (a deadlock must fail the test, not hang it),
// notice threads that arrive at different __syncthreads or exit while others wait, and carry the
// predicate count of __syncthreads_count. Warp intrinsics are rendezvous of the lanes named in
// their mask, with the same checks.
#include "cuda_emulator.hpp"

#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <system_error>
#include <thread>
#include <vector>

#include "cache/compiler.hpp"
#include "cache/disk_cache.hpp"
#include "ir/node.hpp"
#include "tessel/error.hpp"
#include "tessel/runtime.hpp"

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

// The state one block's threads share: barrier, warp rendezvous, static shared memory.
class Block {
 public:
  Block(const LaunchConfig& cfg, unsigned n, const unsigned* bdim)
      : cfg_(cfg),
        n_(n),
        bdim_(bdim),
        done_(n, 0),
        warps_((n + 31) / 32),
        smem_(cfg.dynamic_smem, 16, "extern __shared__ memory") {
    std::memset(smem_.data(), 0xff, smem_.size());  // NaN as float and double: unwritten reads show
  }

  unsigned char* smem() const { return smem_.as<unsigned char>(); }

  int sync(unsigned t, int line, int pred) {
    std::unique_lock lk(mu_);
    check_alive(t, "__syncthreads at line " + std::to_string(line), true);
    if (arrived_ == 0) line_ = line;
    if (line != line_)
      fail(who(t, bdim_) + " reached __syncthreads at line " + std::to_string(line) + " while " +
           std::to_string(arrived_) + " threads wait at the one at line " + std::to_string(line_) +
           " (divergent barriers)");
    ++arrived_;
    count_ += pred;
    if (arrived_ == n_) {
      result_ = count_;
      arrived_ = 0;
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return result_;
    }
    const uint64_t gen = gen_;
    wait(lk, "__syncthreads at line " + std::to_string(line), [&] { return gen_ != gen; });
    return result_;  // the next barrier cannot complete before this thread arrives at it
  }

  void exchange(unsigned t, unsigned mask, unsigned long long v, unsigned long long* all,
                int line) {
    std::unique_lock lk(mu_);
    const unsigned lane = t % 32, w = t / 32;
    const unsigned lanes = std::min(32u, n_ - 32 * w);
    const unsigned exists = lanes == 32 ? ~0u : (1u << lanes) - 1;
    const std::string where = "the warp intrinsic at line " + std::to_string(line);
    check_alive(t, where, false);
    if (!((mask >> lane) & 1u))
      fail(who(t, bdim_) + " calls " + where + " with mask " + hex(mask) + ", which leaves it out");
    if (mask & ~exists)
      fail(where + " names lanes " + hex(mask & ~exists) + " of warp " + std::to_string(w) +
           " that do not exist (the block has " + std::to_string(n_) + " threads)");
    for (unsigned l = 0; l < 32; ++l)
      if (((mask >> l) & 1u) && done_[32 * w + l])
        fail(where + ": lane " + std::to_string(l) + " of its mask has already exited");
    Group& g = warps_[w][mask];
    if (g.arrived == 0) g.line = line;
    if (g.line != line)
      fail(who(t, bdim_) + " reached " + where + " while lanes of its mask wait at line " +
           std::to_string(g.line));
    g.vals[lane] = v;
    if (++g.arrived == static_cast<unsigned>(__builtin_popcount(mask))) {
      std::memcpy(g.snap, g.vals, sizeof g.vals);
      g.arrived = 0;
      ++g.gen;
      cv_.notify_all();
    } else {
      const uint64_t gen = g.gen;
      wait(lk, where, [&] { return g.gen != gen; });
    }
    std::memcpy(all, g.snap, sizeof g.snap);
  }

  void* static_smem(int id, size_t bytes) {
    std::lock_guard lk(mu_);
    auto& b = statics_[id];
    if (!b) {
      b = std::make_unique<GuardedBuffer>(bytes, 16, "static __shared__ #" + std::to_string(id));
      std::memset(b->data(), 0xff, bytes);
    }
    return b->data();
  }

  [[noreturn]] void trap(unsigned t, const char* what, int line) {
    std::unique_lock lk(mu_);
    fail(who(t, bdim_) + ": " + what + " at line " + std::to_string(line));
  }

  // A thread left the kernel (normally or not): peers waiting for it would wait forever.
  void exited(unsigned t, const std::string& error) {
    std::lock_guard lk(mu_);
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
    cv_.notify_all();
  }

  // Waits for every thread to leave; false when some are still running after the timeout.
  bool wait_all(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return n_done_ == n_; });
  }

  // Sets the block's failure and lets every thread unwind.
  void abort(const std::string& why) {
    std::lock_guard lk(mu_);
    record(why);
  }

  std::string error() {
    std::lock_guard lk(mu_);
    return error_;
  }

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
    cv_.notify_all();
  }
  [[noreturn]] void fail(const std::string& why) {
    record(why);
    throw BlockAbort{};
  }
  void check_alive(unsigned t, const std::string& where, bool whole_block) {
    if (aborted_) throw BlockAbort{};
    if (whole_block && n_done_ > 0)
      fail(who(t, bdim_) + " reached " + where + " after " + std::to_string(n_done_) +
           " threads of its block exited (a barrier not every thread reaches)");
  }
  template <class Pred>
  void wait(std::unique_lock<std::mutex>& lk, const std::string& where, Pred done) {
    if (!cv_.wait_for(lk, cfg_.stall_timeout, [&] { return done() || aborted_; }))
      fail("no progress for " + std::to_string(cfg_.stall_timeout.count()) + " ms at " + where +
           ": " + std::to_string(arrived_) + " of " + std::to_string(n_) +
           " threads wait at __syncthreads (line " + std::to_string(line_) + "), " +
           std::to_string(n_done_) + " exited, the others never arrive (deadlock)");
    if (!done()) throw BlockAbort{};
  }

  const LaunchConfig& cfg_;
  const unsigned n_;
  const unsigned* bdim_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool aborted_ = false;
  std::string error_;
  unsigned arrived_ = 0, n_done_ = 0;
  int line_ = 0, count_ = 0, result_ = 0;
  uint64_t gen_ = 0;
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

// A block's threads, started once per launch and handed one block after another: starting
// blockDim threads per block made many-block launches cost a thread start per CUDA thread.
class Crew {
 public:
  Crew(unsigned n, void (*bind)(const void*), const std::function<void()>& body) {
    threads_.reserve(n);
    try {
      for (unsigned t = 0; t < n; ++t) start(t, bind, body);
    } catch (...) {  // the threads already started are stopped before the error goes on
      stop();
      throw;
    }
  }
  ~Crew() { stop(); }
  void run(Block& block, std::vector<ThreadCtx>& ctx) {
    {
      std::lock_guard lk(mu_);
      block_ = &block;
      ctx_ = &ctx;
      ++gen_;
    }
    cv_.notify_all();
  }

 private:
  void start(unsigned t, void (*bind)(const void*), const std::function<void()>& body) {
    threads_.emplace_back([this, t, bind, &body] {
      for (uint64_t seen = 0;;) {
        Block* block = nullptr;
        {
          std::unique_lock lk(mu_);
          cv_.wait(lk, [&] { return quit_ || gen_ != seen; });
          if (quit_) return;
          seen = gen_;
          block = block_;
          bind(&(*ctx_)[t]);
        }
        std::string error;
        try {
          body();
        } catch (const BlockAbort&) {
          error = "aborted";
        } catch (const std::exception& e) {
          error = e.what();
        }
        block->exited(t, error);  // the block is not touched after this
      }
    });
  }
  void stop() {
    {
      std::lock_guard lk(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (std::thread& th : threads_) th.join();
    threads_.clear();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t gen_ = 0;
  bool quit_ = false;
  Block* block_ = nullptr;
  std::vector<ThreadCtx>* ctx_ = nullptr;
  std::vector<std::thread> threads_;
};

void Module::launch(const LaunchConfig& cfg, const std::function<void()>& body) const {
  check_config(cfg);
  const unsigned bdim[3] = {cfg.block.x, cfg.block.y, cfg.block.z};
  const unsigned n = bdim[0] * bdim[1] * bdim[2];
  std::unique_ptr<Crew> crew;
  try {
    crew = std::make_unique<Crew>(n, bind_, body);
  } catch (const std::system_error& e) {
    throw EmulationError(std::string("cannot start the block's threads: ") + e.what());
  }
  for (unsigned bz = 0; bz < cfg.grid.z; ++bz)
    for (unsigned by = 0; by < cfg.grid.y; ++by)
      for (unsigned bx = 0; bx < cfg.grid.x; ++bx) {
        Block block(cfg, n, bdim);
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
        crew->run(block, ctx);
        if (!block.wait_all(cfg.stall_timeout * 2 + std::chrono::seconds(5))) {
          // A thread loops without reaching a barrier: it cannot be stopped, so stop the process
          // rather than hang the test run or let it write into freed buffers.
          std::fprintf(stderr,
                       "[CUDA emulator] block (%u,%u,%u) did not finish in %lld ms (%s); kernel "
                       "source: %s\n",
                       bx, by, bz, static_cast<long long>(cfg.stall_timeout.count()) * 2,
                       block.error().c_str(), source_path_.c_str());
          std::abort();
        }
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
