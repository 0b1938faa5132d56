// The host "shim" the CUDA emulator prepends to kernel source: CUDA's built-ins as plain C++.
//
// It includes no header at all (math goes through compiler builtins), which keeps each emulated
// kernel's compile time near that of an empty file. Everything a thread needs from the launcher
// (its indices, the block's shared memory, the barrier) comes through one thread-local context
// pointer that the launcher binds before calling the kernel; the struct layout must match
// ThreadCtx in cuda_emulator.cpp, which checks the size at load.
namespace tessel::emu {

const char* shim_source() {
  return R"SHIM(// ---- tessel CUDA emulator shim ----
#define TESSEL_CUDA_EMULATOR 1
#define __CUDACC_RTC__ 1
#define __CUDA_ARCH__ 900
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __constant__
#define __align__(n) alignas(n)
// The emulator rewrites every __shared__ declaration it understands; any other is reported.
#define __shared__ tessel_emu_unsupported_shared_declaration
#define warpSize 32

struct uint3 { unsigned x, y, z; };
// The 16-byte vector types kernels load shared or global memory through (LDS.128 / LDG.128).
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(16) double2 { double x, y; };
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
  dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
struct tessel_emu_thread {
  uint3 tid, bid, bdim, gdim;
  unsigned linear;
  unsigned char* smem;
  void* block;
  int (*sync)(void* block, unsigned linear, int line, int pred);
  void (*exchange)(void* block, unsigned linear, unsigned mask, unsigned long long v,
                   unsigned long long* all, int line);
  void* (*static_smem)(void* block, int id, unsigned long long bytes);
  void (*trap)(void* block, unsigned linear, const char* what, int line);
};
static thread_local const tessel_emu_thread* tessel_emu_t_ = nullptr;
extern "C" __attribute__((visibility("default"))) void tessel_emu_bind(const void* t) {
  tessel_emu_t_ = (const tessel_emu_thread*)t;
}
extern "C" __attribute__((visibility("default"))) unsigned long tessel_emu_abi() {
  return sizeof(tessel_emu_thread);
}
#define threadIdx (tessel_emu_t_->tid)
#define blockIdx (tessel_emu_t_->bid)
#define blockDim (tessel_emu_t_->bdim)
#define gridDim (tessel_emu_t_->gdim)
#define TESSEL_EMU_TRAP(what) tessel_emu_t_->trap(tessel_emu_t_->block, tessel_emu_t_->linear, what, __LINE__)

// ---- barriers and warp intrinsics (the launcher implements them) ----
#define __syncthreads_count(p) \
  tessel_emu_t_->sync(tessel_emu_t_->block, tessel_emu_t_->linear, __LINE__, (p) ? 1 : 0)
#define __syncthreads() ((void)__syncthreads_count(0))
#define __syncthreads_or(p) (__syncthreads_count(p) != 0)
#define __syncthreads_and(p) \
  ((unsigned)__syncthreads_count(p) == blockDim.x * blockDim.y * blockDim.z)
static inline void tessel_emu_exchange(int line, unsigned mask, unsigned long long v,
                                       unsigned long long* all) {
  tessel_emu_t_->exchange(tessel_emu_t_->block, tessel_emu_t_->linear, mask, v, all, line);
}
template <class T>
static inline T tessel_emu_pick(int line, unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 8, "shuffles of more than 8 bytes are not emulated");
  unsigned long long all[32], bits = 0;
  __builtin_memcpy(&bits, &v, sizeof(T));
  tessel_emu_exchange(line, mask, bits, all);
  if (!((mask >> src) & 1u))
    tessel_emu_t_->trap(tessel_emu_t_->block, tessel_emu_t_->linear,
                        "a shuffle reads a lane outside its mask", line);
  __builtin_memcpy(&v, &all[src], sizeof(T));
  return v;
}
static inline int tessel_emu_lane() { return (int)(tessel_emu_t_->linear & 31u); }
template <class T>
static inline T tessel_emu_shfl(int line, unsigned mask, T v, int src, int width = 32) {
  const int base = tessel_emu_lane() & ~(width - 1);
  return tessel_emu_pick(line, mask, v, base + (src & (width - 1)));
}
template <class T>
static inline T tessel_emu_shfl_up(int line, unsigned mask, T v, unsigned d, int width = 32) {
  const int lane = tessel_emu_lane(), in = lane & (width - 1);
  return tessel_emu_pick(line, mask, v, in < (int)d ? lane : lane - (int)d);
}
template <class T>
static inline T tessel_emu_shfl_down(int line, unsigned mask, T v, unsigned d, int width = 32) {
  const int lane = tessel_emu_lane(), in = lane & (width - 1);
  return tessel_emu_pick(line, mask, v, in + (int)d >= width ? lane : lane + (int)d);
}
template <class T>
static inline T tessel_emu_shfl_xor(int line, unsigned mask, T v, int m, int width = 32) {
  const int lane = tessel_emu_lane(), src = lane ^ m;
  // Lanes may read earlier groups of `width`, never later ones (then they keep their own value).
  return tessel_emu_pick(line, mask, v, (src & ~(width - 1)) > (lane & ~(width - 1)) ? lane : src);
}
static inline unsigned tessel_emu_ballot(int line, unsigned mask, int pred) {
  unsigned long long all[32];
  tessel_emu_exchange(line, mask, pred ? 1 : 0, all);
  unsigned r = 0;
  for (int l = 0; l < 32; ++l)
    if (((mask >> l) & 1u) && all[l]) r |= 1u << l;
  return r;
}
#define __shfl_sync(...) tessel_emu_shfl(__LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) tessel_emu_shfl_up(__LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) tessel_emu_shfl_down(__LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) tessel_emu_shfl_xor(__LINE__, __VA_ARGS__)
#define __ballot_sync(mask, p) tessel_emu_ballot(__LINE__, mask, p)
#define __any_sync(mask, p) (tessel_emu_ballot(__LINE__, mask, p) != 0u)
#define __all_sync(mask, p) (tessel_emu_ballot(__LINE__, mask, p) == (unsigned)(mask))
static inline void tessel_emu_syncwarp(int line, unsigned mask = 0xffffffffu) {
  unsigned long long all[32];
  tessel_emu_exchange(line, mask, 0, all);
}
#define __syncwarp(...) tessel_emu_syncwarp(__LINE__, ##__VA_ARGS__)
#define __threadfence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define __threadfence_block() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define __trap() TESSEL_EMU_TRAP("__trap()")
#define assert(c) ((c) ? (void)0 : TESSEL_EMU_TRAP("assert(" #c ") failed"))
extern "C" int printf(const char*, ...);
template <class T>
static inline T __ldg(const T* p) { return *p; }

// ---- atomics: blocks run one at a time, so only the threads of one block race ----
template <class T, class F>
static inline T tessel_emu_rmw(T* p, F f) {
  T old, next;
  __atomic_load(p, &old, __ATOMIC_SEQ_CST);
  do next = f(old);
  while (!__atomic_compare_exchange(p, &old, &next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return old;
}
#define TESSEL_EMU_ATOMICS(T)                                                              \
  static inline T atomicAdd(T* p, T v) { return tessel_emu_rmw(p, [v](T o) { return (T)(o + v); }); } \
  static inline T atomicExch(T* p, T v) { return tessel_emu_rmw(p, [v](T) { return v; }); }          \
  static inline T atomicMin(T* p, T v) { return tessel_emu_rmw(p, [v](T o) { return v < o ? v : o; }); } \
  static inline T atomicMax(T* p, T v) { return tessel_emu_rmw(p, [v](T o) { return v > o ? v : o; }); }
TESSEL_EMU_ATOMICS(int)
TESSEL_EMU_ATOMICS(unsigned)
TESSEL_EMU_ATOMICS(long long)
TESSEL_EMU_ATOMICS(unsigned long long)
TESSEL_EMU_ATOMICS(float)
TESSEL_EMU_ATOMICS(double)
#define TESSEL_EMU_INT_ATOMICS(T)                                                            \
  static inline T atomicSub(T* p, T v) { return tessel_emu_rmw(p, [v](T o) { return (T)(o - v); }); } \
  static inline T atomicAnd(T* p, T v) { return tessel_emu_rmw(p, [v](T o) { return (T)(o & v); }); } \
  static inline T atomicOr(T* p, T v) { return tessel_emu_rmw(p, [v](T o) { return (T)(o | v); }); }  \
  static inline T atomicXor(T* p, T v) { return tessel_emu_rmw(p, [v](T o) { return (T)(o ^ v); }); } \
  static inline T atomicCAS(T* p, T cmp, T v) {                                              \
    __atomic_compare_exchange(p, &cmp, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);        \
    return cmp;                                                                               \
  }
TESSEL_EMU_INT_ATOMICS(int)
TESSEL_EMU_INT_ATOMICS(unsigned)
TESSEL_EMU_INT_ATOMICS(unsigned long long)

// ---- math: CUDA's float and double overloads, through compiler builtins ----
namespace tessel_emu_math {
#define TESSEL_EMU_M1(fn)                                               \
  static inline float fn(float a) { return __builtin_##fn##f(a); }      \
  static inline double fn(double a) { return __builtin_##fn(a); }       \
  static inline float fn##f(float a) { return __builtin_##fn##f(a); }
#define TESSEL_EMU_M2(fn)                                                         \
  static inline float fn(float a, float b) { return __builtin_##fn##f(a, b); }    \
  static inline double fn(double a, double b) { return __builtin_##fn(a, b); }    \
  static inline float fn##f(float a, float b) { return __builtin_##fn##f(a, b); }
TESSEL_EMU_M1(exp) TESSEL_EMU_M1(exp2) TESSEL_EMU_M1(expm1) TESSEL_EMU_M1(log)
TESSEL_EMU_M1(log2) TESSEL_EMU_M1(log10) TESSEL_EMU_M1(log1p) TESSEL_EMU_M1(sqrt)
TESSEL_EMU_M1(cbrt) TESSEL_EMU_M1(sin) TESSEL_EMU_M1(cos) TESSEL_EMU_M1(tan)
TESSEL_EMU_M1(asin) TESSEL_EMU_M1(acos) TESSEL_EMU_M1(atan) TESSEL_EMU_M1(sinh)
TESSEL_EMU_M1(cosh) TESSEL_EMU_M1(tanh) TESSEL_EMU_M1(asinh) TESSEL_EMU_M1(acosh)
TESSEL_EMU_M1(atanh) TESSEL_EMU_M1(floor) TESSEL_EMU_M1(ceil) TESSEL_EMU_M1(round)
TESSEL_EMU_M1(trunc) TESSEL_EMU_M1(rint) TESSEL_EMU_M1(nearbyint) TESSEL_EMU_M1(fabs)
TESSEL_EMU_M1(erf) TESSEL_EMU_M1(erfc) TESSEL_EMU_M1(tgamma) TESSEL_EMU_M1(lgamma)
TESSEL_EMU_M2(atan2) TESSEL_EMU_M2(pow) TESSEL_EMU_M2(fmod) TESSEL_EMU_M2(fmin)
TESSEL_EMU_M2(fmax) TESSEL_EMU_M2(hypot) TESSEL_EMU_M2(copysign) TESSEL_EMU_M2(fdim)
TESSEL_EMU_M2(remainder)
static inline float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
static inline double fma(double a, double b, double c) { return __builtin_fma(a, b, c); }
static inline float fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
static inline float rsqrtf(float a) { return 1.0f / __builtin_sqrtf(a); }
static inline float rsqrt(float a) { return 1.0f / __builtin_sqrtf(a); }
static inline double rsqrt(double a) { return 1.0 / __builtin_sqrt(a); }
static inline float __expf(float a) { return __builtin_expf(a); }
static inline float __logf(float a) { return __builtin_logf(a); }
static inline float __sinf(float a) { return __builtin_sinf(a); }
static inline float __cosf(float a) { return __builtin_cosf(a); }
static inline float __powf(float a, float b) { return __builtin_powf(a, b); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float a) { return a != a ? 0.0f : a < 0 ? 0.0f : a > 1 ? 1.0f : a; }
template <class T> static inline bool isnan(T a) { return a != a; }
template <class T> static inline bool isinf(T a) { return a == (T)__builtin_inf() || a == -(T)__builtin_inf(); }
template <class T> static inline bool isfinite(T a) { return !isnan(a) && !isinf(a); }
template <class T> static inline bool signbit(T a) { return __builtin_signbit(a); }
// CUDA's min/max: fmin/fmax for floating types (NaN loses), plain comparison for integers.
template <class A, class B>
static inline auto min(A a, B b) {
  using R = decltype(a + b);
  if constexpr ((R)0.5 != 0) return (R)fmin((R)a, (R)b);
  else return (R)a < (R)b ? (R)a : (R)b;
}
template <class A, class B>
static inline auto max(A a, B b) {
  using R = decltype(a + b);
  if constexpr ((R)0.5 != 0) return (R)fmax((R)a, (R)b);
  else return (R)a > (R)b ? (R)a : (R)b;
}
static inline int abs(int a) { return a < 0 ? -a : a; }
static inline long long llabs(long long a) { return a < 0 ? -a : a; }
static inline int __popc(unsigned a) { return __builtin_popcount(a); }
static inline int __popcll(unsigned long long a) { return __builtin_popcountll(a); }
static inline int __clz(int a) { return a ? __builtin_clz((unsigned)a) : 32; }
static inline int __clzll(long long a) { return a ? __builtin_clzll((unsigned long long)a) : 64; }
static inline int __ffs(int a) { return __builtin_ffs(a); }
#undef TESSEL_EMU_M1
#undef TESSEL_EMU_M2
}  // namespace tessel_emu_math
using namespace tessel_emu_math;

template <class To, class From>
static inline To tessel_emu_bit_cast(From f) {
  To t;
  __builtin_memcpy(&t, &f, sizeof t);
  return t;
}
static inline float __int_as_float(int a) { return tessel_emu_bit_cast<float>(a); }
static inline int __float_as_int(float a) { return tessel_emu_bit_cast<int>(a); }
static inline float __uint_as_float(unsigned a) { return tessel_emu_bit_cast<float>(a); }
static inline unsigned __float_as_uint(float a) { return tessel_emu_bit_cast<unsigned>(a); }
static inline double __longlong_as_double(long long a) { return tessel_emu_bit_cast<double>(a); }
static inline long long __double_as_longlong(double a) { return tessel_emu_bit_cast<long long>(a); }
// ---- calls by argument array (cuLaunchKernel's kernelParams): one trampoline per kernel ----
// Module appends `tessel_emu_call_<name>` and `tessel_emu_params_<name>` after the source; the
// parameter types come from the kernel's own declaration, so no signature is parsed by hand.
template <unsigned long... I> struct tessel_emu_seq {};
template <unsigned long N, unsigned long... I>
struct tessel_emu_make : tessel_emu_make<N - 1, N - 1, I...> {};
template <unsigned long... I> struct tessel_emu_make<0, I...> { using type = tessel_emu_seq<I...>; };
template <class... A, unsigned long... I>
static inline void tessel_emu_apply(void (*f)(A...), void** a, tessel_emu_seq<I...>) {
  f(*(A*)a[I]...);
}
template <class... A>
static inline void tessel_emu_apply(void (*f)(A...), void** a) {
  tessel_emu_apply(f, a, typename tessel_emu_make<sizeof...(A)>::type{});
}
template <class T> struct tessel_emu_is_ptr { static const unsigned long v = 0; };
template <class T> struct tessel_emu_is_ptr<T*> { static const unsigned long v = 1; };
// Each parameter's size, with bit 63 set for pointers; returns the parameter count.
template <class... A>
static inline int tessel_emu_params(void (*)(A...), unsigned long* out, int cap) {
  const unsigned long z[] = {(sizeof(A) | tessel_emu_is_ptr<A>::v << 63)..., 0};
  for (int k = 0; k < (int)sizeof...(A) && k < cap; ++k) out[k] = z[k];
  return (int)sizeof...(A);
}
// ---- end of shim; the kernel source follows ----
)SHIM";
}

}  // namespace tessel::emu
