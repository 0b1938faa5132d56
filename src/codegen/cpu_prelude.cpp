// The header every generated CPU kernel starts with: the lane-vector type V and vectorised math.
//
// It uses GCC/Clang vector extensions rather than <immintrin.h>: that header alone costs ~0.35 s
// of compile time per kernel, and vector extensions map to whatever width the target has. The
// few operations extensions lack (sqrt, floor, trunc) use target builtins, with a lane-loop
// fallback on other targets (on aarch64 the compiler turns those loops into NEON fsqrt/frint*).
// exp and log are our own polynomials: no libm call in the hot loop.
#include "codegen/cpu_codegen.hpp"

#include <set>
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

// The libm primitives as lane loops, libm_<name>: the fallback of our vectorised versions (huge
// arguments), and v_<name> itself for a libm function that has none yet (one line in
// TESSEL_LIBM_PRIMITIVES is then all a new one needs).
std::string libm_primitives() {
  static const std::set<std::string> vectorised = {"sin", "cos", "asin", "acos", "atan", "atan2"};
  std::string s;
  auto add = [&](const char* name, int arity) {
    const std::string params = arity == 1 ? "V x" : "V x, V y";
    const std::string lanes = arity == 1 ? "x[l]" : "x[l], y[l]";
    const std::string fn = vectorised.count(name) ? "libm_" : "v_";
    s += "static inline V " + fn + name + "(" + params +
         ") { V r; for (int l = 0; l < W; ++l) r[l] = __builtin_" + name + "(" + lanes +
         "); return r; }\n";
  };
#define TESSEL_CPU_PRIMITIVE(name, ar, value) add(#name, ar);
  TESSEL_LIBM_PRIMITIVES(TESSEL_CPU_PRIMITIVE)
#undef TESSEL_CPU_PRIMITIVE
  return s;
}

// sin, cos, asin, acos, atan, atan2 on whole vectors: range reduction, then polynomials in r^2
// fitted (near-minimax, relative error) on the reduced interval, coefficients rounded to T; the
// fits' own error is below 0.07 ulp, the rest is rounding. The maximum errors measured against
// long double over 2e6 random arguments per range, at every SIMD level, are next to each function
// and in README.md ("Accuracy of elementary functions"); tests/cpp/test_compiled_trig.cpp holds
// the kernels to them. Special values are libm's (NaN, infinities, signed zeros).
const char* kTrig = R"TRIG(
// c0 + z (c1 + z (c2 + ...)): Horner's scheme, unrolled at compile time.
static inline V v_poly(V z, double c) { (void)z; return bc(c); }
template <class... C> static inline V v_poly(V z, double c, C... cs) { return v_poly(z, cs...) * z + bc(c); }
#define TESSEL_SIGN ((TI)((TU)1 << (8 * sizeof(T) - 1)))
static inline V v_copysign(V mag, V s) { return (V)(((VI)mag & ~TESSEL_SIGN) | ((VI)s & TESSEL_SIGN)); }
// pi/2 in parts (Cody-Waite): q * C_k is exact for |x| <= TESSEL_TRIG_BOUND, so that x - q pi/2
// loses nothing to cancellation; the last part carries the rest (error q * 1e-37 or q * 2e-21).
#if TESSEL_F64
#define TESSEL_TRIG_BOUND 1.6e6  // |q| <= 2^20
#define TESSEL_PIO2_HI 0x1.921fb54442d18p+0
#define TESSEL_PIO2_LO 0x1.1a62633145c07p-54
#define TESSEL_P3O4_HI 0x1.2d97c7f3321d2p+1
#define TESSEL_P3O4_LO 0x1.a79394c9e8a0ap-54
#define TESSEL_TINY 0x1p-26  // below this sin x rounds to x
#else
#define TESSEL_TRIG_BOUND 5.1e4  // |q| <= 2^15
#define TESSEL_PIO2_HI 0x1.921fb6p+0
#define TESSEL_PIO2_LO -0x1.777a5cp-25
#define TESSEL_P3O4_HI 0x1.2d97c8p+1
#define TESSEL_P3O4_LO -0x1.99bc5cp-28
#define TESSEL_TINY 0x1p-12
#endif
// x = q pi/2 + r + lo, |r| <= pi/4 (a hair more where q's rounding is off by the last bit), lo
// the rounding error of r; sets *quad to q's low bits. Adding 1.5 * 2^MANT rounds to an integer
// whose low bits are q's, without a float -> int conversion (AVX2 has none for doubles). The last
// two subtractions keep their rounding errors (Fast2Sum): only there can r be rounded.
static inline V v_trig_reduce(V x, VI* quad, V* lo) {
  const V magic = bc(1.5 * (double)(1ull << TESSEL_MANT));
  const V k = x * bc(0.63661977236758134308) + magic;
  const V q = k - magic;
  *quad = (VI)k;
#if TESSEL_F64
  const V r1 = x - q * bc(0x1.921fb544p+0), c2 = q * bc(0x1.0b4611a6p-34);
  const V c3 = q * bc(0x1.3198a2e037073p-69);
#else
  V r1 = x - q * bc(0x1.92p+0);
  r1 = r1 - q * bc(0x1.fbp-12);
  r1 = r1 - q * bc(0x1.51p-22);
  const V c2 = q * bc(0x1.0bp-34), c3 = q * bc(0x1.184698p-44);
#endif
  const V r2 = r1 - c2, e2 = (r1 - r2) - c2;
  const V r = r2 - c3;
  *lo = ((r2 - r) - c3) + e2;
  return r;
}
// sin(r + lo + quad pi/2) for |r| <= pi/4: sin or cos by quad's bit 0, negated by its bit 1.
// cos keeps 1 - z/2's rounding error apart ((1 - w) - z/2 is exact), as that term dominates.
static inline V v_sincos_eval(V r, V lo, VI quad) {
  const V z = r * r;
#if TESSEL_F64
  const V ps = v_poly(z, -0x1.5555555555555p-3, 0x1.1111111111110p-7, -0x1.a01a01a019915p-13,
                     0x1.71de3a545c528p-19, -0x1.ae64540b5fd2ap-26, 0x1.612179307404ep-33,
                     -0x1.ab146173ec9f9p-41);
  const V pc = v_poly(z, 0x1.5555555555555p-5, -0x1.6c16c16c16c16p-10, 0x1.a01a01a019cfbp-16,
                     -0x1.27e4fb7710f07p-22, 0x1.1eed8de84c9c1p-29, -0x1.9394b4d6238cfp-37,
                     0x1.ab754940bd63fp-45);
#else
  const V ps = v_poly(z, -0x1.555556p-3, 0x1.11110ep-7, -0x1.a0139cp-13, 0x1.6db9f6p-19);
  const V pc = v_poly(z, 0x1.555554p-5, -0x1.6c12ccp-10, 0x1.9bd47cp-16);
#endif
  const V s = r + (lo + r * z * ps);
  const V hz = bc(0.5) * z, w = bc(1.0) - hz;
  const V c = w + (((bc(1.0) - w) - hz) + (z * z * pc - r * lo));
  const V v = (quad & (TI)1) ? c : s;
  return (V)((VI)v ^ ((quad & (TI)2) << (8 * sizeof(T) - 2)));
}
// NaN, ±inf and |x| beyond the exact reduction take libm for the whole vector: one test per call.
static inline bool v_trig_huge(V x) { return v_any(~(v_abs(x) <= bc(TESSEL_TRIG_BOUND))); }
// float 1.6 ulp, double 1.0 ulp
static inline V v_sin(V x) {
  VI quad;
  V lo;
  const V r = v_trig_reduce(x, &quad, &lo);
  const V y = v_abs(x) < bc(TESSEL_TINY) ? x : v_sincos_eval(r, lo, quad);  // keeps -0
  return v_trig_huge(x) ? libm_sin(x) : y;
}
// float 1.6 ulp, double 1.0 ulp
static inline V v_cos(V x) {
  VI quad;
  V lo;
  const V r = v_trig_reduce(x, &quad, &lo);
  const V y = v_sincos_eval(r, lo, quad + (TI)1);
  return v_trig_huge(x) ? libm_cos(x) : y;
}

// asin on [0, 1]: a itself up to 1/2, else pi/2 - 2 asin(s) with s = sqrt((1 - a) / 2) <= 1/2
// (1 - a is exact there). Returns asin of the reduced argument as hi + *lo, hi = a or s cut to
// half its bits (so hi^2 and pi/2 - 2 hi are exact) and *lo carrying the rest of s (s - hi plus
// sqrt's rounding error) and the polynomial u z P(z): the doubling would double their errors.
static inline V v_asin_reduced(V a, VI big, V* lo) {
  const V z = big ? (bc(1.0) - a) * bc(0.5) : a * a;
  const V u = big ? v_sqrt(z) : a;  // a > 1 gives sqrt(< 0) = NaN
  const V uh = big ? (V)((VI)u & ~(((TI)1 << ((TESSEL_MANT + 2) / 2)) - 1)) : u;
  const V du = (big & (z > bc(0.0))) ? (z - uh * uh) / (u + uh) : bc(0.0);  // 0/0 at a = 1
#if TESSEL_F64
  const V p = v_poly(z, 0x1.5555555555556p-3, 0x1.3333333332e87p-4, 0x1.6db6db6e3844bp-5,
                     0x1.f1c71c19f8d29p-6, 0x1.6e8bb25868b49p-6, 0x1.1c4d28ea04196p-6,
                     0x1.c9d07d4d03ddbp-7, 0x1.78186416c6a4ep-7, 0x1.529a9bba29802p-7,
                     0x1.62c22a53244ebp-8, 0x1.1f0750c0651fcp-6, -0x1.ec92eb603f636p-7,
                     0x1.d924a1e3b6e41p-6);
#else
  const V p = v_poly(z, 0x1.555554p-3, 0x1.33343cp-4, 0x1.6d58dap-5, 0x1.fdce9ep-6, 0x1.17cdbcp-6,
                     0x1.14efcap-5);
#endif
  *lo = du + u * z * p;
  return uh;
}
// float 0.7 ulp, double 0.7 ulp
static inline V v_asin(V x) {
  const V a = v_abs(x);
  const VI big = a > bc(0.5);
  V lo;
  const V hi = v_asin_reduced(a, big, &lo);
  const V d = bc(TESSEL_PIO2_HI) - bc(2.0) * hi, e = (bc(TESSEL_PIO2_HI) - d) - bc(2.0) * hi;
  const V y = big ? d + ((e + bc(TESSEL_PIO2_LO)) - bc(2.0) * lo) : hi + lo;
  return v_copysign(y, x);  // NaN stays NaN whatever its sign
}
// acos x = pi/2 - asin x for |x| <= 1/2, 2 asin(s) above, pi - 2 asin(s) below.
// float 0.9 ulp, double 1.0 ulp
static inline V v_acos(V x) {
  const V a = v_abs(x);
  const VI big = a > bc(0.5);
  V lo;
  const V hi = v_asin_reduced(a, big, &lo);
  const V small = bc(TESSEL_PIO2_HI) - (v_copysign(hi + lo, x) - bc(TESSEL_PIO2_LO));
  const V neg = (bc(2.0 * TESSEL_PIO2_HI) - bc(2.0) * hi) + (bc(2.0 * TESSEL_PIO2_LO) - bc(2.0) * lo);
  return big ? (x < bc(0.0) ? neg : bc(2.0) * hi + bc(2.0) * lo) : small;
}

// atan2: t = the tangent of the angle left after taking off 0, pi/4 or pi/2 (|t| <= tan(pi/8)),
// chosen by comparing |y| with |x| tan(pi/8) and |x| with |y| tan(pi/8), products that cannot
// overflow. Both tiny: scaled up first so that the products stay exact; either huge: scaled down
// so that |y| + |x| stays finite. Equal magnitudes (0/0, inf/inf) give t = 0 exactly.
// float 2.1 ulp, double 2.3 ulp (atan too): t's rounding, where the result is near 0.4
static inline V v_atan2(V y, V x) {
  V ay = v_abs(y), ax = v_abs(x);
#if TESSEL_F64
  const V small = bc(0x1p-1000), large = bc(0x1p1000);
#else
  const V small = bc(0x1p-100), large = bc(0x1p100);
#endif
  const VI tiny = (ay < small) & (ax < small), huge = (ay > large) | (ax > large);
  const V scale = huge ? bc(0.25) : tiny ? bc((double)(1ull << (TESSEL_MANT + 1))) : bc(1.0);
  ay = ay * scale;
  ax = ax * scale;
  const VI same = ay == ax;
  const VI big = ax < ay * bc(0.41421356237309504880);
  const VI mid = (ay > ax * bc(0.41421356237309504880)) | (same & (ax > bc(0.0)));
  const V num = big ? -ax : mid ? ay - ax : ay;
  const V den = big ? ay : mid ? ay + ax : ax;
  const V t = same ? bc(0.0) : num / den;
  const V z = t * t;
#if TESSEL_F64
  const V p = v_poly(z, -0x1.5555555555555p-2, 0x1.9999999999375p-3, -0x1.2492492438006p-3,
                     0x1.c71c71865005ap-4, -0x1.745d0b5084da1p-4, 0x1.3b126659c1f75p-4,
                     -0x1.10faa2f3c070ep-4, 0x1.dfe9020699adbp-5, -0x1.a0a6d95f7e97ap-5,
                     0x1.4186695302145p-5, -0x1.3a83583fa3663p-6);
#else
  const V p = v_poly(z, -0x1.555554p-2, 0x1.99973cp-3, -0x1.242188p-3, 0x1.b8285ep-4,
                     -0x1.088a5cp-4);
#endif
  const V u = t + t * z * p;
  // x < 0 (-0 included) mirrors the angle: pi - (base + u), the constant pi - base in two parts.
  const VI neg = (VI)x < (TI)0;
  const V hi = big ? bc(TESSEL_PIO2_HI)
               : mid ? (neg ? bc(TESSEL_P3O4_HI) : bc(0.5 * TESSEL_PIO2_HI))
                     : (neg ? bc(2.0 * TESSEL_PIO2_HI) : bc(0.0));
  const V lo = big ? bc(TESSEL_PIO2_LO)
               : mid ? (neg ? bc(TESSEL_P3O4_LO) : bc(0.5 * TESSEL_PIO2_LO))
                     : (neg ? bc(2.0 * TESSEL_PIO2_LO) : bc(0.0));
  return v_copysign(hi + ((neg ? -u : u) + lo), y);
}
static inline V v_atan(V x) { return v_atan2(x, bc(1.0)); }
)TRIG";

}  // namespace

const char* cpu_prelude() {
  static const std::string s = kPrelude + libm_primitives() + kTrig;
  return s.c_str();
}

}  // namespace tessel
