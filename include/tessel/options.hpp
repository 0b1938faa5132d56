// The front ends' keyword options (backend, accuracy, sizes, solve settings) read and checked in
// one place.
//
// Genred, KernelSolve and LazyTensor reductions, in tessel's Python API and in its pykeops layer,
// hand their keywords here as they were written; every spelling pykeops 2.3 accepts (backend
// "GPU_1D_host", sum_scheme "kahan_scheme", use_double_acc, ...) and tessel's own short names map
// to one canonical value, so the front ends cannot disagree on what an option means.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessel/error.hpp"
#include "tessel/reduction.hpp"

namespace tessel {

/// An option of the wrong type (Python: TypeError); a wrong value throws Error (ValueError).
class OptionTypeError : public Error {
 public:
  using Error::Error;
};

/// One keyword value as a front end hands it over. Other: a value the core does not read (the
/// arrays of `ranges`, the dict of `stats`, a torch dtype); `s` then names its type for messages.
struct OptionValue {
  enum class Kind : uint8_t { None, Bool, Int, Float, Str, Other };
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;           // Str: the text; Other: the value's type name
  bool too_large = false;  // Int: outside the 64-bit range (then i is 0)
  /// How the caller's language shows the value and its type ("'3'", "str"), for messages; when
  /// empty, messages show it in C++ terms.
  std::string repr, type_name;
};

/// Which keywords a function takes (a bit set): construction of Genred / KernelSolve, a Genred
/// call, a KernelSolve call. A LazyTensor reduction takes kBuildOptions | kCallOptions.
enum OptionScope : unsigned { kBuildOptions = 1, kCallOptions = 2, kSolveOptions = 4 };

/// The options given (None counts as not given), in canonical form. accumulate_f64 comes from
/// dtype_acc or use_double_acc; maxiter 0 means "the solver's default".
struct NormalizedOptions {
  std::optional<Backend> backend;
  std::optional<SumScheme> sum_scheme;
  std::optional<bool> accumulate_f64;
  std::optional<int64_t> ni, nj, maxiter, gpu_memory_budget;
  std::optional<double> alpha, tol, atol, eps;
  std::optional<std::string> on_nonconvergence;  // "raise", "warn" or "ignore"
  std::vector<std::string> passed;   // keys whose values the caller converts (ranges, out, stats)
  std::vector<std::string> ignored;  // accepted keys that tessel ignores: see ignored_options()
};

/// Checks and canonicalises `options` for the function `who` ("Genred", "KernelSolve",
/// "LazyTensor.sum", ...). An unknown key or a wrong type throws OptionTypeError, a wrong value
/// Error; each message names `who`, the option and what was expected. `reduction`, when given,
/// enables pykeops's rules tying accuracy options to sum-type reductions.
NormalizedOptions normalize_options(std::string_view who, unsigned scope,
                                    const std::vector<std::pair<std::string, OptionValue>>& options,
                                    std::optional<ReductionOp> reduction = std::nullopt);

/// Every backend spelling: tessel's "auto", "compiled", "interpreter", "cuda" and pykeops's
/// "CPU", "GPU", "GPU_1D", "GPU_2D", "GPU_{1,2}D_{host,device}" (all GPU schemes are tessel's
/// CUDA backend; "CPU" is Auto, which runs host arrays on the CPU).
Backend backend_from_name(std::string_view name, std::string_view who);
const char* backend_name(Backend b);  // "auto", "compiled", "interpreter", "cuda"
/// "block", "kahan", "direct" and pykeops's "auto", "block_sum", "kahan_scheme", "direct_sum".
SumScheme sum_scheme_from_name(std::string_view name, std::string_view who);
const char* sum_scheme_name(SumScheme s);  // "block", "kahan", "direct"

/// The pykeops options tessel accepts and ignores, each with the reason: (name, reason).
std::vector<std::pair<std::string, std::string>> ignored_options();

}  // namespace tessel
