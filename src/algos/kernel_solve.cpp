// Conjugate gradient on (alpha I + K) x = b for a kernel Sum reduction K linear in b, and the
// solve's gradient.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "ir/node.hpp"
#include "tessel/error.hpp"
#include "tessel/solve.hpp"

namespace tessel {

namespace {

constexpr const char* kWho = "kernel_solve";

// A 1-D (n) or 2-D (n, d) view read and written as a flat row-major vector of doubles, through
// its strides: callers pass NumPy arrays and tensors of any layout.
struct Flat {
  const ArrayView* v;
  int64_t rows, cols, s0, s1;

  explicit Flat(const ArrayView& view) : v(&view) {
    rows = view.shape[0];
    cols = view.shape.size() == 2 ? view.shape[1] : 1;
    s0 = view.stride(0);
    s1 = view.shape.size() == 2 ? view.stride(1) : 0;
  }
  int64_t size() const { return rows * cols; }

  template <class T>
  void read_as(std::vector<double>& out) const {
    const T* p = static_cast<const T*>(v->data);
    out.resize(static_cast<size_t>(size()));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        out[r * cols + c] = static_cast<double>(p[r * s0 + c * s1]);
  }
  void read(std::vector<double>& out) const {
    v->dtype == DType::Float32 ? read_as<float>(out) : read_as<double>(out);
  }
  template <class T>
  void write_as(const std::vector<double>& in, double scale) const {
    T* p = static_cast<T*>(v->data);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        p[r * s0 + c * s1] = static_cast<T>(scale * in[r * cols + c]);
  }
  void write(const std::vector<double>& in, double scale = 1.0) const {
    v->dtype == DType::Float32 ? write_as<float>(in, scale) : write_as<double>(in, scale);
  }
};

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t k = 0; k < a.size(); ++k) s += a[k] * b[k];
  return s;
}

void check_float_view(const ArrayView& v, const char* what, DType dtype,
                      const std::vector<int64_t>& shape) {
  if (v.data == nullptr && v.size() != 0) detail::fail(kWho, what, " has no data");
  if (v.device.kind != DeviceKind::CPU)
    detail::fail(kWho, what, " is on a CUDA device; expected a CPU array (the solver's vectors ",
                 "live on the host; K's other inputs may be on the GPU)");
  if (v.dtype != dtype)
    detail::fail_type(kWho, what, " has dtype ", dtype_name(v.dtype), "; expected ",
                      dtype_name(dtype), " like b");
  if (v.shape != shape) {
    std::string got, want;
    for (int64_t s : v.shape) got += (got.empty() ? "" : ", ") + std::to_string(s);
    for (int64_t s : shape) want += (want.empty() ? "" : ", ") + std::to_string(s);
    detail::fail(kWho, what, " has shape (", got, "); expected (", want, ") like b");
  }
}

// The operator v -> alpha v + K(v), K evaluated by the reduction with v in slot `var`.
class KernelOperator {
 public:
  KernelOperator(const Reduction& k, int var, std::span<const ArrayView> inputs,
                 const SolveOptions& opt)
      : k_(k), var_(var), opt_(opt), inputs_(inputs.begin(), inputs.end()) {
    validate();
    b_ = inputs_[var_];
    dtype_ = b_.dtype;
    // The products read and write contiguous scratch arrays of b's shape and dtype.
    p_buf_ = Array(dtype_, b_.shape);
    out_buf_ = Array(dtype_, b_.shape);
    inputs_[var_] = p_buf_.view();
  }

  const ArrayView& b() const { return b_; }
  DType dtype() const { return dtype_; }
  const std::vector<ArrayView>& inputs() const { return inputs_; }

  void apply(const std::vector<double>& p, std::vector<double>& out) {
    const ArrayView pv = p_buf_.view(), ov = out_buf_.view();
    Flat(pv).write(p);
    const ArrayView outs[1] = {ov};
    evaluate(k_, std::span<const ArrayView>(inputs_), std::span<const ArrayView>(outs), opt_.eval);
    Flat(ov).read(out);
    if (opt_.alpha != 0)
      for (size_t q = 0; q < out.size(); ++q) out[q] += opt_.alpha * p[q];
  }

 private:
  void validate() const {
    if (k_.impl_ptr() == nullptr) detail::fail(kWho, "the reduction is null");
    if (k_.op() != ReductionOp::Sum || k_.num_outputs() != 1 || k_.full_sum())
      detail::fail(kWho, "K must be a Sum reduction (got ", reduction_name(k_.op()),
                   "): the solve needs a linear operator");
    const Category inner = k_.axis() == 1 ? Category::J : Category::I;
    std::optional<VarSlot> slot;
    for (const VarSlot& s : k_.inputs())
      if (s.index == var_ && !s.computed) slot = s;
    if (!slot)
      detail::fail(kWho, "var ", var_, " is not a variable of the formula ", k_.formula().str());
    if (slot->cat != inner)
      detail::fail(kWho, "the unknown (var ", var_, ") must be indexed by the reduced index (",
                   inner == Category::J ? "a j-variable, Vj" : "an i-variable, Vi",
                   ") so that K maps it to the output");
    if (slot->dim != k_.output_dim(0))
      detail::fail(kWho, "the unknown (var ", var_, ") has dim ", slot->dim,
                   " but K's output has dim ", k_.output_dim(0), "; the system must be square");
    check_linear(*slot);
    if (var_ < 0 || static_cast<size_t>(var_) >= inputs_.size())
      detail::fail(kWho, "inputs holds ", inputs_.size(), " arrays; b (var ", var_, ") is missing");
    const ArrayView& b = inputs_[var_];
    if (b.dtype != DType::Float32 && b.dtype != DType::Float64)
      detail::fail_type(kWho, "b has dtype ", dtype_name(b.dtype), "; expected float32 or float64");
    if (b.device.kind != DeviceKind::CPU)
      detail::fail(kWho, "b is on a CUDA device; expected a CPU array (the solver's vectors live ",
                   "on the host; K's other inputs may be on the GPU)");
    const bool shape_ok =
        (b.shape.size() == 1 && slot->dim == 1) || (b.shape.size() == 2 && b.shape[1] == slot->dim);
    if (!shape_ok)
      detail::fail(kWho, "b must have shape (n, ", slot->dim, ")", slot->dim == 1 ? " or (n)" : "",
                   "; batch dimensions are not supported");
    // Square: the output rows (the other index) must be as many as b's rows.
    for (const VarSlot& s : k_.inputs()) {
      if (s.cat != (inner == Category::J ? Category::I : Category::J) || s.computed) continue;
      if (static_cast<size_t>(s.index) >= inputs_.size()) continue;  // evaluate reports it
      const ArrayView& a = inputs_[s.index];
      if (!a.shape.empty() && a.shape[0] != b.shape[0])
        detail::fail(kWho, "K maps ", b.shape[0], " rows of b to ", a.shape[0],
                     " output rows (variable ", s.index, "); (alpha I + K) x = b needs a square K");
    }
    if (!(opt_.alpha >= 0) || !std::isfinite(opt_.alpha))
      detail::fail(kWho, "alpha must be a finite number >= 0, got ", opt_.alpha);
    if (!(opt_.tol >= 0) || !(opt_.atol >= 0))
      detail::fail(kWho, "tol and atol must be >= 0, got ", opt_.tol, " and ", opt_.atol);
    if (opt_.maxiter < 0)
      detail::fail(kWho, "maxiter must be >= 0 (0: default), got ", opt_.maxiter);
  }

  // Linear in v: the derivative along v does not depend on v, and v = 0 gives 0. Checked on the
  // formula, so an affine formula (K v + c) is an error, not a silently wrong solve.
  void check_linear(const VarSlot& slot) const {
    const Formula& f = k_.formula();
    const Formula v = var(slot.index, slot.dim, slot.cat);
    int top = 0;
    for (const Formula& u : variables(f)) top = std::max(top, u.node().var_index());
    const Formula t = var(top + 1, slot.dim, slot.cat);
    for (const Formula& u : variables(jvp(f, v, t)))
      if (u.node().var_index() == slot.index)
        detail::fail(kWho, "the formula ", f.str(), " is not linear in var ", slot.index);
    const Formula at_zero = substitute(f, {v}, {zero(slot.dim)});
    if (!at_zero.node().is_zero())
      detail::fail(kWho, "the formula ", f.str(), " is not linear in var ", slot.index, ": it is ",
                   at_zero.str(), " (not 0) at var ", slot.index, " = 0");
  }

  const Reduction& k_;
  int var_;
  const SolveOptions& opt_;
  std::vector<ArrayView> inputs_;
  ArrayView b_;
  DType dtype_ = DType::Float32;
  Array p_buf_, out_buf_;
};

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

SolveReport conjugate_gradient(KernelOperator& op, const std::vector<double>& b,
                               std::vector<double>& x, const SolveOptions& opt) {
  const size_t n = b.size();
  const int64_t size = static_cast<int64_t>(n);
  const int64_t maxiter =
      opt.maxiter > 0 ? opt.maxiter : std::max<int64_t>(100, std::min<int64_t>(2 * size, 1000));
  SolveReport rep;
  x.assign(n, 0.0);
  const double bnorm = std::sqrt(dot(b, b));
  if (bnorm == 0) {
    rep.converged = true;
    return rep;
  }
  if (!std::isfinite(bnorm)) detail::fail(kWho, "b holds a NaN or an infinity");
  const double thresh = std::max(opt.tol * bnorm, opt.atol);
  std::vector<double> r = b, p = b, ap(n);
  double rr = dot(r, r);
  bool done = std::sqrt(rr) <= thresh;
  while (!done && rep.iterations < maxiter) {
    op.apply(p, ap);
    ++rep.iterations;
    const double pap = dot(p, ap);
    if (!(pap > 0))
      detail::fail(kWho, "conjugate gradient broke down at iteration ", rep.iterations,
                   ": p^T (alpha I + K) p = ", fmt(pap),
                   "; the system must be symmetric positive definite (a positive definite "
                   "kernel on the same points, or a larger alpha)");
    const double a = rr / pap;
    for (size_t q = 0; q < n; ++q) {
      x[q] += a * p[q];
      r[q] -= a * ap[q];
    }
    const double rr_new = dot(r, r);
    done = std::sqrt(rr_new) <= thresh;
    const double beta = rr_new / rr;
    for (size_t q = 0; q < n; ++q) p[q] = r[q] + beta * p[q];
    rr = rr_new;
  }
  // The recurrence's residual drifts from the true one in float32: report the true one.
  op.apply(x, ap);
  double res = 0;
  for (size_t q = 0; q < n; ++q) res += (b[q] - ap[q]) * (b[q] - ap[q]);
  rep.residual = std::sqrt(res) / bnorm;
  rep.converged = done;
  if (!done && opt.raise_on_nonconvergence)
    detail::fail(kWho, "no convergence after ", rep.iterations, " iterations: relative residual ",
                 fmt(rep.residual), " > tol ", fmt(opt.tol),
                 opt.atol > 0 ? " (atol " + fmt(opt.atol) + ")" : std::string(),
                 "; raise maxiter or alpha, or loosen tol");
  return rep;
}

}  // namespace

std::string SolveReport::str() const {
  return (converged ? "converged in " : "not converged after ") + std::to_string(iterations) +
         " iterations, relative residual " + fmt(residual);
}

SolveReport kernel_solve(const Reduction& k, int var, std::span<const ArrayView> inputs,
                         const ArrayView& x, const SolveOptions& opt) {
  KernelOperator op(k, var, inputs, opt);
  check_float_view(x, "x", op.dtype(), op.b().shape);
  std::vector<double> b, sol;
  Flat(op.b()).read(b);
  const SolveReport rep = conjugate_gradient(op, b, sol, opt);
  Flat(x).write(sol);
  return rep;
}

SolveReport kernel_solve_grad(const Reduction& k, int var, std::span<const ArrayView> inputs,
                              const ArrayView& x, const ArrayView& grad_x, std::span<const int> wrt,
                              std::span<const ArrayView> grads, const SolveOptions& opt,
                              double* grad_alpha) {
  KernelOperator op(k, var, inputs, opt);
  check_float_view(x, "x", op.dtype(), op.b().shape);
  check_float_view(grad_x, "grad_x", op.dtype(), op.b().shape);
  if (wrt.size() != grads.size())
    detail::fail(kWho, "wrt names ", wrt.size(), " variables but grads holds ", grads.size(),
                 " arrays");
  std::vector<double> g, u;
  Flat(grad_x).read(g);
  const SolveReport rep = conjugate_gradient(op, g, u, opt);
  if (grad_alpha != nullptr) {
    std::vector<double> xs;
    Flat(x).read(xs);
    *grad_alpha = -dot(u, xs);
  }
  // -u in the inputs' dtype: the cotangent of the gradient reductions.
  Array neg_u(op.dtype(), op.b().shape);
  Flat(neg_u.view()).write(u, -1.0);
  std::vector<ArrayView> gin(inputs.begin(), inputs.end());
  gin[var] = x;
  for (size_t m = 0; m < wrt.size(); ++m) {
    if (wrt[m] == var) {
      check_float_view(grads[m], "the gradient for b", op.dtype(), op.b().shape);
      Flat(grads[m]).write(u);
      continue;
    }
    const Reduction gk = grad(k, wrt[m]);
    std::vector<ArrayView> in = gin;
    const std::vector<VarSlot> slots = gk.inputs();
    int cot = 0;
    for (const VarSlot& s : slots)
      if (!s.computed) cot = std::max(cot, s.index);
    in.resize(std::max<size_t>(in.size(), static_cast<size_t>(cot) + 1));
    in[cot] = neg_u.view();
    const ArrayView outs[1] = {grads[m]};
    evaluate(gk, std::span<const ArrayView>(in), std::span<const ArrayView>(outs), opt.eval);
  }
  return rep;
}

}  // namespace tessel
