// The header every generated CPU kernel starts with: the lane-vector type V and vectorised math.
//
// It uses GCC/Clang vector extensions rather than <immintrin.h>: that header alone costs ~0.35 s
// of compile time per kernel, and vector extensions map to whatever width the target has. The
// few operations extensions lack (sqrt, floor, trunc) use target builtins, with a lane-loop
// fallback on other targets (on aarch64 the compiler turns those loops into NEON fsqrt/frint*).
// exp and log are our own polynomials: no libm call in the hot loop.
#include "codegen/cpu_codegen.hpp"

#include <string>

#include "ops/op.hpp"

namespace tessel {

namespace {

const char* kPrelude = R"PRELUDE(
typedef long long i64;
typedef int i32;
#if TESSEL_F64
typedef double T;
typedef i64 TI;
typedef unsigned long long TU;
#define TESSEL_MANT 52
#define TESSEL_BIAS 1023
#else
typedef float T;
typedef i32 TI;
typedef unsigned int TU;
#define TESSEL_MANT 23
#define TESSEL_BIAS 127
#endif
#define W (TESSEL_VBYTES / (int)sizeof(T))
typedef T V __attribute__((vector_size(TESSEL_VBYTES)));
typedef TI VI __attribute__((vector_size(TESSEL_VBYTES)));
typedef double VD __attribute__((vector_size(TESSEL_VBYTES * 8 / sizeof(T))));

// -0 + c is c for every c; +0 + c would turn c = -0 into +0 (Atan2(0, -0) is pi, not 0).
static inline V bc(double c) { return -(V){} + (T)c; }
static inline V vload(const T* p) { V v; __builtin_memcpy(&v, p, sizeof v); return v; }
static inline V v_lt(V a, V b, V x, V y) { return a < b ? x : y; }
static inline V v_le(V a, V b, V x, V y) { return a <= b ? x : y; }
static inline V v_eq(V a, V b, V x, V y) { return a == b ? x : y; }
// x86 builtins differ only by pd/ps and their all-lanes mask type.
#if TESSEL_F64
#define TESSEL_IA32(op, sfx) __builtin_ia32_##op##pd##sfx
#define TESSEL_ALL (unsigned char)-1
#else
#define TESSEL_IA32(op, sfx) __builtin_ia32_##op##ps##sfx
#define TESSEL_ALL (unsigned short)-1
#endif
// min/max return b when either is NaN, exactly like the x86 instructions they become.
// Written as a selection, GCC keeps compare + blend (two instructions on AVX2), so name them.
#if defined(__AVX512F__) && TESSEL_VBYTES == 64 && defined(__clang__)
// clang names the 512-bit forms without the mask (and takes the rounding mode last).
static inline V v_min(V a, V b) { return TESSEL_IA32(min, 512)(a, b, 4); }
static inline V v_max(V a, V b) { return TESSEL_IA32(max, 512)(a, b, 4); }
#elif defined(__AVX512F__) && TESSEL_VBYTES == 64
static inline V v_min(V a, V b) { return TESSEL_IA32(min, 512_mask)(a, b, a, TESSEL_ALL, 4); }
static inline V v_max(V a, V b) { return TESSEL_IA32(max, 512_mask)(a, b, a, TESSEL_ALL, 4); }
#elif defined(__AVX__) && TESSEL_VBYTES == 32
static inline V v_min(V a, V b) { return TESSEL_IA32(min, 256)(a, b); }
static inline V v_max(V a, V b) { return TESSEL_IA32(max, 256)(a, b); }
#elif defined(__SSE2__) && TESSEL_VBYTES == 16
static inline V v_min(V a, V b) { return TESSEL_IA32(min, )(a, b); }
static inline V v_max(V a, V b) { return TESSEL_IA32(max, )(a, b); }
#else
static inline V v_min(V a, V b) { return a < b ? a : b; }
static inline V v_max(V a, V b) { return a > b ? a : b; }
#endif
static inline V v_abs(V a) { return (V)((VI)a & (VI){} + (TI)(~(TU)0 >> 1)); }
// Any lane set? One mask-extraction instruction where the target has one.
static inline bool v_any(VI m) {
#if defined(__AVX512DQ__) && TESSEL_VBYTES == 64 && TESSEL_F64
  return __builtin_ia32_cvtq2mask512(m) != 0;
#elif defined(__AVX512DQ__) && TESSEL_VBYTES == 64
  return __builtin_ia32_cvtd2mask512(m) != 0;
#elif defined(__AVX__) && TESSEL_VBYTES == 32
  return TESSEL_IA32(movmsk, 256)((V)m) != 0;
#else
  TI w[W];
  __builtin_memcpy(w, &m, sizeof m);
  TI r = 0;
  for (int l = 0; l < W; ++l) r |= w[l];
  return r != 0;
#endif
}

// v_rnd is a macro where it is a builtin: clang requires its rounding mode as a literal.
#if defined(__AVX512F__) && TESSEL_VBYTES == 64
#if defined(__clang__)
static inline V v_sqrt(V a) { return TESSEL_IA32(sqrt, 512)(a, 4); }
#else
static inline V v_sqrt(V a) { return TESSEL_IA32(sqrt, 512_mask)(a, a, TESSEL_ALL, 4); }
#endif
#define v_rnd(a, mode) TESSEL_IA32(rndscale, _mask)((a), (mode), (a), TESSEL_ALL, 4)
#elif defined(__AVX__) && TESSEL_VBYTES == 32
static inline V v_sqrt(V a) { return TESSEL_IA32(sqrt, 256)(a); }
#define v_rnd(a, mode) TESSEL_IA32(round, 256)((a), (mode))
#elif defined(__SSE4_1__) && TESSEL_VBYTES == 16
static inline V v_sqrt(V a) { return TESSEL_IA32(sqrt, )(a); }
#define v_rnd(a, mode) TESSEL_IA32(round, )((a), (mode))
#else
static inline V v_sqrt(V a) { V r; for (int l = 0; l < W; ++l) r[l] = __builtin_sqrt(a[l]); return r; }
static inline V v_rnd(V a, int mode) {
  V r;
  for (int l = 0; l < W; ++l) r[l] = (mode & 3) == 1 ? __builtin_floor(a[l]) : (mode & 3) == 0 ? __builtin_nearbyint(a[l]) : __builtin_trunc(a[l]);
  return r;
}
#endif
static inline V v_floor(V a) { return v_rnd(a, 9); }   // toward -inf, no exceptions
static inline V v_trunc(V a) { return v_rnd(a, 11); }  // toward zero, no exceptions
// Halves away from zero, exactly (adding 0.5 then flooring is wrong just below 0.5).
static inline V v_round(V a) {
  V t = v_trunc(a), d = a - t;
  return t + (v_abs(d) >= bc(0.5) ? (a < bc(0.0) ? bc(-1.0) : bc(1.0)) : bc(0.0));
}
static inline V v_rsqrt(V a) { return a == bc(0.0) ? bc(0.0) : bc(1.0) / v_sqrt(a); }  // Rsqrt(0) = 0

// p * 2^n for integral n: one instruction with AVX-512; otherwise two exponent-bit halves so that
// subnormal and near-overflow results stay right.
static inline V v_scale(V p, V n) {
#if defined(__AVX512F__) && TESSEL_VBYTES == 64
  return TESSEL_IA32(scalef, 512_mask)(p, n, p, TESSEL_ALL, 4);
#else
  VI ni = __builtin_convertvector(n, VI), n2 = ni >> 1, n1 = ni - n2;
  return p * (V)((n1 + (TI)TESSEL_BIAS) << TESSEL_MANT) * (V)((n2 + (TI)TESSEL_BIAS) << TESSEL_MANT);
#endif
}

// exp: x = n ln2 + r with |r| <= ln2/2, n rounded by adding 1.5 * 2^MANT (its low mantissa bits
// then hold n as an integer: no conversion). e^r: Taylor to degree 12 (double), or a degree-6
// near-minimax polynomial in Horner form (float: 6 FMAs, 0.87 ulp over |r| <= ln2/2 against 0.82
// for the 1 + r + r^2 P(r) form it replaced, which took 9 operations).
// Clamping makes overflow give inf and underflow give 0 through the scaling, and NaN stays NaN.
static inline V v_exp(V x) {
#if TESSEL_F64
  V xc = v_min(bc(710.0), v_max(bc(-746.0), x));  // this argument order lets NaN through
  const V shift = bc(6755399441055744.0 + TESSEL_BIAS - 1);  // 1.5 * 2^52, with the bias
  V t = xc * bc(1.4426950408889634) + shift;
  V n = t - shift;
  V r = xc - n * bc(0.693145751953125) - n * bc(1.4286068203094172321e-6);
  V p = bc(1.0 / 479001600.0);
  p = p * r + bc(1.0 / 39916800.0);
  p = p * r + bc(1.0 / 3628800.0);
  p = p * r + bc(1.0 / 362880.0);
  p = p * r + bc(1.0 / 40320.0);
  p = p * r + bc(1.0 / 5040.0);
  p = p * r + bc(1.0 / 720.0);
  p = p * r + bc(1.0 / 120.0);
  p = p * r + bc(1.0 / 24.0);
  p = p * r + bc(1.0 / 6.0);
  p = p * r + bc(0.5);
  p = p * (r * r) + r + bc(1.0);
#if defined(__AVX512F__) && TESSEL_VBYTES == 64
  return v_scale(p, n);
#else
  // Below AVX-512 v_scale converts n to integers lane by lane. When no lane's result is
  // subnormal (x >= -707, n >= -1020), 2^(n-1) from t's bits times 2 p is exact (n up to 1024:
  // x just below ln DBL_MAX stays finite); the rare vectors with a tiny result take v_scale.
  if (v_any(xc < bc(-707.0))) return v_scale(p, n);
  return (p + p) * (V)((VI)t << TESSEL_MANT);
#endif
#else
#if defined(__AVX512F__) && TESSEL_VBYTES == 64
  // scalef gives subnormal results exactly (the FTZ mode then flushes them, as everywhere).
  V xc = v_min(bc(89.0), v_max(bc(-104.0), x));
  const V shift = bc(12582912.0);  // 1.5 * 2^23
#define TESSEL_EXP_K 1.0
#else
  // Without scalef, 2^(n-1) is built from n's bits with one shift. n - 1 + BIAS stays in [0, 254]
  // for n in [-126, 128]: n = 128 (x just below ln FLT_MAX) stays finite, x > 88.73 gives inf, and
  // results below 1.7e-38 (2^-125.5) are 0 (float kernels flush subnormals anyway: TESSEL_FTZ_*).
  // The shift constant carries the bias, and the polynomial's coefficients are doubled (exactly).
  V xc = v_min(bc(89.0), v_max(bc(-87.5), x));
  const V shift = bc(12582912.0 + TESSEL_BIAS - 1);
#define TESSEL_EXP_K 2.0
#endif
  V t = xc * bc(1.4426950408889634) + shift;
  V n = t - shift;
  V r = xc - n * bc(0.693145751953125) - n * bc(1.4286068203094172321e-6);
  V p = bc(TESSEL_EXP_K * 0.00138368458);
  p = p * r + bc(TESSEL_EXP_K * 0.00837481581);
  p = p * r + bc(TESSEL_EXP_K * 0.0416682251);
  p = p * r + bc(TESSEL_EXP_K * 0.166664198);
  p = p * r + bc(TESSEL_EXP_K * 0.499999911);
  p = p * r + bc(TESSEL_EXP_K);
  p = p * r + bc(TESSEL_EXP_K);
#if defined(__AVX512F__) && TESSEL_VBYTES == 64
  return v_scale(p, n);
#else
  return p * (V)((VI)t << TESSEL_MANT);
#endif
#endif
}

// log: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m-1)/(m+1).
static inline V v_log(V x) {
#if TESSEL_F64
  const V tiny = bc(2.2250738585072014e-308);
#else
  const V tiny = bc(1.1754943508222875e-38);
#endif
  // subnormals: scale up by 2^(MANT+1) first
  V xs = x < tiny ? x * bc((double)(1ull << (TESSEL_MANT + 1))) : x;
  V adj = x < tiny ? bc(-(double)(TESSEL_MANT + 1)) : bc(0.0);
  VI bits = (VI)xs;
  VI ex = ((bits >> TESSEL_MANT) & (TI)(2 * TESSEL_BIAS + 1)) - (TI)TESSEL_BIAS;
  V m = (V)((bits & (TI)((((TU)1) << TESSEL_MANT) - 1)) | ((TI)TESSEL_BIAS << TESSEL_MANT));
  VI big = m > bc(1.4142135623730951);
  m = big ? m * bc(0.5) : m;
#if TESSEL_F64 && !(defined(__AVX512DQ__) && TESSEL_VBYTES == 64)
  // int64 -> double has no instruction below AVX-512DQ (the conversion would go lane by lane):
  // ex plus the bits of 1.5 * 2^52 is that double plus ex, exactly, for |ex| < 2^51.
  V ev = (V)(ex + (VI)bc(6755399441055744.0)) - bc(6755399441055744.0);
#else
  V ev = __builtin_convertvector(ex, V);
#endif
  V e = ev + (big ? bc(1.0) : bc(0.0)) + adj;
  V s = (m - bc(1.0)) / (m + bc(1.0)), s2 = s * s;
#if TESSEL_F64
  V p = bc(2.0 / 19.0);
  p = p * s2 + bc(2.0 / 17.0);
  p = p * s2 + bc(2.0 / 15.0);
  p = p * s2 + bc(2.0 / 13.0);
  p = p * s2 + bc(2.0 / 11.0);
  p = p * s2 + bc(2.0 / 9.0);
#else
  V p = bc(2.0 / 9.0);
#endif
  p = p * s2 + bc(2.0 / 7.0);
  p = p * s2 + bc(2.0 / 5.0);
  p = p * s2 + bc(2.0 / 3.0);
  p = p * s2 + bc(2.0);
  V y = e * bc(0.6931471805599453) + s * p;
  y = x == bc(0.0) ? bc(-__builtin_inf()) : y;
  y = x < bc(0.0) ? bc(__builtin_nan("")) : y;
  y = x == bc(__builtin_inf()) ? x : y;
  return x != x ? x : y;
}

// float32 kernels flush subnormals to zero: a Gaussian tail in the subnormal range otherwise costs
// a microcode assist per operation (10-50x slower), for values below 1.2e-38 that a sum cannot
// notice. The thread's previous mode is restored on exit.
#if defined(__SSE__) && !TESSEL_F64
#define TESSEL_FTZ_ENTER const unsigned csr_ = __builtin_ia32_stmxcsr(); __builtin_ia32_ldmxcsr(csr_ | 0x8040);
#define TESSEL_FTZ_LEAVE __builtin_ia32_ldmxcsr(csr_);
#elif defined(__aarch64__) && !TESSEL_F64
// FPCR.FZ (bit 24) flushes subnormal inputs and results, as MXCSR's FTZ and DAZ do on x86.
#define TESSEL_FTZ_ENTER unsigned long fpcr_; __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr_)); __asm__ volatile("msr fpcr, %0" : : "r"(fpcr_ | (1ul << 24)));
#define TESSEL_FTZ_LEAVE __asm__ volatile("msr fpcr, %0" : : "r"(fpcr_));
#else
#define TESSEL_FTZ_ENTER
#define TESSEL_FTZ_LEAVE
#endif

// Horizontal helpers.
static inline double hsum(V v) { double s = 0; for (int l = 0; l < W; ++l) s += v[l]; return s; }
static inline double hsum_d(VD v) { double s = 0; for (int l = 0; l < W; ++l) s += v[l]; return s; }
)PRELUDE";

// The libm primitives go lane by lane: they are rare in kernel formulas and libm's are exact.
std::string libm_primitives() {
  std::string s;
  auto add = [&](const char* name, int arity) {
    const std::string params = arity == 1 ? "V x" : "V x, V y";
    const std::string lanes = arity == 1 ? "x[l]" : "x[l], y[l]";
    s += "static inline V v_" + std::string(name) + "(" + params +
         ") { V r; for (int l = 0; l < W; ++l) r[l] = __builtin_" + name + "(" + lanes +
         "); return r; }\n";
  };
#define TESSEL_CPU_PRIMITIVE(name, ar, value) add(#name, ar);
  TESSEL_LIBM_PRIMITIVES(TESSEL_CPU_PRIMITIVE)
#undef TESSEL_CPU_PRIMITIVE
  return s;
}

}  // namespace

const char* cpu_prelude() {
  static const std::string s = kPrelude + libm_primitives();
  return s.c_str();
}

}  // namespace tessel
