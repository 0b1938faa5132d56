// normalize_options(): the one reader of the front ends' keyword options and their spellings.
#include "tessel/options.hpp"

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <sstream>

#include "reduction/reduction_info.hpp"

namespace tessel {
namespace {

using Kind = OptionValue::Kind;

// What an option's value must be. Any: not read at all (an ignored option whose value pykeops
// itself does not check); Object: handed back to the caller, which converts it.
enum class Type : uint8_t { Any, Bool, Int, Number, Str, Object };

struct Spec {
  const char* name;
  unsigned scope;
  Type type;
  const char* ignored_because;  // null: tessel uses the option
};

constexpr unsigned kAll = kBuildOptions | kCallOptions | kSolveOptions;

// Every keyword any front end takes. The ignored ones are pykeops options kept so that pykeops
// code runs unchanged; the reason says why tessel can do without each.
constexpr Spec kOptions[] = {
    {"backend", kAll, Type::Str, nullptr},
    {"dtype_acc", kBuildOptions, Type::Str, nullptr},
    {"use_double_acc", kBuildOptions, Type::Bool, nullptr},
    {"sum_scheme", kBuildOptions, Type::Str, nullptr},
    {"ranges", kCallOptions | kSolveOptions, Type::Object, nullptr},
    {"out", kCallOptions, Type::Object, nullptr},
    {"gpu_memory_budget", kBuildOptions | kCallOptions, Type::Int, nullptr},
    {"gpu_devices", kBuildOptions, Type::Object, nullptr},
    {"ni", kCallOptions, Type::Int, nullptr},
    {"nj", kCallOptions, Type::Int, nullptr},
    {"alpha", kSolveOptions, Type::Number, nullptr},
    {"tol", kSolveOptions, Type::Number, nullptr},
    {"atol", kSolveOptions, Type::Number, nullptr},
    {"eps", kSolveOptions, Type::Number, nullptr},
    {"maxiter", kSolveOptions, Type::Int, nullptr},
    {"on_nonconvergence", kSolveOptions, Type::Str, nullptr},
    {"stats", kSolveOptions, Type::Object, nullptr},
    {"dtype", kBuildOptions, Type::Any,
     "the arrays' dtype decides how a reduction runs (pykeops 2.x ignores it too)"},
    {"cuda_type", kBuildOptions, Type::Any,
     "an old name of dtype: the arrays' dtype decides (pykeops 2.x ignores it too)"},
    {"enable_chunks", kBuildOptions, Type::Bool,
     "a KeOps CUDA scheduling mode for large dims; tessel's kernels choose their tiling from "
     "the dims themselves, with the same results"},
    {"rec_multVar_highdim", kBuildOptions, Type::Any,
     "a KeOps CUDA mode for one formula shape; tessel's kernels need no such hint"},
    {"use_fast_math", kBuildOptions, Type::Bool,
     "tessel compiles its kernels with fixed flags that keep its documented accuracy; it has no "
     "fast-math switch"},
    {"optional_flags", kBuildOptions, Type::Any,
     "extra KeOps compiler flags; tessel's compiler flags are its own (TESSEL_* settings)"},
    {"device_id", kCallOptions | kSolveOptions, Type::Int,
     "tessel runs CUDA arrays on the GPU that holds them, and host arrays sent to a GPU backend "
     "on GPU 0"},
};

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// The value as messages show it: with its type after a wrong type ("str '3'"), alone after a
// wrong value ("-5").
std::string shown(const OptionValue& v, bool with_type) {
  if (!v.repr.empty()) return with_type ? v.type_name + " " + v.repr : v.repr;
  std::ostringstream os;
  switch (v.kind) {
    case Kind::None:
      os << "None";
      break;
    case Kind::Bool:
      os << (with_type ? "bool " : "") << (v.b ? "True" : "False");
      break;
    case Kind::Int:
      os << (with_type ? "int " : "") << v.i;
      break;
    case Kind::Float:
      os << (with_type ? "float " : "") << v.f;
      break;
    case Kind::Str:
      os << (with_type ? "str " : "") << quoted(detail::escape_text(v.s, true));
      break;
    case Kind::Other:
      os << v.s;
      break;
  }
  return os.str();
}

// The option as messages name it (the sizes say what they are).
std::string label(const char* name) {
  const std::string_view n = name;
  if (n == "ni") return "ni (the number of i rows)";
  if (n == "nj") return "nj (the number of j rows)";
  return name;
}

[[noreturn]] void wrong_type(std::string_view who, const char* name, const char* expected,
                             const OptionValue& v) {
  throw OptionTypeError(std::string(who) + ": " + label(name) + " must be " + expected + ", got " +
                        shown(v, true));
}

[[noreturn]] void wrong_value(std::string_view who, const char* name, const std::string& expected,
                              const OptionValue& v) {
  throw Error(std::string(who) + ": " + label(name) + " must be " + expected + ", got " +
              shown(v, false));
}

// An integer option in [low, high] (a value outside the 64-bit range is outside too).
int64_t in_range(std::string_view who, const char* name, const OptionValue& v, int64_t low,
                 int64_t high, const char* expected = nullptr) {
  if (v.too_large || v.i < low || v.i > high)
    wrong_value(who, name,
                expected ? std::string(expected)
                         : "in [" + std::to_string(low) + ", " + std::to_string(high) + "]",
                v);
  return v.i;
}

const Spec* find(std::string_view key) {
  for (const Spec& s : kOptions)
    if (key == s.name) return &s;
  return nullptr;
}

[[noreturn]] void unknown(std::string_view who, unsigned scope, const std::string& key) {
  std::string known;
  for (const Spec& s : kOptions)
    if (s.scope & scope) known += std::string(known.empty() ? "" : ", ") + s.name;
  throw OptionTypeError(std::string(who) + ": unexpected keyword option " +
                        quoted(detail::escape_text(key, true)) + "; accepted: " + known);
}

void check_type(std::string_view who, const Spec& s, const OptionValue& v) {
  switch (s.type) {
    case Type::Any:
    case Type::Object:
      return;
    case Type::Bool:
      if (v.kind != Kind::Bool) wrong_type(who, s.name, "True or False", v);
      return;
    case Type::Int:
      if (v.kind != Kind::Int) wrong_type(who, s.name, "an integer", v);
      return;
    case Type::Number:
      if (v.kind != Kind::Int && v.kind != Kind::Float) wrong_type(who, s.name, "a number", v);
      return;
    case Type::Str:
      if (v.kind != Kind::Str) wrong_type(who, s.name, "a string", v);
      return;
  }
}

// KeOps's "sum type" reductions: those whose state is a sum, where the accumulation options apply.
bool sum_type(ReductionOp op) {
  const ReductionFamily f = reduction_info(op).family;
  return f == ReductionFamily::Sum || f == ReductionFamily::SoftMax;
}

double non_negative(std::string_view who, const char* name, const OptionValue& v) {
  const double x = v.kind == Kind::Int ? static_cast<double>(v.i) : v.f;
  if (!(x >= 0)) wrong_value(who, name, "a number >= 0", v);
  return x;
}

// dtype_acc and use_double_acc, as pykeops reads them: at most one of the two.
std::optional<bool> accumulation(std::string_view who, const OptionValue* dtype_acc,
                                 const OptionValue* use_double_acc) {
  std::optional<bool> f64;
  if (dtype_acc) {
    const std::string& s = dtype_acc->s;
    if (s == "float64")
      f64 = true;
    else if (s == "float32")
      f64 = false;
    else if (s == "float16")
      wrong_value(who, "dtype_acc", "'auto', 'float32' or 'float64' (tessel has no float16)",
                  *dtype_acc);
    else if (s != "auto")
      wrong_value(who, "dtype_acc", "'auto', 'float32' or 'float64'", *dtype_acc);
  }
  if (use_double_acc && use_double_acc->b) {
    if (f64.has_value())
      throw Error(std::string(who) + ": use_double_acc and dtype_acc cannot both be set");
    f64 = true;
  }
  return f64;
}

}  // namespace

Backend backend_from_name(std::string_view n, std::string_view who) {
  if (n == "auto" || n == "CPU" || n == "cpu") return Backend::Auto;
  if (n == "compiled") return Backend::Compiled;
  if (n == "interpreter") return Backend::Interpreter;
  if (n == "cuda" || n == "gpu" || n == "GPU" || n == "GPU_1D" || n == "GPU_2D" ||
      n == "GPU_1D_host" || n == "GPU_1D_device" || n == "GPU_2D_host" || n == "GPU_2D_device")
    return Backend::Cuda;
  throw Error(std::string(who) + ": invalid backend " + quoted(detail::escape_text(n, true)) +
              "; backend must be one of 'auto', 'compiled', "
              "'interpreter', 'cuda' or pykeops's 'CPU', 'GPU', 'GPU_1D', 'GPU_2D', "
              "'GPU_1D_host', 'GPU_1D_device', 'GPU_2D_host', 'GPU_2D_device'");
}

// In Backend order: the name each backend prints as (backend_from_name reads each back).
constexpr const char* kBackendNames[] = {"auto", "compiled", "interpreter", "cuda"};
static_assert(std::size(kBackendNames) == static_cast<size_t>(Backend::Cuda) + 1,
              "every Backend needs a name");

const char* backend_name(Backend b) {
  const auto q = static_cast<size_t>(b);
  return q < std::size(kBackendNames) ? kBackendNames[q] : "auto";
}

SumScheme sum_scheme_from_name(std::string_view n, std::string_view who) {
  if (n == "auto" || n == "block" || n == "block_sum") return SumScheme::Block;
  if (n == "kahan" || n == "kahan_scheme") return SumScheme::Kahan;
  if (n == "direct" || n == "direct_sum") return SumScheme::Direct;
  throw Error(std::string(who) +
              ": sum_scheme must be one of 'auto', 'block_sum', "
              "'kahan_scheme', 'direct_sum' (or 'block', 'kahan', 'direct'), got " +
              quoted(detail::escape_text(n, true)));
}

// In SumScheme order: the name each scheme prints as (sum_scheme_from_name reads each back).
constexpr const char* kSumSchemeNames[] = {"block", "kahan", "direct"};
static_assert(std::size(kSumSchemeNames) == static_cast<size_t>(SumScheme::Direct) + 1,
              "every SumScheme needs a name");

const char* sum_scheme_name(SumScheme s) {
  const auto q = static_cast<size_t>(s);
  return q < std::size(kSumSchemeNames) ? kSumSchemeNames[q] : "block";
}

std::vector<std::pair<std::string, std::string>> ignored_options() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Spec& s : kOptions)
    if (s.ignored_because) out.emplace_back(s.name, s.ignored_because);
  return out;
}

NormalizedOptions normalize_options(std::string_view who, unsigned scope,
                                    const std::vector<std::pair<std::string, OptionValue>>& options,
                                    std::optional<ReductionOp> reduction) {
  NormalizedOptions out;
  const OptionValue *dtype_acc = nullptr, *use_double_acc = nullptr;
  for (const auto& [key, v] : options) {
    const Spec* s = find(key);
    if (!s || !(s->scope & scope)) unknown(who, scope, key);
    if (v.kind == Kind::None) continue;  // None: the default
    check_type(who, *s, v);
    const std::string_view name = s->name;
    if (s->ignored_because) {
      out.ignored.push_back(key);
      if (name == "device_id")
        in_range(who, s->name, v, -1, INT32_MAX, "-1 (the default GPU) or a GPU index >= 0");
    } else if (s->type == Type::Object) {
      out.passed.push_back(key);
    } else if (name == "backend") {
      out.backend = backend_from_name(v.s, who);
    } else if (name == "sum_scheme") {
      const SumScheme scheme = sum_scheme_from_name(v.s, who);
      // pykeops: block and Kahan sums are for sum-type reductions; "auto" fits every reduction.
      if (reduction && !sum_type(*reduction) && scheme != SumScheme::Direct && v.s != "auto")
        wrong_value(who, s->name,
                    std::string("'auto' or 'direct_sum' for the ") + reduction_name(*reduction) +
                        " reduction (block and Kahan sums apply to Sum, LogSumExp and "
                        "SumSoftMaxWeight)",
                    v);
      out.sum_scheme = scheme;
    } else if (name == "dtype_acc") {
      dtype_acc = &v;
    } else if (name == "use_double_acc") {
      use_double_acc = &v;
    } else if (name == "gpu_memory_budget") {
      out.gpu_memory_budget =
          in_range(who, s->name, v, 0, INT64_MAX, "a number of bytes >= 0 (0: no limit)");
    } else if (name == "ni" || name == "nj") {
      (name == "ni" ? out.ni : out.nj) = in_range(who, s->name, v, 0, INT64_MAX);
    } else if (name == "maxiter") {
      out.maxiter = in_range(who, s->name, v, 1, INT64_MAX, "a positive integer or None");
    } else if (name == "on_nonconvergence") {
      if (v.s != "raise" && v.s != "warn" && v.s != "ignore")
        wrong_value(who, s->name, "'raise', 'warn' or 'ignore'", v);
      out.on_nonconvergence = v.s;
    } else {
      const double x = non_negative(who, s->name, v);
      (name == "alpha"  ? out.alpha
       : name == "tol"  ? out.tol
       : name == "atol" ? out.atol
                        : out.eps) = x;
    }
  }
  out.accumulate_f64 = accumulation(who, dtype_acc, use_double_acc);
  if (dtype_acc && dtype_acc->s != "auto" && reduction && !sum_type(*reduction))
    wrong_value(who, "dtype_acc",
                std::string("'auto' for the ") + reduction_name(*reduction) +
                    " reduction (it applies to Sum, LogSumExp and SumSoftMaxWeight)",
                *dtype_acc);
  return out;
}

}  // namespace tessel
