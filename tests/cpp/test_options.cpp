// normalize_options: every spelling of the front ends' keyword options, and the errors for bad
// ones.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tessel/options.hpp"

namespace tessel {
namespace {

using Kind = OptionValue::Kind;
using Args = std::vector<std::pair<std::string, OptionValue>>;

// Values as a front end hands them over (an aggregate: kind, b, i, f, s).
OptionValue str(std::string s) { return {Kind::Str, false, 0, 0, std::move(s)}; }
OptionValue boolean(bool b) { return {Kind::Bool, b}; }
OptionValue integer(int64_t i) { return {Kind::Int, false, i}; }
OptionValue number(double f) { return {Kind::Float, false, 0, f}; }

// The message of the exception `fn` throws, which must be of type E.
template <class E, class F>
std::string message_of(F fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

TEST(Options, EveryBackendSpelling) {
  for (const char* b : {"GPU", "GPU_1D", "GPU_2D", "GPU_1D_host", "GPU_1D_device", "GPU_2D_host",
                        "GPU_2D_device", "cuda", "gpu"})
    EXPECT_EQ(backend_from_name(b, "t"), Backend::Cuda) << b;
  for (const char* b : {"auto", "CPU", "cpu"}) EXPECT_EQ(backend_from_name(b, "t"), Backend::Auto);
  EXPECT_EQ(backend_from_name("compiled", "t"), Backend::Compiled);
  EXPECT_EQ(backend_from_name("interpreter", "t"), Backend::Interpreter);
  for (Backend b : {Backend::Auto, Backend::Compiled, Backend::Interpreter, Backend::Cuda})
    EXPECT_EQ(backend_from_name(backend_name(b), "t"), b);  // canonical names read back
  const std::string m = message_of<Error>([] { backend_from_name("TPU", "Genred"); });
  EXPECT_NE(m.find("Genred: invalid backend 'TPU'"), std::string::npos) << m;
}

TEST(Options, SumSchemesAndAccumulation) {
  for (const auto& [name, s] :
       std::vector<std::pair<const char*, SumScheme>>{{"auto", SumScheme::Block},
                                                      {"block_sum", SumScheme::Block},
                                                      {"kahan_scheme", SumScheme::Kahan},
                                                      {"direct_sum", SumScheme::Direct},
                                                      {"block", SumScheme::Block},
                                                      {"kahan", SumScheme::Kahan},
                                                      {"direct", SumScheme::Direct}})
    EXPECT_EQ(sum_scheme_from_name(name, "t"), s) << name;
  NormalizedOptions n =
      normalize_options("Genred", kBuildOptions, Args{{"use_double_acc", boolean(true)}});
  EXPECT_EQ(n.accumulate_f64, std::optional<bool>(true));
  n = normalize_options("Genred", kBuildOptions, Args{{"dtype_acc", str("float32")}});
  EXPECT_EQ(n.accumulate_f64, std::optional<bool>(false));
  n = normalize_options("Genred", kBuildOptions, Args{{"dtype_acc", str("auto")}});
  EXPECT_FALSE(n.accumulate_f64.has_value());
  std::string m = message_of<Error>([] {
    normalize_options("Genred", kBuildOptions,
                      Args{{"dtype_acc", str("float64")}, {"use_double_acc", boolean(true)}});
  });
  EXPECT_NE(m.find("cannot both be set"), std::string::npos) << m;
  // pykeops: accuracy options belong to sum-type reductions.
  m = message_of<Error>([] {
    normalize_options("Genred", kBuildOptions, Args{{"sum_scheme", str("kahan_scheme")}},
                      ReductionOp::ArgMin);
  });
  EXPECT_NE(m.find("for the ArgMin reduction"), std::string::npos) << m;
  m = message_of<Error>([] {
    normalize_options("Genred", kBuildOptions, Args{{"dtype_acc", str("float64")}},
                      ReductionOp::Max);
  });
  EXPECT_NE(m.find("dtype_acc must be 'auto' for the Max reduction"), std::string::npos) << m;
  EXPECT_NO_THROW(normalize_options("Genred", kBuildOptions, Args{{"dtype_acc", str("float64")}},
                                    ReductionOp::SumSoftMaxWeight));
}

TEST(Options, UnknownKeysAndWrongTypesAreTypeErrors) {
  std::string m = message_of<OptionTypeError>([] {
    normalize_options("KernelSolve", kSolveOptions, Args{{"tolerance", number(1)}});
  });
  EXPECT_NE(m.find("KernelSolve: unexpected keyword option 'tolerance'; accepted: "),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("tol"), std::string::npos) << m;
  m = message_of<OptionTypeError>([] {
    normalize_options("Genred", kCallOptions, Args{{"ni", number(3.5)}});
  });
  EXPECT_NE(m.find("Genred: ni (the number of i rows) must be an integer, got float"),
            std::string::npos)
      << m;
  m = message_of<OptionTypeError>([] {
    normalize_options("Genred", kBuildOptions, Args{{"enable_chunks", str("no")}});
  });
  EXPECT_NE(m.find("enable_chunks must be True or False, got str 'no'"), std::string::npos) << m;
  // A build option is not a call option.
  EXPECT_THROW(normalize_options("Genred", kCallOptions, Args{{"sum_scheme", str("auto")}}),
               OptionTypeError);
}

TEST(Options, WrongValuesAreValueErrors) {
  const std::string m = message_of<Error>([] {
    normalize_options("Genred", kCallOptions, Args{{"nj", integer(-1)}});
  });
  EXPECT_NE(m.find("Genred: nj (the number of j rows) must be in [0, "), std::string::npos) << m;
  OptionValue huge = integer(0);
  huge.too_large = true;
  EXPECT_THROW(normalize_options("Genred", kCallOptions, Args{{"ni", huge}}), Error);
  EXPECT_THROW(normalize_options("KernelSolve", kSolveOptions, Args{{"maxiter", integer(0)}}),
               Error);
  EXPECT_THROW(normalize_options("KernelSolve", kSolveOptions, Args{{"alpha", number(-0.5)}}),
               Error);
  EXPECT_THROW(
      normalize_options("KernelSolve", kSolveOptions, Args{{"on_nonconvergence", str("maybe")}}),
      Error);
  EXPECT_THROW(normalize_options("Genred", kCallOptions, Args{{"device_id", integer(-2)}}), Error);
}

TEST(Options, GivenValuesComeBackCanonical) {
  OptionValue ranges;
  ranges.kind = Kind::Other;
  ranges.s = "list";
  const NormalizedOptions n = normalize_options("KernelSolve", kSolveOptions,
                                                Args{{"backend", str("GPU_2D")},
                                                     {"alpha", integer(2)},
                                                     {"tol", number(1e-3)},
                                                     {"maxiter", integer(7)},
                                                     {"on_nonconvergence", str("raise")},
                                                     {"ranges", ranges},
                                                     {"device_id", integer(1)},
                                                     {"atol", OptionValue{}}});
  EXPECT_EQ(n.backend, std::optional<Backend>(Backend::Cuda));
  EXPECT_EQ(n.alpha, std::optional<double>(2.0));
  EXPECT_EQ(n.tol, std::optional<double>(1e-3));
  EXPECT_EQ(n.maxiter, std::optional<int64_t>(7));
  EXPECT_EQ(n.on_nonconvergence, std::optional<std::string>("raise"));
  EXPECT_FALSE(n.atol.has_value());  // None: not given
  EXPECT_EQ(n.passed, std::vector<std::string>{"ranges"});
  EXPECT_EQ(n.ignored, std::vector<std::string>{"device_id"});
}

TEST(Options, IgnoredOptionsHaveReasons) {
  const auto ignored = ignored_options();
  EXPECT_GE(ignored.size(), 6u);
  for (const auto& [name, reason] : ignored) {
    EXPECT_GT(reason.size(), 20u) << name;
    // Accepted wherever pykeops takes them.
    OptionValue v = boolean(true);
    if (name == "device_id") v = integer(0);
    const unsigned scope = name == "device_id" ? kCallOptions : kBuildOptions;
    EXPECT_NO_THROW(normalize_options("Genred", scope, Args{{name, v}})) << name;
  }
}

}  // namespace
}  // namespace tessel
