// Gaussian-process linear algebra for tessel.gp: kernel products, rows and diagonal, the pivoted
// Cholesky preconditioner, batched CG, the BBMM marginal likelihood and predictive variances,
// Nystrom kernel ridge regression.
// The kernel formula holds the points as Vi(0, d) and Vj(1, d); params[k] is variable 2 + k.

#include "bindings.hpp"
#include "tessel/gp.hpp"

namespace tessel::py {

namespace {

// The kernel, the points and the noise a call reads: views into the caller's arrays, alive
// during the call.
struct Bound {
  GpKernel kern;
  ArrayView x;
  std::vector<double> noise;
  Bound(const Formula& k, const std::vector<InArray>& params, bool accumulate_f64, InArray xa,
        std::optional<InArray> noise_a = std::nullopt, const char* who = "");
};

nb::object doubles(const std::vector<double>& v, std::vector<int64_t> shape) {
  return to_numpy(Array::from(v, std::move(shape)));
}

// A float64 host array as a vector (C-contiguous: the Python side passes ascontiguousarray).
std::vector<double> read_vector(const InArray& a, const char* who, const char* what) {
  const ArrayView v = view_of(a, what);
  if (v.dtype != DType::Float64 || v.device.kind != DeviceKind::CPU)
    throw nb::type_error(
        (std::string(who) + ": " + what + " must be a float64 host array").c_str());
  int64_t expect = 1;
  bool dense = true;
  for (size_t ax = v.shape.size(); ax-- > 0;) {
    dense = dense && (v.shape[ax] == 1 || v.stride(static_cast<int>(ax)) == expect);
    expect *= v.shape[ax];
  }
  if (!dense)
    throw nb::value_error((std::string(who) + ": " + what + " must be contiguous").c_str());
  const double* p = static_cast<const double*>(v.data);
  return {p, p + v.size()};
}

Bound::Bound(const Formula& k, const std::vector<InArray>& params, bool accumulate_f64, InArray xa,
             std::optional<InArray> noise_a, const char* who) {
  kern.k = k;
  kern.xi = 0;
  kern.xj = 1;
  kern.inputs.resize(2);
  for (size_t q = 0; q < params.size(); ++q)
    kern.inputs.push_back(view_of(params[q], "parameter", q));
  kern.eval.accumulate_f64 = accumulate_f64;
  x = view_of(xa, "x");
  if (noise_a) noise = read_vector(*noise_a, who, "noise");
}

int64_t rows_of(const ArrayView& v) { return v.shape.empty() ? 0 : v.shape[0]; }

nb::dict report_dict(const GpCgReport& r) {
  nb::dict d;
  d["iterations"] = r.iterations;
  d["column_iterations"] = r.column_iterations;
  d["residuals"] = r.residuals;
  std::vector<bool> conv(r.converged.begin(), r.converged.end());
  d["converged"] = conv;
  d["summary"] = r.str();
  return d;
}

GpCgOptions cg_options(double tol, int64_t maxiter, int64_t miniter) {
  GpCgOptions o;
  o.tol = tol;
  o.maxiter = maxiter;
  o.miniter = miniter;
  return o;
}

void bind_gp_kernel(nb::module_& m) {
  nb::class_<PivotedCholesky>(m, "PivotedCholesky",
                              "The pivoted partial Cholesky K ~ L L^T and P = L L^T + D.")
      .def(
          "__init__",
          [](PivotedCholesky* self, const Formula& k, const std::vector<InArray>& params, InArray x,
             InArray noise, int64_t rank, double tol, bool acc) {
            const Bound b(k, params, acc, x, noise, "PivotedCholesky");
            nb::gil_scoped_release release;
            new (self) PivotedCholesky(b.kern, b.x, b.noise, rank, tol);
          },
          nb::arg("k"), nb::arg("params"), nb::arg("x"), nb::arg("noise"), nb::arg("rank"),
          nb::arg("tol") = 0.0, nb::arg("accumulate_f64") = false)
      .def_prop_ro("rank", &PivotedCholesky::rank)
      .def_prop_ro("logdet", &PivotedCholesky::logdet)
      .def_prop_ro("residual_trace", &PivotedCholesky::residual_trace)
      .def_prop_ro("pivots", &PivotedCholesky::pivots)
      .def_prop_ro("factor",
                   [](const PivotedCholesky& p) {
                     return doubles(p.factor(), {p.n(), p.rank()});
                   })
      .def(
          "solve",
          [](const PivotedCholesky& p, InArray v, int64_t m) {
            const std::vector<double> in = read_vector(v, "PivotedCholesky.solve", "v");
            std::vector<double> out(in.size());
            p.solve(in, m, out);
            return doubles(out, {p.n(), m});
          },
          nb::arg("v"), nb::arg("m"), "P^-1 v for v of n x m float64 values (row-major).");
  m.def(
      "gp_kernel_product",
      [](const Formula& k, const std::vector<InArray>& params, InArray x1, InArray x2, InArray v,
         int64_t mcols, bool acc) {
        const Bound b(k, params, acc, x1);
        const std::vector<double> vin = read_vector(v, "gp_kernel_product", "v");
        const ArrayView c = view_of(x2, "x2");
        std::vector<double> out(static_cast<size_t>(rows_of(b.x) * mcols));
        {
          nb::gil_scoped_release release;
          gp_kernel_product(b.kern, b.x, c, vin, mcols, out);
        }
        return doubles(out, {rows_of(b.x), mcols});
      },
      nb::arg("k"), nb::arg("params"), nb::arg("x1"), nb::arg("x2"), nb::arg("v"), nb::arg("m"),
      nb::arg("accumulate_f64") = false, "K(x1, x2) v for v of n2 x m float64 values.");
  m.def(
      "gp_kernel_diag",
      [](const Formula& k, const std::vector<InArray>& params, InArray x, bool acc) {
        const Bound b(k, params, acc, x);
        std::vector<double> out(static_cast<size_t>(rows_of(b.x)));
        {
          nb::gil_scoped_release release;
          gp_kernel_diag(b.kern, b.x, out);
        }
        return doubles(out, {rows_of(b.x)});
      },
      nb::arg("k"), nb::arg("params"), nb::arg("x"), nb::arg("accumulate_f64") = false,
      "k(x_i, x_i) for every point, exactly.");
}

void bind_gp_solves(nb::module_& m) {
  m.def(
      "gp_solve",
      [](const Formula& k, const std::vector<InArray>& params, InArray x, InArray noise, InArray b,
         int64_t mcols, int64_t rank, double tol, int64_t maxiter, bool acc) {
        const Bound bk(k, params, acc, x, noise, "gp_solve");
        const std::vector<double> rhs = read_vector(b, "gp_solve", "b");
        std::vector<double> out(rhs.size());
        GpCgReport rep;
        {
          nb::gil_scoped_release release;
          const PivotedCholesky pre(bk.kern, bk.x, bk.noise, rank);
          rep =
              gp_solve(bk.kern, bk.x, bk.noise, rhs, mcols, out, &pre, cg_options(tol, maxiter, 0));
        }
        return std::make_tuple(doubles(out, {rows_of(bk.x), mcols}), report_dict(rep));
      },
      nb::arg("k"), nb::arg("params"), nb::arg("x"), nb::arg("noise"), nb::arg("b"), nb::arg("m"),
      nb::arg("rank"), nb::arg("tol"), nb::arg("maxiter") = 0, nb::arg("accumulate_f64") = false,
      "(K + D)^-1 b by batched preconditioned CG; returns (solution n x m, report dict).");
  m.def(
      "gp_log_marginal_likelihood",
      [](const Formula& k, const std::vector<InArray>& params, InArray x, InArray y, InArray noise,
         const std::vector<int>& wrt, const std::vector<OutArray>& grads, int64_t probes,
         int64_t rank, uint64_t seed, double tol, int64_t maxiter, int64_t miniter, bool acc) {
        const Bound bk(k, params, acc, x, noise, "gp_log_marginal_likelihood");
        const std::vector<double> yv = read_vector(y, "gp_log_marginal_likelihood", "y");
        std::vector<ArrayView> gv;
        for (size_t q = 0; q < grads.size(); ++q) gv.push_back(view_of(grads[q], "gradient", q));
        const GpMllOptions o{probes, rank, seed, cg_options(tol, maxiter, miniter)};
        GpMllResult r;
        {
          nb::gil_scoped_release release;
          r = gp_log_marginal_likelihood(bk.kern, bk.x, yv, bk.noise, wrt, gv, o);
        }
        return std::make_tuple(r.value, r.quad, r.logdet, r.logdet_precond, r.logdet_samples,
                               doubles(r.alpha, {static_cast<int64_t>(r.alpha.size())}),
                               r.grad_noise, r.rank, report_dict(r.cg));
      },
      nb::arg("k"), nb::arg("params"), nb::arg("x"), nb::arg("y"), nb::arg("noise"), nb::arg("wrt"),
      nb::arg("grads"), nb::arg("probes"), nb::arg("rank"), nb::arg("seed"), nb::arg("tol"),
      nb::arg("maxiter") = 0, nb::arg("miniter") = 0, nb::arg("accumulate_f64") = false,
      "The BBMM log marginal likelihood of y and its gradient (grads[q] for variable wrt[q]); "
      "returns (value, quad, logdet, logdet_precond, logdet_samples, alpha, grad_noise, rank, "
      "cg report).");
  m.def(
      "gp_predictive_variance",
      [](const Formula& k, const std::vector<InArray>& params, InArray x, InArray noise, InArray p,
         int64_t rank, double tol, int64_t maxiter, int64_t chunk, bool acc) {
        const Bound bk(k, params, acc, x, noise, "gp_predictive_variance");
        const ArrayView pv = view_of(p, "p");
        std::vector<double> var(static_cast<size_t>(rows_of(pv)));
        GpCgReport rep;
        {
          nb::gil_scoped_release release;
          const PivotedCholesky pre(bk.kern, bk.x, bk.noise, rank);
          rep = gp_predictive_variance(bk.kern, bk.x, bk.noise, pv, var, &pre,
                                       cg_options(tol, maxiter, 0), chunk);
        }
        return std::make_tuple(doubles(var, {rows_of(pv)}), report_dict(rep));
      },
      nb::arg("k"), nb::arg("params"), nb::arg("x"), nb::arg("noise"), nb::arg("p"),
      nb::arg("rank"), nb::arg("tol"), nb::arg("maxiter") = 0, nb::arg("chunk") = 32,
      nb::arg("accumulate_f64") = false,
      "Latent predictive variances at the points p by chunked batched solves; returns (var, "
      "report dict).");
  m.def(
      "nystrom_krr",
      [](const Formula& k, const std::vector<InArray>& params, InArray x, InArray centres,
         InArray y, int64_t outputs, double lam, double tol, int64_t maxiter, bool acc) {
        const Bound bk(k, params, acc, x);
        const ArrayView c = view_of(centres, "centres");
        const std::vector<double> yv = read_vector(y, "nystrom_krr", "y");
        NystromResult r;
        {
          nb::gil_scoped_release release;
          r = nystrom_krr(bk.kern, bk.x, c, yv, outputs, lam, cg_options(tol, maxiter, 0));
        }
        return std::make_tuple(doubles(r.alpha, {rows_of(c), outputs}), report_dict(r.cg),
                               r.jitter);
      },
      nb::arg("k"), nb::arg("params"), nb::arg("x"), nb::arg("centres"), nb::arg("y"), nb::arg("m"),
      nb::arg("lam"), nb::arg("tol"), nb::arg("maxiter") = 0, nb::arg("accumulate_f64") = false,
      "Falkon-preconditioned Nystrom kernel ridge regression; returns (alpha M x m, report dict, "
      "jitter).");
}

// LOVE: a Lanczos root of (K + D)^-1 once, then variances by products.
void bind_gp_love(nb::module_& m) {
  m.def(
      "gp_love_root",
      [](const Formula& k, const std::vector<InArray>& params, InArray x, InArray noise,
         int64_t rank, uint64_t seed, bool acc) {
        const Bound bk(k, params, acc, x, noise, "gp_love_root");
        GpLoveRoot r;
        {
          nb::gil_scoped_release release;
          r = gp_love_root(bk.kern, bk.x, bk.noise, rank, seed);
        }
        return doubles(r.root, {rows_of(bk.x), r.rank});
      },
      nb::arg("k"), nb::arg("params"), nb::arg("x"), nb::arg("noise"), nb::arg("rank"),
      nb::arg("seed") = 0, nb::arg("accumulate_f64") = false,
      "LOVE's root R (n x steps) with (K + D)^-1 ~ R R^T from Lanczos on K + D.");
  m.def(
      "gp_love_variance",
      [](const Formula& k, const std::vector<InArray>& params, InArray x, InArray root, InArray p,
         bool acc) {
        const Bound bk(k, params, acc, x);
        const ArrayView pv = view_of(p, "p");
        const ArrayView rv = view_of(root, "root");
        GpLoveRoot love;
        love.rank = rv.shape.size() == 2 ? rv.shape[1] : 0;
        love.root = read_vector(root, "gp_love_variance", "root");
        std::vector<double> var(static_cast<size_t>(rows_of(pv)));
        {
          nb::gil_scoped_release release;
          gp_love_variance(bk.kern, bk.x, love, pv, var);
        }
        return doubles(var, {rows_of(pv)});
      },
      nb::arg("k"), nb::arg("params"), nb::arg("x"), nb::arg("root"), nb::arg("p"),
      nb::arg("accumulate_f64") = false,
      "LOVE's latent variances at the points p from gp_love_root's root.");
}

}  // namespace

void bind_gp(nb::module_& m) {
  bind_gp_kernel(m);
  bind_gp_solves(m);
  bind_gp_love(m);
}

}  // namespace tessel::py
