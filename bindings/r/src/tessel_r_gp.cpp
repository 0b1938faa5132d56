// The R package's Gaussian-process entry points: the log marginal likelihood with its gradient
// (exact or BBMM) and predictions (mean and latent variances) on the core's GP linear algebra;
// R's tessel_gp() fits with optim() around them.
#include <Rcpp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/formula.hpp"
#include "tessel/gp.hpp"
#include "tessel_r_guard.hpp"

namespace {

// A kernel text (variables X = Vi(0, d), Y = Vj(1, d), TH = Pm(2, p)) with its points, copied
// from R's column-major matrix into rows, and its parameters: arrays alive for one call.
struct GpCall {
  tessel::GpKernel kern;
  tessel::Array x, theta;
  GpCall(SEXP text, SEXP aliases, SEXP xm, SEXP th) {
    kern.k =
        tessel::parse(Rcpp::as<std::string>(text), Rcpp::as<std::vector<std::string>>(aliases));
    x = rows_of(xm);
    const Rcpp::NumericVector t(th);
    theta = tessel::Array::from(std::vector<double>(t.begin(), t.end()),
                                {static_cast<int64_t>(t.size())});
    kern.inputs = {tessel::ArrayView{}, tessel::ArrayView{}, theta.view()};
  }
  static tessel::Array rows_of(SEXP xm) {
    const Rcpp::NumericMatrix m(xm);
    const int64_t n = m.nrow(), d = m.ncol();
    std::vector<double> v(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < d; ++c) v[i * d + c] = m(i, c);
    return tessel::Array::from(v, {n, d});
  }
};

std::vector<double> doubles(SEXP v) {
  const Rcpp::NumericVector r(v);
  return {r.begin(), r.end()};
}

}  // namespace

extern "C" {

// log p(y) under N(0, K + noise) and its gradient in the parameters TH and the noise; exact:
// the dense Cholesky, else BBMM with `probes` probes and a pivoted-Cholesky preconditioner of
// `rank` (seed fixes the probes, so that optim() sees one smooth function).
SEXP tessel_r_gp_mll(SEXP text, SEXP aliases, SEXP x, SEXP theta, SEXP y, SEXP noise, SEXP exact,
                     SEXP probes, SEXP rank, SEXP seed) {
  return tessel_r::guarded([&]() -> SEXP {
    GpCall c(text, aliases, x, theta);
    const std::vector<double> yv = doubles(y), nv = doubles(noise);
    tessel::Array g(tessel::DType::Float64, c.theta.shape());
    const int wrt[1] = {2};
    const tessel::ArrayView gv[1] = {g.view()};
    tessel::GpMllResult r;
    if (Rcpp::as<bool>(exact)) {
      r = tessel::gp_exact_log_marginal_likelihood(c.kern, c.x.view(), yv, nv, wrt, gv);
    } else {
      tessel::GpMllOptions o;
      o.probes = Rcpp::as<int64_t>(probes);
      o.rank = Rcpp::as<int64_t>(rank);
      o.seed = static_cast<uint64_t>(Rcpp::as<double>(seed));
      r = tessel::gp_log_marginal_likelihood(c.kern, c.x.view(), yv, nv, wrt, gv, o);
    }
    const double* gp = g.as<double>();
    return Rcpp::List::create(
        Rcpp::Named("value") = r.value, Rcpp::Named("logdet") = r.logdet,
        Rcpp::Named("quad") = r.quad,
        Rcpp::Named("grad_theta") = Rcpp::NumericVector(gp, gp + g.size()),
        Rcpp::Named("grad_noise") = Rcpp::wrap(r.grad_noise),
        Rcpp::Named("alpha") = Rcpp::wrap(r.alpha),
        Rcpp::Named("cg_iterations") = static_cast<double>(r.cg.iterations),
        Rcpp::Named("converged") = r.cg.converged.empty() || r.cg.all_converged());
  });
}

// The posterior mean K(xnew, x) alpha and the latent variances at xnew by batched CG solves
// (`chunk` points at a time, relative residual `tol`, preconditioner of `rank`).
SEXP tessel_r_gp_predict(SEXP text, SEXP aliases, SEXP x, SEXP theta, SEXP noise, SEXP alpha,
                         SEXP xnew, SEXP rank, SEXP tol, SEXP chunk) {
  return tessel_r::guarded([&]() -> SEXP {
    GpCall c(text, aliases, x, theta);
    const tessel::Array p = GpCall::rows_of(xnew);
    const std::vector<double> nv = doubles(noise), av = doubles(alpha);
    const int64_t m = p.shape()[0];
    std::vector<double> mean(static_cast<size_t>(m)), var(static_cast<size_t>(m));
    tessel::gp_kernel_product(c.kern, p.view(), c.x.view(), av, 1, mean);
    const tessel::PivotedCholesky pre(c.kern, c.x.view(), nv, Rcpp::as<int64_t>(rank));
    tessel::GpCgOptions o;
    o.tol = Rcpp::as<double>(tol);
    const tessel::GpCgReport rep = tessel::gp_predictive_variance(
        c.kern, c.x.view(), nv, p.view(), var, &pre, o, Rcpp::as<int64_t>(chunk));
    return Rcpp::List::create(Rcpp::Named("mean") = Rcpp::wrap(mean),
                              Rcpp::Named("var") = Rcpp::wrap(var),
                              Rcpp::Named("converged") = rep.all_converged());
  });
}

}  // extern "C"
