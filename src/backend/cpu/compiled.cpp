// Compiled CPU kernels: generate, compile (cached in memory and on disk), pack inputs, launch.
#include "backend/cpu/compiled.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>

#include "backend/backend.hpp"
#include "backend/cpu/thread_pool.hpp"
#include "backend/lru_map.hpp"
#include "cache/compiler.hpp"
#include "cache/disk_cache.hpp"
#include "cache/elf_check.hpp"
#include "codegen/cpu_codegen.hpp"
#include "support/warning.hpp"
#include "tessel/runtime.hpp"

namespace tessel {

namespace {

using KernelFn = void (*)(const KernelArgs*);
using MergeFn = void (*)(const KernelArgs*, const void* const*, int);
using StateBytesFn = long long (*)();

struct Loaded {
  KernelFn fn = nullptr;
  MergeFn merge = nullptr;  // finishes states of split inner ranges (see launch)
  int64_t state_bytes = 0;  // one block's state
  KernelLayout layout;
  int lanes = 1;
  void* handle = nullptr;  // dlopen's; closed when the table dropped it and no call runs it
  Loaded() = default;
  Loaded(const Loaded&) = delete;
  Loaded& operator=(const Loaded&) = delete;
  ~Loaded() {
    if (handle) dlclose(handle);
  }
};

struct Target {
  int vbytes;
  std::vector<std::string> flags;
};

Target target_for(bool f64) {
  const std::string level = simd_level();
  Target t;
  if (level == "avx512")
    t = {64, {"-march=native"}};
  else if (level == "avx2")
    t = {32, {"-march=x86-64-v3"}};
  else if (level == "sse2")
    t = {16, {"-march=x86-64"}};
  else if (level == "neon")
    t = {16, {}};  // every aarch64 compiler targets ARMv8-A with NEON by default (and a cross
                   // compiler, as in the aarch64 tests under emulation, has no "native" to tune)
  else
    t = {f64 ? 8 : 4, {}};
  // -O2 keeps compile time low; the code is explicit SIMD, so -O3's vectoriser has nothing to add.
  for (const char* f : {"-O2", "-std=c++17", "-shared", "-fPIC", "-fno-math-errno",
                        "-ffp-contract=fast", "-fno-semantic-interposition", "-w"})
    t.flags.push_back(f);
  return t;
}

// Backend::Auto leaves generated sources larger than this to the interpreter: g++ -O2 takes about
// 15 s per MB of kernel source (measured: 0.17 MB 4 s, 2.7 MB 42 s on a 2-core machine) and far
// longer for deep nesting, while the interpreter starts at once. Backend::Compiled still tries.
constexpr size_t kAutoSourceLimit = size_t{1} << 20;
// How far past that limit estimate_cpu_kernel_bytes() must be for the kernel to go to the
// interpreter without being generated: beyond the estimate's own error.
constexpr size_t kEstimateMargin = 4;

// Kernels loaded in this process, bounded: a long-lived process that builds ever new formulas
// would otherwise keep every library mapped. One dropped here reloads from the disk cache.
constexpr size_t kLoadedKernels = 1024;

struct Table {
  std::mutex mu;
  LruMap<std::string, std::shared_ptr<Loaded>> by_spec{kLoadedKernels};
  // Specs that Backend::Auto gave to the interpreter (too large, or the compile ran out of
  // time): later calls in this process go straight there instead of waiting again.
  LruMap<std::string, bool> interpret_only{kLoadedKernels};
};
Table& table() {
  static Table* t = new Table;  // kernels stay loaded for the life of the process
  return *t;
}

std::string spec_key(const ReductionImpl& r, const CpuKernelSpec& s) {
  return r.hash.hex() + ":" + std::to_string(s.f64) + ":" + std::to_string(s.vbytes) + ":" +
         std::to_string(static_cast<int>(s.scheme)) + ":" + std::to_string(s.acc_f64);
}

std::string source_key(const std::string& source, const std::vector<std::string>& flags) {
  std::string all = source + "\n";
  for (const auto& f : flags) all += f + " ";
  all += compiler_identity();
  return hash_bytes(all).hex();
}

std::shared_ptr<Loaded> load(const Problem& p, const CpuKernelSpec& spec, const Target& tgt) {
  const std::string key = spec_key(*p.r, spec);
  const bool automatic = p.opt.backend == Backend::Auto;
  Table& t = table();
  {
    std::lock_guard lk(t.mu);
    if (auto* have = t.by_spec.find(key)) return *have;
    if (automatic && t.interpret_only.find(key)) return nullptr;
  }
  auto give_up = [&](const std::string& why) {
    detail::warn_once("interpret:" + key, why + "; with backend 'auto' the interpreter evaluates " +
                                              "it instead (slower), here and in later calls");
    std::lock_guard lk(t.mu);
    t.interpret_only.insert(key, true);
    return nullptr;
  };
  auto too_large = [&](size_t bytes) {
    return give_up("a formula's kernel would be " + std::to_string(bytes >> 10) +
                   " KiB of C++, too large to compile quickly (the limit for backend='auto' is " +
                   std::to_string(kAutoSourceLimit >> 10) + " KiB)");
  };
  // Wide variables (Vi(4000000)) would spend most of a minute writing a gigabyte of source
  // before the size check below sends them elsewhere: decide from the estimate when it is far
  // past the limit (it is within a small factor of the source's size).
  if (automatic) {
    const size_t estimate = estimate_cpu_kernel_bytes(spec);
    if (estimate > kEstimateMargin * kAutoSourceLimit) return too_large(estimate);
  }
  auto k = std::make_shared<Loaded>();
  const std::string source = generate_cpu_kernel(spec, k->layout);
  if (source.empty()) return nullptr;
  if (automatic && source.size() > kAutoSourceLimit) return too_large(source.size());
  k->lanes = lanes(spec);
  const CompilerInfo cc = compiler_info();
  if (!cc.usable) {
    if (p.opt.backend == Backend::Compiled)
      detail::fail("evaluate", "the compiled backend was requested but ", cc.problem);
    return nullptr;
  }
  const std::string skey = source_key(source, tgt.flags);
  std::string so;
  try {
    so = DiskCache::instance().get_or_build(
        skey, source,
        [&](const std::string& src_path, const std::string& so_path) {
          std::vector<std::string> args = tgt.flags;
          args.insert(args.end(), {"-o", so_path, src_path, "-lm"});
          try {
            run_compiler(cc.path, args, src_path + ".log");
          } catch (const CompileTimeout&) {
            throw;
          } catch (const Error& e) {
            throw Error(std::string(e.what()) + "\ngenerated source kept at: " + src_path);
          }
        },
        detail::elf_library_problem);
  } catch (const CompileTimeout& e) {
    if (!automatic) throw;
    std::ostringstream why;
    why << "compiling a kernel was stopped after " << compile_timeout_s()
        << " s (the limit; set TESSEL_COMPILE_TIMEOUT=<seconds> to change it)";
    return give_up(why.str());
  }
  k->handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!k->handle) detail::fail("evaluate", "cannot load the compiled kernel ", so, ": ", dlerror());
  k->fn = reinterpret_cast<KernelFn>(dlsym(k->handle, "tessel_kernel"));
  k->merge = reinterpret_cast<MergeFn>(dlsym(k->handle, "tessel_merge"));
  const auto bytes = reinterpret_cast<StateBytesFn>(dlsym(k->handle, "tessel_state_bytes"));
  if (!k->fn || !k->merge || !bytes)
    detail::fail("evaluate", "the compiled kernel ", so, " lacks tessel_kernel, tessel_merge or ",
                 "tessel_state_bytes");
  k->state_bytes = bytes();
  std::lock_guard lk(t.mu);
  return t.by_spec.insert(key, k);
}

// Bytes of packed inner tiles per cache chunk (KernelArgs::chunk): a chunk stays in L2 while a
// run of row blocks walks it (L2 is 512 KiB to 2 MiB per core on current x86 and ARM servers).
std::atomic<int64_t> chunk_bytes{256 << 10};

// The chunk in inner indices: whole blocks of kSumBlockLaneTerms tiles.
int64_t chunk_indices(const KernelLayout& L, int lanes, int64_t t_bytes) {
  const int64_t per_index = std::max<int64_t>(1, L.inner_dim) * t_bytes;
  const int64_t unit = int64_t{lanes} * kSumBlockLaneTerms;
  return std::max<int64_t>(1, chunk_bytes.load() / (per_index * unit)) * unit;
}

// Packs the variables into the kernel's layout: outer rows, inner SoA tiles, parameters. The inner
// points are packed in parallel (a call with few rows and many points is mostly this copy), each
// thread writing whole tiles, and only the last tile's unused lanes are zeroed.
template <class T>
void pack(const Problem& p, const Loaded& k, std::vector<T>& outer, std::unique_ptr<T[]>& inner,
          std::vector<T>& params) {
  const KernelLayout& L = k.layout;
  const int W = k.lanes;
  const int64_t tiles = (p.n_inner + W - 1) / W;
  const int64_t tile_size = int64_t{L.inner_dim} * W;
  outer.assign(static_cast<size_t>(std::max<int64_t>(1, p.n_outer * L.outer_dim)), T(0));
  inner.reset(new T[static_cast<size_t>(std::max<int64_t>(1, tiles * tile_size))]);
  if (tiles > 0) std::fill_n(&inner[(tiles - 1) * tile_size], tile_size, T(0));
  params.assign(static_cast<size_t>(std::max(1, L.param_dim)), T(0));
  for (const auto& e : L.vars) {
    const Bound& b = p.var(e.index);
    if (e.cat == Category::Param) {
      for (int c = 0; c < e.dim; ++c) params[e.offset + c] = static_cast<T>(b.at(0, c));
    } else if (e.cat == Category::I) {
      for (int64_t i = 0; i < p.n_outer; ++i)
        for (int c = 0; c < e.dim; ++c)
          outer[i * L.outer_dim + e.offset + c] = static_cast<T>(b.at(i, c));
    }
  }
  constexpr int64_t kPackGrain = 4096;  // tiles per task: enough work to pay for a hand-off
  parallel_for(tiles, kPackGrain, p.threads, [&](int64_t t0, int64_t t1) {
    for (const auto& e : L.vars) {
      if (e.cat != Category::J) continue;
      const Bound& b = p.var(e.index);
      const int64_t j1 = std::min(p.n_inner, t1 * W);
      for (int64_t j = t0 * W; j < j1; ++j) {
        T* tile = &inner[(j / W) * tile_size + (j % W)];
        for (int c = 0; c < e.dim; ++c) tile[(e.offset + c) * W] = static_cast<T>(b.at(j, c));
      }
    }
  });
}

template <class T>
void launch(const Problem& p, const Loaded& k, std::span<const ArrayView> outs) {
  std::vector<T> outer, params;
  std::unique_ptr<T[]> inner;
  pack(p, k, outer, inner, params);
  const int64_t chunk = chunk_indices(k.layout, k.lanes, sizeof(T));
  KernelArgs base{};
  base.outer = outer.data();
  base.inner = inner.get();
  base.params = params.data();
  base.n_inner = p.n_inner;
  base.chunk = p.n_inner > chunk ? chunk : 0;
  base.j_lo = 0;
  base.j_hi = p.n_inner;
  for (size_t q = 0; q < outs.size() && q < 2; ++q) base.out[q] = outs[q].data;
  // Tasks: row chunks of every block, so that threads balance across blocks too.
  struct Task {
    int64_t b, e;
    const RowBlock* blk;
  };
  std::vector<Task> tasks;
  const int threads = std::max(1, p.threads);
  const int64_t grain = std::max<int64_t>(8, (p.n_outer + threads * 8 - 1) / (threads * 8));
  for (const RowBlock& blk : p.blocks)
    for (int64_t b = blk.begin; b < blk.end; b += grain)
      tasks.push_back({b, std::min(blk.end, b + grain), &blk});
  auto args_of = [&](const Task& t) {
    KernelArgs a = base;
    a.o_begin = t.b;
    a.o_end = t.e;
    a.iv = reinterpret_cast<const long long*>(t.blk->iv.data());
    a.n_iv = static_cast<long long>(t.blk->iv.size() / 2);
    return a;
  };
  // Too few rows to keep every thread busy (a few queries against many points): the inner range
  // is split too, in `parts` runs of whole chunks; each (task, part) leaves its blocks' states in
  // a buffer, and tessel_merge folds them in inner order and writes the outputs.
  const int64_t parts = static_cast<int64_t>(tasks.size()) >= threads
                            ? 1
                            : std::min<int64_t>(threads, p.n_inner / chunk);
  if (parts <= 1) {
    parallel_for(static_cast<int64_t>(tasks.size()), 1, p.threads, [&](int64_t b, int64_t e) {
      for (int64_t q = b; q < e; ++q) {
        const KernelArgs a = args_of(tasks[q]);
        k.fn(&a);
      }
    });
    return;
  }
  const int64_t span = (p.n_inner / parts + chunk - 1) / chunk * chunk;
  const size_t stride = static_cast<size_t>(grain * k.state_bytes);  // <= grain blocks per task
  // 64-byte aligned: the states hold vectors of up to 64 bytes.
  std::vector<std::byte> raw(stride * tasks.size() * parts + 64);
  std::byte* states = raw.data() + (64 - reinterpret_cast<uintptr_t>(raw.data()) % 64) % 64;
  auto state_of = [&](size_t task, int64_t part) {
    return states + (task * static_cast<size_t>(parts) + static_cast<size_t>(part)) * stride;
  };
  const int64_t items = static_cast<int64_t>(tasks.size()) * parts;
  parallel_for(items, 1, p.threads, [&](int64_t b, int64_t e) {
    for (int64_t q = b; q < e; ++q) {
      const size_t task = static_cast<size_t>(q / parts);
      const int64_t part = q % parts;
      KernelArgs a = args_of(tasks[task]);
      a.j_lo = std::min(p.n_inner, part * span);
      a.j_hi = part + 1 == parts ? p.n_inner : std::min(p.n_inner, (part + 1) * span);
      a.state_out = state_of(task, part);
      k.fn(&a);
    }
  });
  parallel_for(static_cast<int64_t>(tasks.size()), 1, p.threads, [&](int64_t b, int64_t e) {
    std::vector<const void*> ptrs(static_cast<size_t>(parts));
    for (int64_t q = b; q < e; ++q) {
      for (int64_t part = 0; part < parts; ++part)
        ptrs[static_cast<size_t>(part)] = state_of(static_cast<size_t>(q), part);
      const KernelArgs a = args_of(tasks[q]);
      k.merge(&a, ptrs.data(), static_cast<int>(parts));
    }
  });
}

class CompiledBackend final : public KernelBackend {
 public:
  const char* name() const override { return "compiled"; }
  bool run(const Problem& p, std::span<const ArrayView> outs) override;
  void forget_loaded() override {
    Table& t = table();
    std::lock_guard lk(t.mu);
    t.by_spec.clear();
  }
};

bool CompiledBackend::run(const Problem& p, std::span<const ArrayView> outs) {
  const Target tgt = target_for(p.dtype == DType::Float64);
  const CpuKernelSpec spec = cpu_kernel_spec(p, tgt.vbytes);
  const auto k = load(p, spec, tgt);
  if (!k) return false;
  if (p.n_outer == 0) return true;
  if (spec.f64)
    launch<double>(p, *k, outs);
  else
    launch<float>(p, *k, outs);
  return true;
}

}  // namespace

int64_t set_cpu_chunk_bytes(int64_t bytes) {
  if (bytes < 1) detail::fail("set_cpu_chunk_bytes", "bytes must be >= 1, got ", bytes);
  return chunk_bytes.exchange(bytes);
}

CpuKernelTarget cpu_kernel_target(bool f64) {
  Target t = target_for(f64);
  return {t.vbytes, std::move(t.flags)};
}

CpuKernelSpec cpu_kernel_spec(const Problem& p, int vbytes) {
  CpuKernelSpec spec;
  spec.r = p.r;
  spec.f64 = p.dtype == DType::Float64;
  spec.scheme = p.opt.sum_scheme;
  spec.acc_f64 = p.opt.accumulate_f64 && !spec.f64;
  spec.vbytes = vbytes;
  return spec;
}

KernelBackend& compiled_backend() {
  static CompiledBackend* b = new CompiledBackend();  // kernels stay loaded for the process
  return *b;
}

}  // namespace tessel
