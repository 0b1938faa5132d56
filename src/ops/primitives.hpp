// The math primitives every scalar type provides, declared once as X-macro lists.
//
// Op definitions (ops/*.cpp) are written over a scalar S and call these as t_<name>. Each list
// entry X(name, arity, value) generates the float64 form t_<name>(double...) (the reference),
// the interpreter's lane form, the declaration of the code-generation form (codegen/emitter.cpp
// defines it as a call of v_<name>). `value` is the float64 result, written in lanes x, y, z, w.
//
// Two lists, by how the kernels implement v_<name>:
// - TESSEL_KERNEL_PRIMITIVES: hand-vectorised in each kernel prelude (codegen/cpu_prelude.cpp, the
//   CUDA prelude in codegen/cuda_codegen.cpp), because they are hot (exp, log) or need care there.
// - TESSEL_LIBM_PRIMITIVES: a libm function of the same name, which both preludes generate from
//   this list (the CPU one lane by lane). A new libm function is one line here and nothing else;
//   an op written from existing primitives (Sinc) needs no line at all.
#pragma once

#include <cmath>

// Rsqrt(0) = 0, as in KeOps: the derivatives of Sqrt, Norm2 and Normalize are written through it,
// so they vanish at 0 instead of giving 0 * inf = NaN (docs/conventions.md). min/max return the
// second operand when the first is NaN, like the SIMD instructions. lt/le/eq are selections:
// (x < y) ? z : w and so on.
#define TESSEL_KERNEL_PRIMITIVES(X)            \
  X(exp, 1, std::exp(x))                       \
  X(log, 1, std::log(x))                       \
  X(sqrt, 1, std::sqrt(x))                     \
  X(rsqrt, 1, x == 0.0 ? 0.0 : 1.0 / std::sqrt(x)) \
  X(floor, 1, std::floor(x))                   \
  X(round, 1, std::round(x))                   \
  X(abs, 1, std::fabs(x))                      \
  X(min, 2, x < y ? x : y)                     \
  X(max, 2, x > y ? x : y)                     \
  X(lt, 4, x < y ? z : w)                      \
  X(le, 4, x <= y ? z : w)                     \
  X(eq, 4, x == y ? z : w)

// Rare in kernel formulas, and libm's are correctly rounded or nearly so: called lane by lane.
#define TESSEL_LIBM_PRIMITIVES(X) \
  X(sin, 1, std::sin(x))          \
  X(cos, 1, std::cos(x))          \
  X(asin, 1, std::asin(x))        \
  X(acos, 1, std::acos(x))        \
  X(atan, 1, std::atan(x))        \
  X(atan2, 2, std::atan2(x, y))

#define TESSEL_PRIMITIVES(X) TESSEL_KERNEL_PRIMITIVES(X) TESSEL_LIBM_PRIMITIVES(X)

// Parameter lists by arity, for the generated signatures: TESSEL_PARAMS_<arity>(type).
#define TESSEL_PARAMS_1(T) T x
#define TESSEL_PARAMS_2(T) T x, T y
#define TESSEL_PARAMS_4(T) T x, T y, T z, T w
