// Scalars for recursions run backwards and forwards: adjoint slots and (nested) dual numbers.
//
// An op whose value is a loop over components (SoftDTW_SqDist) writes its reverse sweep once over
// a scalar S; running that sweep over Dual<S> (value and tangent, nested for higher orders) gives
// the contraction of the next derivative with tangent directions, still over double, Lanes and
// Expr, so the derivative ops get their float64 reference, interpreter and kernel code the same
// way as the value.
#pragma once

#include <optional>
#include <type_traits>

#include "ops/op.hpp"

namespace tessel {

// acc += v, where an empty slot is a zero not yet written (no "0 +" in the emitted code).
template <class S>
void accumulate(std::optional<S>& acc, const S& v) {
  acc = acc ? *acc + v : v;
}
template <class S>
S value_or_zero(const std::optional<S>& s) {
  return s ? *s : S(0.0);
}

// v + d eps with eps^2 = 0. Dual<Dual<S>> carries two independent tangents, and so on.
template <class S>
struct Dual {
  S v, d;
  Dual(double c) : v(c), d(0.0) {}  // NOLINT: constants broadcast, as for the other scalars
  Dual(S value, S tangent) : v(std::move(value)), d(std::move(tangent)) {}
};
template <class S>
Dual<S> operator+(const Dual<S>& a, const Dual<S>& b) {
  return {a.v + b.v, a.d + b.d};
}
template <class S>
Dual<S> operator-(const Dual<S>& a, const Dual<S>& b) {
  return {a.v - b.v, a.d - b.d};
}
template <class S>
Dual<S> operator*(const Dual<S>& a, const Dual<S>& b) {
  return {a.v * b.v, a.d * b.v + a.v * b.d};
}
template <class S>
Dual<S> operator/(const Dual<S>& a, const Dual<S>& b) {
  const S q = a.v / b.v;
  return {q, (a.d - q * b.d) / b.v};
}
template <class S>
Dual<S> operator-(const Dual<S>& a) {
  return {-a.v, -a.d};
}
template <class S>
Dual<S> t_exp(const Dual<S>& a) {
  const S e = t_exp(a.v);
  return {e, e * a.d};
}
template <class S>
Dual<S> t_log(const Dual<S>& a) {
  return {t_log(a.v), a.d / a.v};
}
// Selections pick the tangent with the value (a one-sided derivative at a tie).
template <class S>
Dual<S> t_min(const Dual<S>& a, const Dual<S>& b) {
  return {t_min(a.v, b.v), t_lt(a.v, b.v, a.d, b.d)};
}
template <class S>
Dual<S> t_eq(const Dual<S>& x, const Dual<S>& y, const Dual<S>& z, const Dual<S>& w) {
  return {t_eq(x.v, y.v, z.v, w.v), t_eq(x.v, y.v, z.d, w.d)};
}
template <class S>
Dual<S> t_lt(const Dual<S>& x, const Dual<S>& y, const Dual<S>& z, const Dual<S>& w) {
  return {t_lt(x.v, y.v, z.v, w.v), t_lt(x.v, y.v, z.d, w.d)};
}

// T = Dual^k<S>: the constant s (every tangent 0).
template <class T, class S>
T lift(const S& s) {
  if constexpr (std::is_same_v<T, S>) {
    return s;
  } else {
    using U = decltype(T::v);
    return T(lift<U>(s), U(0.0));
  }
}
// T = Dual^k<S>: the input a moving along w[0], ..., w[k-1], one direction per nesting level.
template <class T, class S>
T seed(const S& a, const S* w, int k) {
  if constexpr (std::is_same_v<T, S>) {
    return a;
  } else {
    using U = decltype(T::v);
    return T(seed<U>(a, w, k - 1), lift<U>(w[k - 1]));
  }
}
// The mixed derivative along every direction: the innermost tangent of the tangents.
template <class S, class T>
S mixed(const T& t) {
  if constexpr (std::is_same_v<T, S>) {
    return t;
  } else {
    return mixed<S>(t.d);
  }
}

}  // namespace tessel
