// Conjugate gradient on (alpha I + K) x = b for a kernel Sum reduction K linear in b, and the
// solve's gradient. CG's vectors live where b does: host vectors, or device memory when b is a
// CUDA array (every step then runs on the GPU and only scalars reach the host).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "backend/registry.hpp"
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

std::string where(const Device& d) {
  return d.kind == DeviceKind::CPU ? std::string("the CPU")
                                   : "CUDA device " + std::to_string(d.index);
}

// A vector of the solve (x, grad_x, a gradient for b): b's dtype, shape and device; contiguous on
// a device (CG's device steps read flat arrays).
void check_float_view(const ArrayView& v, const char* what, DType dtype,
                      const std::vector<int64_t>& shape, const Device& device) {
  if (v.data == nullptr && v.size() != 0) detail::fail(kWho, what, " has no data");
  if (v.device.kind != device.kind ||
      (device.kind == DeviceKind::CUDA && v.device.index != device.index))
    detail::fail(kWho, what, " is on ", where(v.device), " but b is on ", where(device),
                 "; expected ", what, " on b's device");
  if (v.device.kind == DeviceKind::CUDA && !contiguous(v))
    detail::fail(kWho, what, " is a non-contiguous CUDA array; pass a contiguous one");
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
  }

  const ArrayView& b() const { return b_; }
  DType dtype() const { return dtype_; }
  double alpha() const { return opt_.alpha; }

  // out = K(v): v and out arrays of b's shape and dtype (on b's device).
  void product(const ArrayView& v, const ArrayView& out) {
    inputs_[var_] = v;
    const ArrayView outs[1] = {out};
    evaluate(k_, std::span<const ArrayView>(inputs_), std::span<const ArrayView>(outs), opt_.eval);
    inputs_[var_] = b_;
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
    if (b.device.kind == DeviceKind::CUDA && !contiguous(b))
      detail::fail(kWho, "b is a non-contiguous CUDA array; pass a contiguous one");
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
};

// Where CG's vectors live, as five float64 slots of b's size, and the steps between them.
class CgSpace {
 public:
  enum Slot { B, X, R, P, AP, kSlots };
  virtual ~CgSpace() = default;
  virtual void axpby(double a, Slot x, double b, Slot y) = 0;  // y = a x + b y; b = 0: y = a x
  virtual double dot(Slot x, Slot y) = 0;
  virtual void apply(Slot from, Slot to) = 0;  // to = alpha from + K(from)
  // Between a caller's array (b's shape, dtype and device) and a slot: s = scale a, a = scale s.
  virtual void load(const ArrayView& a, Slot s) = 0;
  virtual void store(Slot s, const ArrayView& a, double scale = 1) = 0;
  // A scratch array of b's shape and dtype on b's device, alive as long as the space.
  virtual ArrayView scratch() = 0;
};

class HostSpace final : public CgSpace {
 public:
  explicit HostSpace(KernelOperator& op)
      : op_(op), p_buf_(op.dtype(), op.b().shape), out_buf_(op.dtype(), op.b().shape) {
    for (auto& v : v_) v.assign(static_cast<size_t>(op.b().size()), 0.0);
  }
  void axpby(double a, Slot x, double b, Slot y) override {
    std::vector<double>&out = v_[y], &in = v_[x];
    for (size_t q = 0; q < out.size(); ++q) out[q] = b == 0 ? a * in[q] : a * in[q] + b * out[q];
  }
  double dot(Slot x, Slot y) override {
    double s = 0;
    for (size_t q = 0; q < v_[x].size(); ++q) s += v_[x][q] * v_[y][q];
    return s;
  }
  void apply(Slot from, Slot to) override {
    const ArrayView pv = p_buf_.view(), ov = out_buf_.view();
    Flat(pv).write(v_[from]);
    op_.product(pv, ov);
    Flat(ov).read(v_[to]);
    if (op_.alpha() != 0) axpby(op_.alpha(), from, 1, to);
  }
  void load(const ArrayView& a, Slot s) override { Flat(a).read(v_[s]); }
  void store(Slot s, const ArrayView& a, double scale) override { Flat(a).write(v_[s], scale); }
  ArrayView scratch() override { return scratch_.emplace_back(op_.dtype(), op_.b().shape).view(); }

 private:
  KernelOperator& op_;
  std::vector<double> v_[kSlots];
  Array p_buf_, out_buf_;
  std::vector<Array> scratch_;
};

// On b's GPU, through the device that owns its memory: float64 slots, the products reading and
// writing b-dtype buffers there (the engine keeps device results on the device).
class DeviceSpace final : public CgSpace {
 public:
  explicit DeviceSpace(KernelOperator& op)
      : op_(op), dev_(BackendRegistry::instance().device_for(DeviceKind::CUDA)) {
    const KernelBackend& runs = BackendRegistry::instance().backend_for(DeviceKind::CUDA);
    if (!runs.writes_device_outputs())
      detail::fail(kWho, "internal: the ", runs.name(),
                   " backend cannot keep CG's vectors on "
                   "the device");
    for (DeviceRows& v : v_) v = alloc(DType::Float64);
    p_buf_ = alloc(op.dtype());
    out_buf_ = alloc(op.dtype());
  }
  void axpby(double a, Slot x, double b, Slot y) override {
    dev_.axpby_device(a, v_[x].view, b, v_[y].view);
  }
  double dot(Slot x, Slot y) override { return dev_.dot_device(v_[x].view, v_[y].view); }
  void apply(Slot from, Slot to) override {
    dev_.axpby_device(1, v_[from].view, 0, p_buf_.view);
    op_.product(p_buf_.view, out_buf_.view);
    dev_.axpby_device(1, out_buf_.view, 0, v_[to].view);
    if (op_.alpha() != 0) axpby(op_.alpha(), from, 1, to);
  }
  void load(const ArrayView& a, Slot s) override {
    dev_.axpby_device(1, flat_view(a), 0, v_[s].view);
  }
  void store(Slot s, const ArrayView& a, double scale) override {
    dev_.axpby_device(scale, v_[s].view, 0, flat_view(a));
  }
  ArrayView scratch() override { return scratch_.emplace_back(alloc(op_.dtype())).view; }

 private:
  // A contiguous array of b's shape in `dtype` on b's device.
  DeviceRows alloc(DType dtype) {
    const ArrayView& b = op_.b();
    DeviceRows d = dev_.alloc_rows(dtype, b.size(), 1, b.device.index);
    d.view.shape = b.shape;
    return d;
  }

  KernelOperator& op_;
  DeviceApi& dev_;
  DeviceRows v_[kSlots], p_buf_, out_buf_;
  std::vector<DeviceRows> scratch_;
};

std::unique_ptr<CgSpace> space_for(KernelOperator& op) {
  if (op.b().device.kind == DeviceKind::CUDA) return std::make_unique<DeviceSpace>(op);
  return std::make_unique<HostSpace>(op);
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// Solves (alpha I + K) x = B into slot X (R, P, AP are scratch), size: the number of values.
SolveReport conjugate_gradient(CgSpace& v, int64_t size, const SolveOptions& opt) {
  using S = CgSpace;
  const int64_t maxiter =
      opt.maxiter > 0 ? opt.maxiter : std::max<int64_t>(100, std::min<int64_t>(2 * size, 1000));
  SolveReport rep;
  const double bnorm = std::sqrt(v.dot(S::B, S::B));
  if (!std::isfinite(bnorm)) detail::fail(kWho, "b holds a NaN or an infinity");
  v.axpby(0, S::B, 0, S::X);  // x = 0 (b is finite)
  if (bnorm == 0) {
    rep.converged = true;
    return rep;
  }
  const double thresh = std::max(opt.tol * bnorm, opt.atol);
  v.axpby(1, S::B, 0, S::R);
  v.axpby(1, S::B, 0, S::P);
  double rr = v.dot(S::R, S::R);
  bool done = std::sqrt(rr) <= thresh;
  // The recurrence's residual drifts from the true one |b - A x| (float32 reductions, another
  // SIMD level or summation order): "converged" must mean the true residual met the tolerance.
  // Where the recurrence claims it and the true residual does not, CG restarts from the true
  // residual, for as long as that keeps going down; then it stops, not converged.
  double true_r = std::numeric_limits<double>::infinity();
  for (;;) {
    while (!done && rep.iterations < maxiter) {
      v.apply(S::P, S::AP);
      ++rep.iterations;
      const double pap = v.dot(S::P, S::AP);
      if (!(pap > 0))
        detail::fail(kWho, "conjugate gradient broke down at iteration ", rep.iterations,
                     ": p^T (alpha I + K) p = ", fmt(pap),
                     "; the system must be symmetric positive definite (a positive definite "
                     "kernel on the same points, or a larger alpha)");
      const double a = rr / pap;
      v.axpby(a, S::P, 1, S::X);
      v.axpby(-a, S::AP, 1, S::R);
      const double rr_new = v.dot(S::R, S::R);
      done = std::sqrt(rr_new) <= thresh;
      v.axpby(1, S::R, rr_new / rr, S::P);
      rr = rr_new;
    }
    v.apply(S::X, S::AP);
    v.axpby(1, S::B, -1, S::AP);  // AP = b - A x
    const double last_r = true_r;
    true_r = std::sqrt(v.dot(S::AP, S::AP));
    if (!done || true_r <= thresh) break;
    done = false;
    if (!(true_r < last_r) || rep.iterations >= maxiter) break;
    v.axpby(1, S::AP, 0, S::R);
    v.axpby(1, S::AP, 0, S::P);
    rr = true_r * true_r;
  }
  rep.residual = true_r / bnorm;
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
  check_float_view(x, "x", op.dtype(), op.b().shape, op.b().device);
  const std::unique_ptr<CgSpace> v = space_for(op);
  v->load(op.b(), CgSpace::B);
  const SolveReport rep = conjugate_gradient(*v, op.b().size(), opt);
  v->store(CgSpace::X, x);
  return rep;
}

SolveReport kernel_solve_grad(const Reduction& k, int var, std::span<const ArrayView> inputs,
                              const ArrayView& x, const ArrayView& grad_x, std::span<const int> wrt,
                              std::span<const ArrayView> grads, const SolveOptions& opt,
                              double* grad_alpha) {
  KernelOperator op(k, var, inputs, opt);
  const Device& at = op.b().device;
  check_float_view(x, "x", op.dtype(), op.b().shape, at);
  check_float_view(grad_x, "grad_x", op.dtype(), op.b().shape, at);
  if (wrt.size() != grads.size())
    detail::fail(kWho, "wrt names ", wrt.size(), " variables but grads holds ", grads.size(),
                 " arrays");
  for (size_t m = 0; m < wrt.size(); ++m)
    if (wrt[m] == var)
      check_float_view(grads[m], "the gradient for b", op.dtype(), op.b().shape, at);
  // u = (alpha I + K)^-1 grad_x, into slot X.
  const std::unique_ptr<CgSpace> v = space_for(op);
  v->load(grad_x, CgSpace::B);
  const SolveReport rep = conjugate_gradient(*v, op.b().size(), opt);
  if (grad_alpha != nullptr) {
    v->load(x, CgSpace::R);
    *grad_alpha = -v->dot(CgSpace::X, CgSpace::R);
  }
  // -u in the inputs' dtype: the cotangent of the gradient reductions.
  const ArrayView neg_u = v->scratch();
  v->store(CgSpace::X, neg_u, -1.0);
  std::vector<ArrayView> gin(inputs.begin(), inputs.end());
  gin[var] = x;
  for (size_t m = 0; m < wrt.size(); ++m) {
    if (wrt[m] == var) {
      v->store(CgSpace::X, grads[m]);
      continue;
    }
    const Reduction gk = grad(k, wrt[m]);
    std::vector<ArrayView> in = gin;
    const std::vector<VarSlot> slots = gk.inputs();
    int cot = 0;
    for (const VarSlot& s : slots)
      if (!s.computed) cot = std::max(cot, s.index);
    in.resize(std::max<size_t>(in.size(), static_cast<size_t>(cot) + 1));
    in[cot] = neg_u;
    const ArrayView outs[1] = {grads[m]};
    evaluate(gk, std::span<const ArrayView>(in), std::span<const ArrayView>(outs), opt.eval);
  }
  return rep;
}

}  // namespace tessel
