// One dim-3 formula that uses every complex op, for the kernel tests that cover the op table.
#pragma once

#include "tessel/formula.hpp"

namespace tessel::testing {

// x, y: dim-3 variables with values in [-1.5, 1.5]; every denominator stays away from 0.
inline Formula complex_ops_sample(const Formula& x, const Formula& y) {
  const Formula a = x - y, s = a[0], pos = square(a) + 0.5;
  const Formula zx = concat(x, y), zy = concat(y, a), z1 = extract(a, 0, 2);
  const Formula den = complex_add(real2complex(pos), imag2complex(x));
  return complex_real(complex_add(zx, z1)) + complex_imag(complex_sub(zx, zy)) +
         complex_real(complex_mult(zx, zy)) + complex_imag(complex_divide(zx, den)) +
         complex_imag(conj(zx)) + complex_imag(complex_exp(zx)) + complex_square_abs(zx) +
         complex_abs(zy) + complex_angle(zx) + complex_imag(complex_exp1j(a)) +
         complex_real(complex_mult(imag2complex(x), zy)) + complex_real(complex_real_scal(s, zx)) +
         complex_imag(complex_sum_t(complex_sum(zx), 6));
}

}  // namespace tessel::testing
