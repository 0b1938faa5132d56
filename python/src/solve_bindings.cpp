// Kernel CG solves and their implicit gradient, driven by KernelSolve and LazyTensor.solve.

#include "bindings.hpp"
#include "tessel/solve.hpp"

namespace tessel::py {

namespace {

std::vector<ArrayView> views(const std::vector<InArray>& arrays, const char* what) {
  std::vector<ArrayView> v;
  for (size_t k = 0; k < arrays.size(); ++k) v.push_back(view_of(arrays[k], what, k));
  return v;
}

// The solve's own numbers beside the reduction's settings (read once, when the solver was made).
SolveOptions solve_options(const Settings& settings, double alpha, double tol, double atol,
                           int64_t maxiter, bool raise, const RangesArg& ranges) {
  SolveOptions s;
  s.alpha = alpha;
  s.tol = tol;
  s.atol = atol;
  s.maxiter = maxiter;
  s.raise_on_nonconvergence = raise;
  s.eval = settings.eval;
  s.eval.ranges = block_ranges(ranges);
  return s;
}

}  // namespace

void bind_solve(nb::module_& m) {
  m.def(
      "kernel_solve",
      [](const Reduction& r, int var, const std::vector<InArray>& inputs, OutArray x,
         const Settings& settings, double alpha, double tol, double atol, int64_t maxiter,
         bool raise, const RangesArg& ranges) {
        const std::vector<ArrayView> in = views(inputs, "input");
        const ArrayView xv = view_of(x, "output");
        const SolveOptions s = solve_options(settings, alpha, tol, atol, maxiter, raise, ranges);
        nb::gil_scoped_release release;
        const SolveReport rep = kernel_solve(r, var, std::span<const ArrayView>(in), xv, s);
        return std::make_tuple(rep.iterations, rep.residual, rep.converged);
      },
      nb::arg("reduction"), nb::arg("var"), nb::arg("inputs"), nb::arg("x"), nb::arg("settings"),
      nb::arg("alpha") = 0.0, nb::arg("tol") = 1e-6, nb::arg("atol") = 0.0, nb::arg("maxiter") = 0,
      nb::arg("raise_on_nonconvergence") = false, nb::arg("ranges") = nb::none(),
      "Solve (alpha I + K) x = b (b = inputs[var]) into x; returns (iterations, residual, "
      "converged).");
  m.def(
      "kernel_solve_grad",
      [](const Reduction& r, int var, const std::vector<InArray>& inputs, InArray x, InArray grad_x,
         const std::vector<int>& wrt, const std::vector<OutArray>& grads, const Settings& settings,
         double alpha, double tol, double atol, int64_t maxiter, bool raise,
         const RangesArg& ranges) {
        const std::vector<ArrayView> in = views(inputs, "input");
        std::vector<ArrayView> out;
        for (size_t k = 0; k < grads.size(); ++k) out.push_back(view_of(grads[k], "gradient", k));
        const ArrayView xv = view_of(x, "x"), gv = view_of(grad_x, "grad_x");
        const SolveOptions s = solve_options(settings, alpha, tol, atol, maxiter, raise, ranges);
        double grad_alpha = 0;
        nb::gil_scoped_release release;
        const SolveReport rep = kernel_solve_grad(r, var, std::span<const ArrayView>(in), xv, gv,
                                                  std::span<const int>(wrt),
                                                  std::span<const ArrayView>(out), s, &grad_alpha);
        return std::make_tuple(rep.iterations, rep.residual, rep.converged, grad_alpha);
      },
      nb::arg("reduction"), nb::arg("var"), nb::arg("inputs"), nb::arg("x"), nb::arg("grad_x"),
      nb::arg("wrt"), nb::arg("grads"), nb::arg("settings"), nb::arg("alpha") = 0.0,
      nb::arg("tol") = 1e-6, nb::arg("atol") = 0.0, nb::arg("maxiter") = 0,
      nb::arg("raise_on_nonconvergence") = false, nb::arg("ranges") = nb::none(),
      "Gradient of a kernel solve: grads[m] for variable wrt[m]; returns (iterations, residual, "
      "converged, grad_alpha).");
}

}  // namespace tessel::py
