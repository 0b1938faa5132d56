// A Gaussian-process kernel's products, rows and diagonal as Sum reductions of its formula, and
// the input checks the GP functions share.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "algos/gp_internal.hpp"
#include "ir/node.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace gp_detail {

int64_t check_points(const char* who, const GpKernel& kern, const ArrayView& x, const char* what) {
  if (!kern.k.valid()) detail::fail(who, "the kernel formula is null");
  if (kern.k.dim() != 1)
    detail::fail(who, "the kernel formula ", kern.k.str(), " has dim ", kern.k.dim(),
                 "; expected a scalar k(x_i, x_j)");
  int dim_i = -1, dim_j = -1;
  for (const Formula& v : variables(kern.k)) {
    const Node& n = v.node();
    if (n.var_index() == kern.xi) {
      if (n.var_cat() != Category::I)
        detail::fail(who, "variable ", kern.xi, " (xi) must be an i-variable in ", kern.k.str());
      dim_i = v.dim();
    } else if (n.var_index() == kern.xj) {
      if (n.var_cat() != Category::J)
        detail::fail(who, "variable ", kern.xj, " (xj) must be a j-variable in ", kern.k.str());
      dim_j = v.dim();
    } else if (n.var_cat() != Category::Param) {
      detail::fail(who, "the kernel formula may hold the points (variables ", kern.xi, " and ",
                   kern.xj, ") and parameters only; variable ", n.var_index(), " is indexed");
    }
  }
  if (dim_i < 0 || dim_j < 0)
    detail::fail(who, "the kernel formula ", kern.k.str(), " must use the points as variable ",
                 kern.xi, " (i) and ", kern.xj, " (j)");
  if (dim_i != dim_j)
    detail::fail(who, "the points have dim ", dim_i, " as xi but ", dim_j, " as xj");
  if (x.dtype != DType::Float32 && x.dtype != DType::Float64)
    detail::fail_type(who, what, " has dtype ", dtype_name(x.dtype),
                      "; expected float32 or float64 (convert half-precision points first)");
  if (x.device.kind != DeviceKind::CPU)
    detail::fail(who, what, " must be a host array (GP vectors live on the host)");
  const bool shape_ok =
      (x.shape.size() == 2 && x.shape[1] == dim_i) || (x.shape.size() == 1 && dim_i == 1);
  if (!shape_ok)
    detail::fail(who, what, " has ", x.shape.size() == 2 ? std::to_string(x.shape[1]) : "no",
                 " columns; expected shape (n, ", dim_i, ") as the kernel's points");
  if (x.shape[0] < 1) detail::fail(who, what, " holds no points");
  for (double v : read_points(x))
    if (!std::isfinite(v)) detail::fail(who, what, " holds a NaN or an infinity");
  return x.shape[0];
}

std::vector<double> noise_diagonal(const char* who, std::span<const double> noise, int64_t n) {
  if (noise.size() != 1 && static_cast<int64_t>(noise.size()) != n)
    detail::fail(who, "noise holds ", noise.size(), " values; expected 1 or n = ", n);
  for (double s : noise)
    if (!(s >= 0) || !std::isfinite(s))
      detail::fail(who, "the noise variance must be finite and >= 0, got ", s);
  if (noise.size() == 1) return std::vector<double>(static_cast<size_t>(n), noise[0]);
  return {noise.begin(), noise.end()};
}

void check_duplicates(const char* who, const ArrayView& x, const std::vector<double>& noise) {
  if (*std::min_element(noise.begin(), noise.end()) > 0) return;
  const std::vector<double> p = read_points(x);
  const int64_t n = x.shape[0], d = x.shape.size() == 2 ? x.shape[1] : 1;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  auto row = [&](int64_t i) { return p.begin() + i * d; };
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return std::lexicographical_compare(row(a), row(a) + d, row(b), row(b) + d);
  });
  for (size_t q = 1; q < order.size(); ++q) {
    const int64_t a = order[q - 1], b = order[q];
    if (std::equal(row(a), row(a) + d, row(b)) && (noise[a] == 0 || noise[b] == 0))
      detail::fail(who, "points ", std::min(a, b), " and ", std::max(a, b),
                   " are equal and the noise is 0 there: K + noise is singular; give a "
                   "positive noise (or a jitter) or remove duplicates");
  }
}

std::vector<double> read_points(const ArrayView& x) {
  const int64_t n = x.shape[0], d = x.shape.size() == 2 ? x.shape[1] : 1;
  const int64_t s0 = x.stride(0), s1 = x.shape.size() == 2 ? x.stride(1) : 0;
  std::vector<double> out(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c)
      out[i * d + c] = x.dtype == DType::Float32
                           ? static_cast<const float*>(x.data)[i * s0 + c * s1]
                           : static_cast<const double*>(x.data)[i * s0 + c * s1];
  return out;
}

void check_size(const char* who, const char* what, size_t got, int64_t size) {
  if (static_cast<int64_t>(got) != size)
    detail::fail(who, what, " holds ", got, " values; expected ", size);
}

bool cholesky(std::vector<double>& a, int64_t k) {
  for (int64_t c = 0; c < k; ++c) {
    double s = a[c * k + c];
    for (int64_t q = 0; q < c; ++q) s -= a[c * k + q] * a[c * k + q];
    if (!(s > 0)) return false;
    const double l = std::sqrt(s);
    a[c * k + c] = l;
    for (int64_t r = c + 1; r < k; ++r) {
      double t = a[r * k + c];
      for (int64_t q = 0; q < c; ++q) t -= a[r * k + q] * a[c * k + q];
      a[r * k + c] = t / l;
    }
    for (int64_t r = 0; r < c; ++r) a[r * k + c] = 0;
  }
  return true;
}

void cholesky_solve(const std::vector<double>& l, int64_t k, double* b) {
  for (int64_t r = 0; r < k; ++r) {
    double s = b[r];
    for (int64_t q = 0; q < r; ++q) s -= l[r * k + q] * b[q];
    b[r] = s / l[r * k + r];
  }
  for (int64_t r = k - 1; r >= 0; --r) {
    double s = b[r];
    for (int64_t q = r + 1; q < k; ++q) s -= l[q * k + r] * b[q];
    b[r] = s / l[r * k + r];
  }
}

Array to_array(std::span<const double> v, int64_t rows, int64_t cols, DType dtype) {
  Array a(dtype, {rows, cols});
  if (dtype == DType::Float32)
    std::copy(v.begin(), v.end(), a.as<float>());
  else
    std::copy(v.begin(), v.end(), a.as<double>());
  return a;
}

std::vector<ArrayView> reduction_inputs(const GpKernel& kern, const Formula& f, const ArrayView& xi,
                                        const ArrayView& xj, int slot, const ArrayView& extra) {
  std::vector<ArrayView> in(static_cast<size_t>(slot) + 1);
  for (const Formula& u : variables(f)) {
    const int q = u.node().var_index();
    if (q == kern.xi)
      in[q] = xi;
    else if (q == kern.xj)
      in[q] = xj;
    else if (static_cast<size_t>(q) < kern.inputs.size())
      in[q] = kern.inputs[q];
    else
      detail::fail("gp", "the kernel's inputs hold no array for variable ", q);
  }
  in[slot] = extra;
  return in;
}

int next_slot(const Formula& f) {
  int top = -1;
  for (const Formula& u : variables(f)) top = std::max(top, u.node().var_index());
  return top + 1;
}

}  // namespace gp_detail

namespace {

using gp_detail::check_points;
using gp_detail::to_array;

void from_array(const Array& a, std::span<double> out) {
  for (int64_t q = 0; q < a.size(); ++q) out[q] = a.at(q);
}

// out[:, :m] = Sum over the reduced index of k * V, V the new variable top + 1 of width m: over j
// (axis 1, V a j-variable) or over i (axis 0, V an i-variable).
void reduce_with(const GpKernel& kern, const Formula& k, int axis, const ArrayView& xi,
                 const ArrayView& xj, const Array& v, std::span<double> out, Sizes sizes = {}) {
  const int slot = gp_detail::next_slot(k);
  const int m = static_cast<int>(v.shape()[1]);
  const Formula w = axis == 1 ? vj(slot, m) : vi(slot, m);
  const Reduction r(ReductionOp::Sum, k * w, axis);
  const std::vector<ArrayView> in = gp_detail::reduction_inputs(kern, k, xi, xj, slot, v.view());
  const std::vector<Array> res = evaluate(r, std::span<const ArrayView>(in), kern.eval, sizes);
  from_array(res[0], out);
}

Array gather_rows(const ArrayView& x, std::span<const int64_t> rows) {
  const std::vector<double> p = gp_detail::read_points(x);
  const int64_t n = x.shape[0], d = x.shape.size() == 2 ? x.shape[1] : 1;
  std::vector<double> g(rows.size() * static_cast<size_t>(d));
  for (size_t q = 0; q < rows.size(); ++q) {
    if (rows[q] < 0 || rows[q] >= n)
      detail::fail("gp_kernel_rows", "row ", rows[q], " is out of range for ", n, " points");
    std::copy(p.begin() + rows[q] * d, p.begin() + (rows[q] + 1) * d, g.begin() + q * d);
  }
  return to_array(g, static_cast<int64_t>(rows.size()), d, x.dtype);
}

}  // namespace

void gp_kernel_product(const GpKernel& kern, const ArrayView& x1, const ArrayView& x2,
                       std::span<const double> v, int64_t m, std::span<double> out) {
  constexpr const char* who = "gp_kernel_product";
  const int64_t n1 = check_points(who, kern, x1, "x1"), n2 = check_points(who, kern, x2, "x2");
  if (x1.dtype != x2.dtype) detail::fail_type(who, "x1 and x2 have different dtypes");
  if (m < 1) detail::fail(who, "m (the columns of v) must be >= 1, got ", m);
  gp_detail::check_size(who, "v", v.size(), n2 * m);
  gp_detail::check_size(who, "out", out.size(), n1 * m);
  reduce_with(kern, kern.k, 1, x1, x2, to_array(v, n2, m, x2.dtype), out);
}

void gp_kernel_cross_rows(const GpKernel& kern, const ArrayView& p, const ArrayView& x2,
                          std::span<double> out) {
  constexpr const char* who = "gp_kernel_cross_rows";
  const int64_t c = check_points(who, kern, p, "p"), n2 = check_points(who, kern, x2, "x2");
  if (p.dtype != x2.dtype) detail::fail_type(who, "p and x2 have different dtypes");
  gp_detail::check_size(who, "out", out.size(), c * n2);
  // Reduced over i against the identity: column q of the result is row q of K(p, x2). One row
  // (the preconditioner's pivots) alone; more in blocks of kRowBlock rows against an identity of
  // that width, the last block's missing columns zero: one compiled kernel whatever c, where a
  // c-wide identity compiled one per c (minutes for the exact mode's c = n) and cost c^2 n2.
  constexpr int64_t kRowBlock = 32;
  const int64_t width = c == 1 ? 1 : kRowBlock;
  std::vector<double> cols(static_cast<size_t>(n2 * width));
  for (int64_t q0 = 0; q0 < c; q0 += width) {
    const int64_t b = std::min(width, c - q0);
    ArrayView block = p;
    block.shape[0] = b;
    block.data = static_cast<char*>(p.data) + q0 * p.stride(0) * dtype_size(p.dtype);
    std::vector<double> eye(static_cast<size_t>(b * width), 0.0);
    for (int64_t q = 0; q < b; ++q) eye[q * width + q] = 1;
    reduce_with(kern, kern.k, 0, block, x2, to_array(eye, b, width, p.dtype), cols);
    for (int64_t j = 0; j < n2; ++j)
      for (int64_t q = 0; q < b; ++q) out[(q0 + q) * n2 + j] = cols[j * width + q];
  }
}

void gp_kernel_rows(const GpKernel& kern, const ArrayView& x, std::span<const int64_t> rows,
                    std::span<double> out) {
  check_points("gp_kernel_rows", kern, x, "x");
  const Array g = gather_rows(x, rows);
  gp_kernel_cross_rows(kern, g.view(), x, out);
}

void gp_kernel_diag(const GpKernel& kern, const ArrayView& x, std::span<double> out) {
  constexpr const char* who = "gp_kernel_diag";
  const int64_t n = check_points(who, kern, x, "x");
  gp_detail::check_size(who, "out", out.size(), n);
  const int d = x.shape.size() == 2 ? static_cast<int>(x.shape[1]) : 1;
  // k(x_i, x_i): the j-points replaced by the i-points, reduced over a single j of weight 1.
  const Formula ki = substitute(kern.k, {vj(kern.xj, d)}, {vi(kern.xi, d)});
  const std::vector<double> one{1.0};
  reduce_with(kern, ki, 1, x, ArrayView{}, to_array(one, 1, 1, x.dtype), out, Sizes{n, 1});
}

}  // namespace tessel
