// The R package's one crossing into tessel's C++ core: kernels built from KeOps texts, their
// gradients, evaluation on R matrices, kernel solves and run-time facts.
//
// R matrices are column-major with one point per row, so a double matrix reaches the core as a
// strided view (strides 1, N), never copied. Arguments are checked against the aliases here,
// before the core sees them, so that a message names the R argument by its alias; the core's own
// messages (tessel::Error) reach R unchanged through Rcpp's exception handling.
#include <R_ext/Rdynload.h>
#include <Rcpp.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessel/error.hpp"
#include "tessel/options.hpp"
#include "tessel/reduction.hpp"
#include "tessel/runtime.hpp"
#include "tessel/solve.hpp"
#include "tessel/text_kernel.hpp"
#include "tessel_r_guard.hpp"

namespace {

using tessel::ArrayView;
using tessel::Category;
using tessel::DType;

// One argument of an R kernel function, in the order the user passes them (alias order).
using Arg = tessel::TextKernel::Arg;

// A kernel text's reduction and arguments, with the precision and options its R function was
// made with.
struct Kernel {
  tessel::TextKernel tk;
  std::string who;  // the R function the user called, for messages
  bool float32 = false;
  tessel::Options opt;
};

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument(msg); }

Kernel& kernel_of(SEXP ptr) {
  Rcpp::XPtr<Kernel> k(ptr);
  if (k.get() == nullptr)
    fail("tessel: this kernel was made in another R process (a saved workspace); make it again");
  return *k;
}

SEXP wrap_kernel(std::unique_ptr<Kernel> k) { return Rcpp::XPtr<Kernel>(k.release(), true); }

// ---- arguments --------------------------------------------------------------------------------

// What a caller's argument looks like: rows (points) and columns, and how to read element (r, c).
struct Shape {
  int64_t rows = 0, cols = 0;
  int64_t s_row = 0, s_col = 0;
};

Shape shape_of(const Kernel& k, const Arg& a, SEXP x, bool row_major) {
  if (Rf_inherits(x, "data.frame"))
    fail(k.who + ": " + a.label() + " is a data frame; pass as.matrix() of it");
  if (!Rf_isReal(x) && !Rf_isInteger(x))
    fail(k.who + ": " + a.label() + " must be numeric; got an object of type " +
         Rf_type2char(TYPEOF(x)));
  const int64_t len = Rf_xlength(x);
  SEXP dims = Rf_getAttrib(x, R_DimSymbol);
  const bool matrix = !Rf_isNull(dims) && Rf_length(dims) == 2;
  if (!Rf_isNull(dims) && !matrix)
    fail(k.who + ": " + a.label() + " must be a vector or a matrix; got an array with " +
         std::to_string(Rf_length(dims)) + " dimensions");
  if (a.cat == Category::Param) {
    if (len != a.dim)
      fail(k.who + ": " + a.label() + " is a parameter and must have " + std::to_string(a.dim) +
           " value(s); got " + std::to_string(len));
    return {1, a.dim, a.dim, 1};
  }
  if (!matrix) {
    if (a.dim != 1)
      fail(k.who + ": " + a.label() + " must be a matrix with " + std::to_string(a.dim) +
           " columns (one row per point); got a vector of length " + std::to_string(len));
    return {len, 1, 1, 1};
  }
  const int64_t nr = INTEGER(dims)[0], nc = INTEGER(dims)[1];
  const int64_t pts = row_major ? nc : nr, d = row_major ? nr : nc;
  if (d != a.dim)
    fail(k.who + ": " + a.label() + " must have " + std::to_string(a.dim) +
         (row_major ? " rows (inner_dim = \"row\": one column per point)"
                    : " columns (one row per point)") +
         "; got a " + std::to_string(nr) + " x " + std::to_string(nc) + " matrix");
  return row_major ? Shape{pts, d, d, 1} : Shape{pts, d, 1, nr};
}

// R's NA has no meaning in a kernel: it would come back as NaN, a value the user never wrote.
void check_na(const Kernel& k, const Arg& a, SEXP x, const Shape& s) {
  const int64_t n = Rf_xlength(x);
  int64_t bad = -1;
  if (Rf_isReal(x)) {
    const double* p = REAL(x);
    for (int64_t q = 0; q < n && bad < 0; ++q)
      if (R_IsNA(p[q])) bad = q;
  } else {
    const int* p = INTEGER(x);
    for (int64_t q = 0; q < n && bad < 0; ++q)
      if (p[q] == NA_INTEGER) bad = q;
  }
  if (bad < 0) return;
  const int64_t row = s.s_row == 1 ? bad % std::max<int64_t>(s.rows, 1) : bad / s.s_row;
  fail(k.who + ": " + a.label() + " contains NA (first at point " + std::to_string(row + 1) +
       "); remove or impute missing values first (NaN and Inf are passed on)");
}

// The views of one call, in the core's variable order, and the copies some of them need.
struct Inputs {
  std::vector<ArrayView> views;
  std::vector<std::vector<double>> doubles;
  std::vector<std::vector<float>> floats;
  int64_t ni = -1, nj = -1;
};

// A C-ordered copy (rows x cols) of x in T: float32 calls, and integer matrices.
template <class T>
void copy_rows(SEXP x, const Shape& s, std::vector<T>& out) {
  out.resize(static_cast<size_t>(s.rows * s.cols));
  const bool real = Rf_isReal(x);
  const double* d = real ? REAL(x) : nullptr;
  const int* i = real ? nullptr : INTEGER(x);
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t c = 0; c < s.cols; ++c) {
      const int64_t q = r * s.s_row + c * s.s_col;
      out[r * s.cols + c] = static_cast<T>(real ? d[q] : static_cast<double>(i[q]));
    }
}

// All Vi arguments share one number of points, all Vj arguments another.
void check_rows(const Kernel& k, const Arg& a, int64_t rows, int64_t& n, const Arg*& first) {
  if (n < 0) {
    n = rows;
    first = &a;
  } else if (rows != n) {
    const char* what = a.cat == Category::I ? "Vi" : "Vj";
    fail(k.who + ": " + a.label() + " has " + std::to_string(rows) + " points but '" + first->name +
         "' has " + std::to_string(n) + "; all " + what +
         " arguments must have the same number of points (rows)");
  }
}

Inputs read_inputs(const Kernel& k, SEXP list, bool row_major) {
  if (TYPEOF(list) != VECSXP) fail(k.who + ": the arguments must be given as a list");
  k.tk.check_count(static_cast<size_t>(Rf_xlength(list)), k.who);
  const std::vector<Arg>& args = k.tk.args();
  Inputs in;
  in.views.resize(k.tk.num_slots());
  in.doubles.reserve(args.size());
  in.floats.reserve(args.size());
  const Arg *first_i = nullptr, *first_j = nullptr;
  for (size_t q = 0; q < args.size(); ++q) {
    const Arg& a = args[q];
    SEXP x = VECTOR_ELT(list, static_cast<R_xlen_t>(q));
    const Shape s = shape_of(k, a, x, row_major);
    check_na(k, a, x, s);
    if (a.cat == Category::I) check_rows(k, a, s.rows, in.ni, first_i);
    if (a.cat == Category::J) check_rows(k, a, s.rows, in.nj, first_j);
    if (!a.used) continue;
    ArrayView v;
    v.shape = {s.rows, s.cols};
    if (k.float32) {
      in.floats.emplace_back();
      copy_rows(x, s, in.floats.back());
      v.data = in.floats.back().data();
      v.dtype = DType::Float32;
    } else if (Rf_isInteger(x)) {
      in.doubles.emplace_back();
      copy_rows(x, s, in.doubles.back());
      v.data = in.doubles.back().data();
      v.dtype = DType::Float64;
    } else {
      v.data = REAL(x);
      v.dtype = DType::Float64;
      v.strides = {s.s_row, s.s_col};
    }
    in.views[static_cast<size_t>(a.index)] = v;
  }
  // No Vi (or no Vj) argument: that axis has one row, as in rkeops and pykeops (R's kernels take
  // no size arguments).
  if (in.ni < 0) in.ni = 1;
  if (in.nj < 0) in.nj = 1;
  return in;
}

// ---- results ----------------------------------------------------------------------------------

// An R matrix (rows x cols) or, for sums over every point (gradients for a parameter), a vector.
SEXP r_result(const tessel::OutputSpec& spec, bool full_sum) {
  const int64_t rows = spec.shape.size() == 2 ? spec.shape[0] : 1;
  const int64_t cols = spec.shape.empty() ? 1 : spec.shape.back();
  if (full_sum) return Rcpp::NumericVector(static_cast<R_xlen_t>(rows * cols));
  return Rcpp::NumericMatrix(static_cast<int>(rows), static_cast<int>(cols));
}

// Copies a core array (C order) into an R result (column-major), as doubles.
void copy_out(const tessel::Array& a, SEXP res) {
  const int64_t rows = a.shape().size() == 2 ? a.shape()[0] : 1;
  const int64_t cols = a.shape().empty() ? 1 : a.shape().back();
  double* out = REAL(res);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = a.at(r * cols + c);
}

SEXP evaluate_kernel(const Kernel& k, const Inputs& in) {
  const tessel::Sizes sizes{in.ni, in.nj};
  const tessel::Reduction& r = k.tk.reduction();
  const std::vector<tessel::OutputSpec> specs = tessel::output_specs(r, in.views, sizes);
  Rcpp::List res(specs.size());
  std::vector<ArrayView> outs;
  std::vector<tessel::Array> tmp;
  tmp.reserve(specs.size());
  for (size_t o = 0; o < specs.size(); ++o) {
    res[o] = r_result(specs[o], r.full_sum());
    ArrayView v;
    v.shape = specs[o].shape;
    v.dtype = specs[o].dtype;
    if (specs[o].dtype == DType::Float64 && specs[o].shape.size() == 2) {
      // Written in place: the column-major R matrix as a strided view.
      v.data = REAL(res[o]);
      v.strides = {1, specs[o].shape[0]};
    } else {
      tmp.emplace_back(specs[o].dtype, specs[o].shape);
      v.data = tmp.back().data();
    }
    outs.push_back(v);
  }
  tessel::evaluate(r, in.views, outs, k.opt, sizes);
  size_t t = 0;
  for (size_t o = 0; o < specs.size(); ++o)
    if (outs[o].data != static_cast<void*>(REAL(res[o]))) copy_out(tmp[t++], res[o]);
  return res;
}

tessel::Options make_options(const std::string& who, const std::string& backend,
                             const std::string& sum_scheme) {
  tessel::Options o;
  o.backend = tessel::backend_from_name(backend, who);
  o.sum_scheme = tessel::sum_scheme_from_name(sum_scheme, who);
  return o;
}

Rcpp::List describe(const Kernel& k) {
  const tessel::Reduction& r = k.tk.reduction();
  Rcpp::CharacterVector names, cats;
  Rcpp::IntegerVector index, dims;
  Rcpp::LogicalVector used;
  for (const Arg& a : k.tk.args()) {
    names.push_back(a.name);
    cats.push_back(tessel::category_word(a.cat));
    index.push_back(a.index);
    dims.push_back(a.dim);
    used.push_back(a.used);
  }
  Rcpp::IntegerVector out_dims;
  Rcpp::LogicalVector out_index;
  for (int o = 0; o < r.num_outputs(); ++o) {
    out_dims.push_back(r.output_dim(o));
    out_index.push_back(r.output_is_index(o));
  }
  return Rcpp::List::create(
      Rcpp::Named("formula") = k.tk.text(), Rcpp::Named("reduction") = r.str(),
      Rcpp::Named("op") = tessel::reduction_name(r.op()), Rcpp::Named("axis") = r.axis(),
      Rcpp::Named("full_sum") = r.full_sum(),
      Rcpp::Named("precision") = k.float32 ? "float" : "double",
      Rcpp::Named("backend") = tessel::backend_name(k.opt.backend),
      Rcpp::Named("args") = Rcpp::DataFrame::create(
          Rcpp::Named("name") = names, Rcpp::Named("cat") = cats, Rcpp::Named("index") = index,
          Rcpp::Named("dim") = dims, Rcpp::Named("used") = used,
          Rcpp::Named("stringsAsFactors") = false),
      Rcpp::Named("output_dims") = out_dims, Rcpp::Named("output_is_index") = out_index);
}

std::string str_arg(SEXP s, const char* what) {
  if (!Rf_isString(s) || Rf_length(s) != 1 || STRING_ELT(s, 0) == NA_STRING)
    fail(std::string("tessel: ") + what + " must be one character string");
  return CHAR(STRING_ELT(s, 0));
}

using tessel_r::guarded;

}  // namespace

// ---- entry points -----------------------------------------------------------------------------

extern "C" {

// A kernel from a KeOps reduction text and its aliases.
SEXP tessel_r_kernel(SEXP text, SEXP aliases, SEXP who, SEXP precision, SEXP backend,
                     SEXP sum_scheme) {
  return guarded([&]() -> SEXP {
    auto k = std::make_unique<Kernel>();
    k->who = str_arg(who, "who");
    const std::string formula = str_arg(text, "formula");
    const std::vector<std::string> al = Rcpp::as<std::vector<std::string>>(aliases);
    const std::string prec = str_arg(precision, "precision");
    if (prec != "double" && prec != "float")
      fail(k->who + ": precision must be \"double\" or \"float\"; got \"" + prec + "\"");
    k->float32 = prec == "float";
    k->opt = make_options(k->who, str_arg(backend, "backend"), str_arg(sum_scheme, "sum_scheme"));
    k->tk = tessel::TextKernel(formula, al);
    return wrap_kernel(std::move(k));
  });
}

// The gradient of a kernel for its argument at 0-based position `pos`: a new kernel whose last
// argument (named `eta`) is the cotangent of the first output.
SEXP tessel_r_grad(SEXP ptr, SEXP pos, SEXP eta) {
  return guarded([&]() -> SEXP {
    const Kernel& k = kernel_of(ptr);
    const int p = Rcpp::as<int>(pos);
    const size_t n = k.tk.args().size();
    if (p < 0 || p >= static_cast<int>(n))
      fail(k.who + ": no argument at position " + std::to_string(p) + " (0-based; the kernel has " +
           std::to_string(n) + ")");
    auto g = std::make_unique<Kernel>(k);
    g->tk = k.tk.grad(static_cast<size_t>(p), str_arg(eta, "eta"));
    return wrap_kernel(std::move(g));
  });
}

SEXP tessel_r_describe(SEXP ptr) {
  return guarded([&]() -> SEXP { return describe(kernel_of(ptr)); });
}

// Evaluates a kernel on a list of R arguments (in the kernel's argument order): a list of its
// outputs.
SEXP tessel_r_eval(SEXP ptr, SEXP args, SEXP row_major) {
  return guarded([&]() -> SEXP {
    const Kernel& k = kernel_of(ptr);
    const Inputs in = read_inputs(k, args, Rcpp::as<bool>(row_major));
    return evaluate_kernel(k, in);
  });
}

// Solves (alpha I + K) x = b, K the kernel (a Sum reduction linear in the argument at 0-based
// position `pos`, which holds b). Returns list(x, iterations, residual, converged).
SEXP tessel_r_solve(SEXP ptr, SEXP pos, SEXP args, SEXP alpha, SEXP tol, SEXP maxiter) {
  return guarded([&]() -> SEXP {
    const Kernel& k = kernel_of(ptr);
    const int p = Rcpp::as<int>(pos);
    const std::vector<Arg>& kargs = k.tk.args();
    if (p < 0 || p >= static_cast<int>(kargs.size()) || !kargs[static_cast<size_t>(p)].used)
      fail(k.who + ": the unknown must be an argument the formula reads; got position " +
           std::to_string(p));
    const Arg& var = kargs[static_cast<size_t>(p)];
    const Inputs in = read_inputs(k, args, false);
    const ArrayView& b = in.views[static_cast<size_t>(var.index)];
    tessel::SolveOptions so;
    so.alpha = Rcpp::as<double>(alpha);
    so.tol = Rcpp::as<double>(tol);
    so.maxiter = static_cast<int64_t>(Rcpp::as<double>(maxiter));
    so.eval = k.opt;
    tessel::Array x(b.dtype, b.shape);
    const tessel::SolveReport rep =
        tessel::kernel_solve(k.tk.reduction(), var.index, in.views, x.view(), so);
    Rcpp::NumericMatrix xr(static_cast<int>(b.shape[0]), static_cast<int>(b.shape[1]));
    copy_out(x, xr);
    return Rcpp::List::create(
        Rcpp::Named("x") = xr, Rcpp::Named("iterations") = static_cast<double>(rep.iterations),
        Rcpp::Named("residual") = rep.residual, Rcpp::Named("converged") = rep.converged);
  });
}

// The compiler, SIMD level, threads and kernel cache the core sees.
SEXP tessel_r_runtime() {
  return guarded([&]() -> SEXP {
    const tessel::CompilerInfo c = tessel::compiler_info();
    return Rcpp::List::create(
        Rcpp::Named("compiler_usable") = c.usable, Rcpp::Named("compiler") = c.path,
        Rcpp::Named("compiler_problem") = c.problem, Rcpp::Named("simd") = tessel::simd_level(),
        Rcpp::Named("threads") = tessel::num_threads(),
        Rcpp::Named("cache_dir") = tessel::cache_dir(),
        Rcpp::Named("cuda") = tessel::cuda_status());
  });
}

static const R_CallMethodDef kCalls[] = {
    {"tessel_r_kernel", reinterpret_cast<DL_FUNC>(&tessel_r_kernel), 6},
    {"tessel_r_grad", reinterpret_cast<DL_FUNC>(&tessel_r_grad), 3},
    {"tessel_r_describe", reinterpret_cast<DL_FUNC>(&tessel_r_describe), 1},
    {"tessel_r_eval", reinterpret_cast<DL_FUNC>(&tessel_r_eval), 3},
    {"tessel_r_solve", reinterpret_cast<DL_FUNC>(&tessel_r_solve), 6},
    {"tessel_r_runtime", reinterpret_cast<DL_FUNC>(&tessel_r_runtime), 0},
    {"tessel_r_gp_mll", reinterpret_cast<DL_FUNC>(&tessel_r_gp_mll), 10},
    {"tessel_r_gp_predict", reinterpret_cast<DL_FUNC>(&tessel_r_gp_predict), 10},
    {nullptr, nullptr, 0}};

void R_init_tessel(DllInfo* dll) {
  R_registerRoutines(dll, nullptr, kCalls, nullptr, nullptr);
  R_useDynamicSymbols(dll, FALSE);
}

}  // extern "C"
