// The Octave/MATLAB binding's one MEX gateway into tessel's C++ core (mkoctfile --mex or mex).
//
// Commands come as a first string argument: 'new', 'eval', 'grad', 'solve', 'info', 'runtime'.
// Kernels live in this MEX file as integer handles (the .m functions keep them in function
// handles); the file is locked once it holds one, so that `clear functions` cannot free them.
// Should it be reloaded anyway (`munlock`, a rebuild), the new table's handles come from a new
// random base: an older handle is an error, never another kernel.
//
// Arrays follow KeOpsLab: an argument Vi(D) / Vj(D) is a D x N array, one point per column,
// which in column-major memory is the core's row-major N x D: no copy for double inputs. Errors
// are collected inside the try blocks and raised after every C++ object has been destroyed,
// since MATLAB's mexErrMsgIdAndTxt does not return and no exception may cross the MEX boundary.
#include <mex.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessel/error.hpp"
#include "tessel/options.hpp"
#include "tessel/reduction.hpp"
#include "tessel/runtime.hpp"
#include "tessel/solve.hpp"
#include "tessel/text_kernel.hpp"

namespace {

using tessel::ArrayView;
using tessel::Category;
using tessel::DType;

// A mistake in the arguments, found by the gateway (tessel::Error is the core's).
struct ArgError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string& msg) { throw ArgError(msg); }

// The function the user called (keops_kernel, keops_grad, tessel_solve), put before the core's
// messages so that they name it too.
std::string g_who;

// One argument of a kernel function, in the order the user passes them (alias order).
using Arg = tessel::TextKernel::Arg;

struct Kernel {
  tessel::TextKernel tk;  // the reduction text (or Grad(...) of it) and its arguments
  std::string who;        // the function the user called, for messages
  tessel::Options opt;
  double index_base = 0;  // added to returned indices: 0 as in KeOpsLab, 1 on request
};

// Handles are a per-load random base plus the position in this table; a kernel made twice from
// the same texts and options is the same handle, so that a keops_kernel call in a loop does not
// grow the table. Allocated once and never freed: nothing runs at unload.
std::vector<std::unique_ptr<Kernel>>& kernels() {
  static auto* k = new std::vector<std::unique_ptr<Kernel>>();
  return *k;
}
std::map<std::string, double>& kernel_keys() {
  static auto* m = new std::map<std::string, double>();
  return *m;
}
constexpr double kHandleSpan = 16777216.0;  // 2^24 kernels per load; base * span stays exact

double handle_base() {
  static const double base = [] {
    std::random_device rd;
    return static_cast<double>(1 + rd() % (1u << 28)) * kHandleSpan;
  }();
  return base;
}

double add_kernel(std::unique_ptr<Kernel> k, const std::string& key) {
  if (static_cast<double>(kernels().size()) + 1 >= kHandleSpan)
    fail("keops_kernel: too many kernels in one process (2^24)");
  kernels().push_back(std::move(k));
  const double h = handle_base() + static_cast<double>(kernels().size());
  static bool locked = false;
  if (!locked) {
    mexLock();
    locked = true;
  }
  if (!key.empty()) kernel_keys()[key] = h;
  return h;
}

std::string class_of(const mxArray* x) { return mxGetClassName(x); }

std::string str_arg(const mxArray* x, const std::string& what) {
  if (x == nullptr || !mxIsChar(x) || (mxGetM(x) > 1 && mxGetNumberOfElements(x) > 0))
    fail(what + " must be a character string (a row of char); got a " +
         (x ? class_of(x) : "missing value"));
  char* s = mxArrayToString(x);
  if (s == nullptr) fail(what + " could not be read as text");
  std::string out(s);
  mxFree(s);
  return out;
}

double scalar_arg(const mxArray* x, const std::string& what) {
  if (!mxIsDouble(x) || mxIsComplex(x) || mxGetNumberOfElements(x) != 1)
    fail(what + " must be a real double scalar");
  return mxGetScalar(x);
}

Kernel& kernel_of(const mxArray* h, const char* who) {
  const double v = scalar_arg(h, std::string(who) + ": the kernel handle") - handle_base();
  if (v < 1 || v > static_cast<double>(kernels().size()) || v != static_cast<int64_t>(v))
    fail(std::string(who) + ": this kernel function is no longer valid (the MEX file was " +
         "cleared or reloaded since it was made); call keops_kernel again");
  return *kernels()[static_cast<size_t>(v) - 1];
}

// ---- arguments --------------------------------------------------------------------------------

struct Inputs {
  std::vector<ArrayView> views;
  std::vector<std::vector<float>> floats;  // single copies of double arguments in a single call
  int64_t ni = -1, nj = -1;
};

// Points (N) of an argument checked against its alias; D x N, or a vector when D = 1.
int64_t points_of(const Kernel& k, const Arg& a, const mxArray* x) {
  const std::string where = k.who + ": " + a.label();
  if (!mxIsNumeric(x))
    fail(where + " must be a numeric (double or single) array; got a " + class_of(x));
  if (mxIsComplex(x)) fail(where + " must be real; got a complex " + class_of(x) + " array");
  if (mxIsSparse(x)) fail(where + " must be a full array; got a sparse one (use full())");
  if (!mxIsDouble(x) && !mxIsSingle(x))
    fail(where + " must be a double or single array; got " + class_of(x) + " (convert it)");
  const mwSize nd = mxGetNumberOfDimensions(x);
  const int64_t m = static_cast<int64_t>(mxGetM(x)), n = static_cast<int64_t>(mxGetN(x));
  if (nd > 2) fail(where + " must be a matrix; got an array with " + std::to_string(nd) + " dims");
  if (a.cat == Category::Param) {
    if (m * n != a.dim || (m != 1 && n != 1))
      fail(where + " is a parameter and must be a vector of " + std::to_string(a.dim) +
           " value(s); got a " + std::to_string(m) + " x " + std::to_string(n) + " array");
    return 1;
  }
  if (m == a.dim) return n;
  if (a.dim == 1 && n == 1) return m;
  fail(where + " must be a " + std::to_string(a.dim) + " x N array (one point per column); got " +
       std::to_string(m) + " x " + std::to_string(n));
}

void check_points(const Kernel& k, const Arg& a, int64_t n, int64_t& have, const Arg*& first) {
  if (have < 0) {
    have = n;
    first = &a;
  } else if (n != have) {
    fail(k.who + ": " + a.label() + " has " + std::to_string(n) + " points (columns) but '" +
         first->name + "' has " + std::to_string(have) + "; all " + tessel::category_word(a.cat) +
         " arguments must have the same number of points");
  }
}

bool any_single(const mxArray* const* x, int n) {
  for (int q = 0; q < n; ++q)
    if (mxIsSingle(x[q])) return true;
  return false;
}

Inputs read_inputs(const Kernel& k, const mxArray* const* x, int n, bool single) {
  try {
    k.tk.check_count(static_cast<size_t>(n), k.who);
  } catch (const tessel::Error& e) {
    fail(e.what());  // the call's mistake, raised as tessel:badArgument like the checks here
  }
  const std::vector<Arg>& args = k.tk.args();
  Inputs in;
  in.views.resize(k.tk.num_slots());
  in.floats.reserve(args.size());
  const Arg *first_i = nullptr, *first_j = nullptr;
  for (size_t q = 0; q < args.size(); ++q) {
    const Arg& a = args[q];
    const int64_t pts = points_of(k, a, x[q]);
    if (a.cat == Category::I) check_points(k, a, pts, in.ni, first_i);
    if (a.cat == Category::J) check_points(k, a, pts, in.nj, first_j);
    if (!a.used) continue;
    ArrayView v;
    v.shape = {pts, a.dim};
    if (single && mxIsDouble(x[q])) {
      in.floats.emplace_back(static_cast<size_t>(pts * a.dim));
      const double* d = static_cast<const double*>(mxGetData(x[q]));
      std::copy(d, d + pts * a.dim, in.floats.back().begin());
      v.data = in.floats.back().data();
    } else {
      v.data = mxGetData(x[q]);
    }
    v.dtype = single ? DType::Float32 : DType::Float64;
    in.views[static_cast<size_t>(a.index)] = v;
  }
  // No Vi (or no Vj) argument: that axis has one row, as in KeOps (the kernels take no size
  // arguments to say otherwise).
  if (in.ni < 0) in.ni = 1;
  if (in.nj < 0) in.nj = 1;
  return in;
}

// ---- results ----------------------------------------------------------------------------------

// The D x N (or, for a gradient with respect to a parameter, D x 1) array of an output spec.
mxArray* new_result(const tessel::OutputSpec& s, bool single) {
  const int64_t cols = s.shape.empty() ? 1 : s.shape.back();
  const int64_t rows = s.shape.size() == 2 ? s.shape[0] : 1;
  return mxCreateNumericMatrix(static_cast<mwSize>(cols), static_cast<mwSize>(rows),
                               single ? mxSINGLE_CLASS : mxDOUBLE_CLASS, mxREAL);
}

template <class T>
void put_indices(const tessel::Array& idx, mxArray* out, double base) {
  T* o = static_cast<T*>(mxGetData(out));
  const int64_t* p = idx.as<int64_t>();
  for (int64_t q = 0; q < idx.size(); ++q) o[q] = static_cast<T>(static_cast<double>(p[q]) + base);
}

// KeOpsLab's one array for Min_ArgMin / KMin_ArgKMin: for each of the K best, D values then D
// indices (rows), as KeOps lays them out.
template <class T>
mxArray* stack_pair(const mxArray* vals, const mxArray* idx, int k, bool single) {
  const int64_t rows = static_cast<int64_t>(mxGetM(vals)), n = static_cast<int64_t>(mxGetN(vals));
  const int64_t d = rows / k;
  mxArray* out = mxCreateNumericMatrix(static_cast<mwSize>(2 * rows), static_cast<mwSize>(n),
                                       single ? mxSINGLE_CLASS : mxDOUBLE_CLASS, mxREAL);
  const T* v = static_cast<const T*>(mxGetData(vals));
  const T* ix = static_cast<const T*>(mxGetData(idx));
  T* o = static_cast<T*>(mxGetData(out));
  for (int64_t c = 0; c < n; ++c)
    for (int64_t s = 0; s < k; ++s)
      for (int64_t e = 0; e < d; ++e) {
        o[c * 2 * rows + 2 * s * d + e] = v[c * rows + s * d + e];
        o[c * 2 * rows + 2 * s * d + d + e] = ix[c * rows + s * d + e];
      }
  return out;
}

// Evaluates into new MATLAB arrays; two-output reductions give two arrays when asked for two,
// else KeOpsLab's stacked one.
void evaluate_kernel(const Kernel& k, const Inputs& in, bool single, int nlhs, mxArray** plhs) {
  const tessel::Sizes sizes{in.ni, in.nj};
  const tessel::Reduction& r = k.tk.reduction();
  const std::vector<tessel::OutputSpec> specs = tessel::output_specs(r, in.views, sizes);
  const int nout = static_cast<int>(specs.size());
  if (nlhs > nout)
    fail(k.who + ": this reduction (" + tessel::reduction_name(r.op()) + ") gives " +
         std::to_string(nout) + " output(s); " + std::to_string(nlhs) + " were requested");
  std::vector<mxArray*> res(specs.size(), nullptr);
  std::vector<ArrayView> outs(specs.size());
  std::vector<tessel::Array> idx(specs.size());
  for (size_t o = 0; o < specs.size(); ++o) {
    res[o] = new_result(specs[o], single);
    outs[o].shape = specs[o].shape;
    outs[o].dtype = specs[o].dtype;
    if (specs[o].dtype == DType::Int64) {
      idx[o] = tessel::Array(DType::Int64, specs[o].shape);
      outs[o].data = idx[o].data();
    } else {
      // The result array is written in place, so it must be the dtype the core writes.
      if (specs[o].dtype != (single ? DType::Float32 : DType::Float64)) {
        for (mxArray* m : res)
          if (m != nullptr) mxDestroyArray(m);
        fail(k.who + ": the core returns " + tessel::dtype_name(specs[o].dtype) + " for a " +
             (single ? "single" : "double") + " call; please report it");
      }
      outs[o].data = mxGetData(res[o]);  // the D x N result is the core's row-major N x D
    }
  }
  try {
    tessel::evaluate(r, in.views, outs, k.opt, sizes);
  } catch (...) {
    for (mxArray* m : res) mxDestroyArray(m);
    throw;
  }
  for (size_t o = 0; o < specs.size(); ++o)
    if (specs[o].dtype == DType::Int64) {
      if (single)
        put_indices<float>(idx[o], res[o], k.index_base);
      else
        put_indices<double>(idx[o], res[o], k.index_base);
    }
  if (nout == 2 && nlhs <= 1) {
    const int kk = std::max(r.k(), 1);
    plhs[0] = single ? stack_pair<float>(res[0], res[1], kk, true)
                     : stack_pair<double>(res[0], res[1], kk, false);
    mxDestroyArray(res[0]);
    mxDestroyArray(res[1]);
    return;
  }
  for (int o = 0; o < nout; ++o) {
    if (o < std::max(nlhs, 1))
      plhs[o] = res[o];
    else
      mxDestroyArray(res[o]);
  }
}

// ---- commands ---------------------------------------------------------------------------------

tessel::Options read_options(const std::string& who, const mxArray* s, double& index_base) {
  tessel::Options o;
  if (s == nullptr || mxIsEmpty(s)) return o;
  if (!mxIsStruct(s)) fail(who + ": the options must be a struct; got a " + class_of(s));
  for (int f = 0; f < mxGetNumberOfFields(s); ++f) {
    const std::string name = mxGetFieldNameByNumber(s, f);
    const mxArray* v = mxGetFieldByNumber(s, 0, f);
    if (name == "backend")
      o.backend = tessel::backend_from_name(str_arg(v, who + ": option backend"), who);
    else if (name == "sum_scheme")
      o.sum_scheme = tessel::sum_scheme_from_name(str_arg(v, who + ": option sum_scheme"), who);
    else if (name == "index_base") {
      index_base = scalar_arg(v, who + ": option index_base");
      if (index_base != 0 && index_base != 1)
        fail(who + ": option index_base must be 0 (KeOpsLab) or 1; got " +
             std::to_string(index_base));
    } else if (name == "threads") {
      const double t = scalar_arg(v, who + ": option threads");
      if (!(t >= 0 && t <= 4096 && t == static_cast<int>(t)))
        fail(who + ": option threads must be a whole number >= 0 (0: all cores); got " +
             std::to_string(t));
      o.threads = static_cast<int>(t);
    } else if (name == "tagCpuGpu" || name == "tag1D2D" || name == "device_id" || name == "tagIJ" ||
               name == "numvars" || name == "sumoutput") {
      // KeOpsLab's options: GPU scheme and device choice have no meaning on the CPU, and tagIJ
      // is read by keops_kernel.m; accepted so that KeOpsLab scripts run unchanged.
    } else {
      fail(who + ": unknown option '" + name +
           "'; known: backend, sum_scheme, index_base, threads (and KeOpsLab's tags)");
    }
  }
  return o;
}

// 'new', text, {aliases}, who, [options] -> handle
void cmd_new(int nlhs, mxArray** plhs, int nrhs, const mxArray** prhs) {
  if (nrhs < 4 || nrhs > 5) fail("tessel_mex('new', text, aliases, who[, options])");
  const std::string who = str_arg(prhs[3], "tessel_mex: who");
  g_who = who;
  const std::string text = str_arg(prhs[1], who + ": the formula");
  if (!mxIsCell(prhs[2])) fail(who + ": the aliases must be a cell array of strings");
  std::vector<std::string> al;
  for (size_t q = 0; q < mxGetNumberOfElements(prhs[2]); ++q)
    al.push_back(str_arg(mxGetCell(prhs[2], q), who + ": alias " + std::to_string(q + 1)));
  auto k = std::make_unique<Kernel>();
  k->who = who;
  k->opt = read_options(who, nrhs == 5 ? prhs[4] : nullptr, k->index_base);
  std::string key = who + '\n' + text + '\n' + tessel::backend_name(k->opt.backend) + '\n' +
                    tessel::sum_scheme_name(k->opt.sum_scheme) + '\n' +
                    std::to_string(k->index_base) + '\n' + std::to_string(k->opt.threads);
  for (const std::string& a : al) key += '\n' + a;
  const auto found = kernel_keys().find(key);
  if (found != kernel_keys().end()) {
    plhs[0] = mxCreateDoubleScalar(found->second);
    return;
  }
  k->tk = tessel::TextKernel(text, al);
  (void)nlhs;
  plhs[0] = mxCreateDoubleScalar(add_kernel(std::move(k), key));
}

// The argument keops_grad differentiates for: by alias name, or by KeOpsLab's variable form
// ('Vi(0,3)', 'Var(0,3,0)'), which must match an argument's index, category and dim.
std::vector<Arg>::const_iterator find_grad_var(const Kernel& k, const std::string& var) {
  const std::vector<Arg>& args = k.tk.args();
  auto it = std::find_if(args.begin(), args.end(), [&](const Arg& a) { return a.name == var; });
  if (it == args.end() && var.find('(') != std::string::npos) {
    const tessel::AliasInfo v = tessel::parse_aliases({"var_=" + var}).at(0);
    it = std::find_if(args.begin(), args.end(), [&](const Arg& a) {
      return a.index == v.index && a.cat == v.cat && a.dim == v.dim;
    });
  }
  if (it == args.end())
    fail("keops_grad: the kernel has no argument named '" + var +
         "'; its arguments: " + k.tk.arg_names());
  return it;
}

// 'grad', handle, var name, cotangent name -> handle of the gradient kernel, whose last
// argument is the cotangent of the first output (its shape).
void cmd_grad(mxArray** plhs, int nrhs, const mxArray** prhs) {
  if (nrhs != 4) fail("tessel_mex('grad', handle, var, eta_name)");
  g_who = "keops_grad";
  const Kernel& k = kernel_of(prhs[1], "keops_grad");
  const std::string var = str_arg(prhs[2], "keops_grad: the variable");
  const std::string eta = str_arg(prhs[3], "keops_grad: eta name");
  const std::string key = "grad\n" + std::to_string(mxGetScalar(prhs[1])) + '\n' + var + '\n' + eta;
  const auto found = kernel_keys().find(key);
  if (found != kernel_keys().end()) {
    plhs[0] = mxCreateDoubleScalar(found->second);
    return;
  }
  const auto it = find_grad_var(k, var);
  if (!it->used) fail("keops_grad: the formula does not read argument '" + var + "'");
  auto g = std::make_unique<Kernel>(k);
  g->who = "keops_grad";
  g->tk = k.tk.grad(static_cast<size_t>(it - k.tk.args().begin()), eta);
  plhs[0] = mxCreateDoubleScalar(add_kernel(std::move(g), key));
}

// 'eval', handle, args... -> outputs
void cmd_eval(int nlhs, mxArray** plhs, int nrhs, const mxArray** prhs) {
  const Kernel& k = kernel_of(prhs[1], "keops_kernel");
  g_who = k.who;
  const bool single = any_single(prhs + 2, nrhs - 2);
  const Inputs in = read_inputs(k, prhs + 2, nrhs - 2, single);
  evaluate_kernel(k, in, single, nlhs, plhs);
}

// 'solve', handle, var name, alpha, tol, maxiter, args... -> x, [iterations, residual, converged]
void cmd_solve(int nlhs, mxArray** plhs, int nrhs, const mxArray** prhs) {
  if (nrhs < 6) fail("tessel_mex('solve', handle, var, alpha, tol, maxiter, args...)");
  g_who = "tessel_solve";
  const Kernel& k = kernel_of(prhs[1], "tessel_solve");
  const std::string var = str_arg(prhs[2], "tessel_solve: the unknown");
  const std::vector<Arg>& args = k.tk.args();
  const auto it =
      std::find_if(args.begin(), args.end(), [&](const Arg& a) { return a.name == var; });
  if (it == args.end() || !it->used)
    fail("tessel_solve: the unknown '" + var + "' must be an argument the formula reads");
  tessel::SolveOptions so;
  so.alpha = scalar_arg(prhs[3], "tessel_solve: alpha");
  so.tol = scalar_arg(prhs[4], "tessel_solve: tol");
  so.maxiter = static_cast<int64_t>(scalar_arg(prhs[5], "tessel_solve: maxiter"));
  so.eval = k.opt;
  Kernel ks = k;
  ks.who = "tessel_solve";
  const bool single = any_single(prhs + 6, nrhs - 6);
  const Inputs in = read_inputs(ks, prhs + 6, nrhs - 6, single);
  const ArrayView& b = in.views[static_cast<size_t>(it->index)];
  mxArray* x =
      mxCreateNumericMatrix(static_cast<mwSize>(b.shape[1]), static_cast<mwSize>(b.shape[0]),
                            single ? mxSINGLE_CLASS : mxDOUBLE_CLASS, mxREAL);
  ArrayView xv{mxGetData(x), b.dtype, b.shape, {}, {}};
  tessel::SolveReport rep;
  try {
    rep = tessel::kernel_solve(k.tk.reduction(), it->index, in.views, xv, so);
  } catch (...) {
    mxDestroyArray(x);
    throw;
  }
  plhs[0] = x;
  if (nlhs > 1) plhs[1] = mxCreateDoubleScalar(static_cast<double>(rep.iterations));
  if (nlhs > 2) plhs[2] = mxCreateDoubleScalar(rep.residual);
  if (nlhs > 3) plhs[3] = mxCreateLogicalScalar(rep.converged);
}

mxArray* cell_of(const std::vector<std::string>& v) {
  mxArray* c = mxCreateCellMatrix(1, static_cast<mwSize>(v.size()));
  for (size_t q = 0; q < v.size(); ++q) mxSetCell(c, q, mxCreateString(v[q].c_str()));
  return c;
}

// 'info', handle -> struct describing the kernel (what F() returns)
void cmd_info(mxArray** plhs, const mxArray** prhs) {
  const Kernel& k = kernel_of(prhs[1], "keops_kernel");
  const std::vector<Arg>& args = k.tk.args();
  const tessel::Reduction& r = k.tk.reduction();
  const char* fields[] = {"handle", "formula", "reduction", "op",   "axis",
                          "args",   "cats",    "dims",      "used", "num_outputs"};
  mxArray* s = mxCreateStructMatrix(1, 1, 10, fields);
  std::vector<std::string> names, cats;
  mxArray* dims = mxCreateDoubleMatrix(1, static_cast<mwSize>(args.size()), mxREAL);
  mxArray* used = mxCreateLogicalMatrix(1, static_cast<mwSize>(args.size()));
  for (size_t q = 0; q < args.size(); ++q) {
    names.push_back(args[q].name);
    cats.push_back(tessel::category_word(args[q].cat));
    static_cast<double*>(mxGetData(dims))[q] = args[q].dim;
    mxGetLogicals(used)[q] = args[q].used;
  }
  mxSetField(s, 0, "handle", mxCreateDoubleScalar(mxGetScalar(prhs[1])));
  mxSetField(s, 0, "formula", mxCreateString(k.tk.text().c_str()));
  mxSetField(s, 0, "reduction", mxCreateString(r.str().c_str()));
  mxSetField(s, 0, "op", mxCreateString(tessel::reduction_name(r.op())));
  mxSetField(s, 0, "axis", mxCreateDoubleScalar(r.axis()));
  mxSetField(s, 0, "args", cell_of(names));
  mxSetField(s, 0, "cats", cell_of(cats));
  mxSetField(s, 0, "dims", dims);
  mxSetField(s, 0, "used", used);
  mxSetField(s, 0, "num_outputs", mxCreateDoubleScalar(r.num_outputs()));
  plhs[0] = s;
}

void cmd_runtime(mxArray** plhs) {
  const char* fields[] = {"compiler_usable", "compiler", "simd", "threads", "cache_dir"};
  mxArray* s = mxCreateStructMatrix(1, 1, 5, fields);
  const tessel::CompilerInfo c = tessel::compiler_info();
  mxSetField(s, 0, "compiler_usable", mxCreateLogicalScalar(c.usable));
  mxSetField(s, 0, "compiler", mxCreateString(c.usable ? c.path.c_str() : c.problem.c_str()));
  mxSetField(s, 0, "simd", mxCreateString(tessel::simd_level().c_str()));
  mxSetField(s, 0, "threads", mxCreateDoubleScalar(tessel::num_threads()));
  mxSetField(s, 0, "cache_dir", mxCreateString(tessel::cache_dir().c_str()));
  plhs[0] = s;
}

void dispatch(int nlhs, mxArray** plhs, int nrhs, const mxArray** prhs) {
  if (nrhs < 1) fail("tessel_mex: the first argument must be a command ('new', 'eval', ...)");
  const std::string cmd = str_arg(prhs[0], "tessel_mex: the command");
  g_who = "tessel_mex";
  if (cmd == "eval" && nrhs == 2) return cmd_info(plhs, prhs);  // F() describes F
  if (cmd == "eval" && nrhs > 2) return cmd_eval(nlhs, plhs, nrhs, prhs);
  if (cmd == "new") return cmd_new(nlhs, plhs, nrhs, prhs);
  if (cmd == "grad") return cmd_grad(plhs, nrhs, prhs);
  if (cmd == "solve") return cmd_solve(nlhs, plhs, nrhs, prhs);
  if (cmd == "info" && nrhs == 2) return cmd_info(plhs, prhs);
  if (cmd == "runtime") return cmd_runtime(plhs);
  fail("tessel_mex: unknown command '" + cmd + "' or wrong number of arguments");
}

// The core's message, with the user's function in front unless the core named it already.
std::string with_who(const char* what) {
  const std::string m = what;
  return m.rfind(g_who + ":", 0) == 0 ? m : g_who + ": " + m;
}

}  // namespace

extern "C" void mexFunction(int nlhs, mxArray* plhs[], int nrhs, const mxArray* prhs[]) {
  // Static so that no destructor is skipped when mexErrMsgIdAndTxt leaves without returning.
  static std::string message;
  const char* id = nullptr;
  try {
    dispatch(nlhs, plhs, nrhs, prhs);
  } catch (const ArgError& e) {
    message = e.what();
    id = "tessel:badArgument";
  } catch (const tessel::Error& e) {
    message = with_who(e.what());
    id = "tessel:error";
  } catch (const tessel::InternalError& e) {
    message = with_who(e.what());
    id = "tessel:internalError";
  } catch (const std::bad_alloc&) {
    message = "tessel: out of memory";
    id = "tessel:outOfMemory";
  } catch (const std::exception& e) {
    message = with_who(e.what());
    id = "tessel:error";
  } catch (...) {
    message = "tessel: unknown C++ exception";
    id = "tessel:error";
  }
  if (id != nullptr) mexErrMsgIdAndTxt(id, "%s", message.c_str());
}
