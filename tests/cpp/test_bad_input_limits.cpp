// Bad input at the limits: sizes that overflow, formulas too deep for recursion, dims near 2^31.
#include <pthread.h>

#include <chrono>
#include <climits>
#include <cstdint>

#include "reduction_helpers.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// Runs f on a thread with a small stack (256 KiB), so that a walk recursing once per level of a
// formula overflows at a depth a test can afford to build.
void on_small_stack(const std::function<void()>& f) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t t;
  auto body = [](void* p) -> void* {
    (*static_cast<const std::function<void()>*>(p))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&t, &attr, body, const_cast<std::function<void()>*>(&f)), 0);
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(BadInputLimits, DeepFormulasAreFreedWithoutRecursion) {
  // 100k levels: one frame per level of ~Node needs megabytes of stack; 256 KiB is given.
  on_small_stack([] {
    Formula f = vi(0, 1);
    for (int k = 0; k < 100000; ++k) f = exp(f);
    Formula s = vi(0, 1);
    for (int k = 0; k < 100000; ++k) s = s + vj(1, 1) * static_cast<double>(k + 2);
    EXPECT_EQ(f.dim(), 1);
    EXPECT_EQ(s.dim(), 1);
  });  // both are released here, on the small stack
}

TEST(BadInputLimits, DeepFormulasPrintHashAndDifferentiateOnASmallStack) {
  on_small_stack([] {
    const Formula x = vi(0, 1);
    Formula f = x;
    for (int k = 0; k < 40000; ++k) f = sin(f);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string text = f.str();  // quadratic before: 43 s at this depth
    EXPECT_LT(seconds_since(t0), 5.0);
    EXPECT_EQ(text.size(), 40000 * 5 + std::string("Vi(0,1)").size());
    EXPECT_TRUE(parse(text).same(f));
    const Formula g = grad(f, x, constant(1.0));
    EXPECT_EQ(g.dim(), 1);
    EXPECT_EQ(substitute(f, {x}, {vi(0, 1) * 2.0}).dim(), 1);
    const auto v = eval_point(f, {{0, {0.5}}});
    EXPECT_TRUE(std::isfinite(v.at(0)));
    const Reduction r(ReductionOp::Sum, f * vj(1, 1));
    EXPECT_FALSE(r.str().empty());
    EXPECT_EQ(grad(r, 0).output_dim(0), 1);
  });
}

TEST(BadInputLimits, SizesThatOverflowAreErrors) {
  // 2^61 float64 elements: the byte count wrapped to 0 and the kernel wrote past the buffer.
  expect_error([] { Array(DType::Float64, {int64_t{1} << 61, 8}); },
               {"Array", "2305843009213693952", "overflows"});
  expect_error([] { Array(DType::Float32, {int64_t{1} << 61, 1}); },
               {"Array", "(2305843009213693952, 1)", "float32"});
#ifndef __SANITIZE_ADDRESS__
  // ASan's allocator aborts on a request it cannot serve instead of throwing std::bad_alloc, so
  // the out-of-memory path is only checked in a normal build.
  expect_error([] { Array(DType::Float32, {int64_t{1} << 40, 1}); },
               {"Array", "out of memory"});
#endif
  const Reduction r(ReductionOp::Sum, vj(0, 1) * 2.0);
  const std::vector<Array> y = {random_array(DType::Float32, {4, 1}, 1)};
  Options o;
  o.backend = Backend::Interpreter;
#ifdef __SANITIZE_ADDRESS__
  for (int64_t ni : {int64_t{1} << 61, INT64_MAX})  // 2^40 rows: the allocation ASan aborts on
#else
  for (int64_t ni : {int64_t{1} << 61, int64_t{1} << 40, INT64_MAX})
#endif
    expect_error([&] { evaluate(r, y, o, Sizes{ni, -1}); }, {"Array", std::to_string(ni).c_str()});
  expect_error([&] { evaluate(r, y, o, Sizes{-5, -1}); }, {"evaluate", "Sizes.ni = -5", "negative"});
  // A view whose offsets overflow: broadcast (stride 0) is fine, huge strides are not.
  float buf[4] = {1, 2, 3, 4};
  ArrayView v{buf, DType::Float32, {4, 1}, {int64_t{1} << 62, 1}};
  std::vector<ArrayView> in = {v};
  expect_error([&] { evaluate(r, in, o, Sizes{3, -1}); }, {"evaluate", "input 0", "too large"});
  ArrayView huge{buf, DType::Float32, {int64_t{1} << 32, int64_t{1} << 32, 1}, {}};
  expect_error([&] { (void)huge.size(); }, {"ArrayView", "overflows"});
  // Batch dims whose product overflows.
  ArrayView b{buf, DType::Float32, {int64_t{1} << 40, int64_t{1} << 40, 4, 1}, {0, 0, 1, 1}};
  std::vector<ArrayView> bin = {b};
  expect_error([&] { evaluate(r, bin, o); }, {"evaluate", "batch", "overflows"});
  // Block-sparse slices beyond the intervals.
  auto br = std::make_shared<BlockRanges>();
  br->ranges_i = {0, 3};
  br->slices_i = {INT64_MAX};
  br->redranges_j = {0, 4};
  o.ranges = br;
  expect_error([&] { evaluate(r, y, o, Sizes{3, -1}); }, {"evaluate", "slices_i"});
}

TEST(BadInputLimits, IntegerEdgesInFormulas) {
  expect_error([] { rational(INT64_MIN, -1); }, {"Rat", "-9223372036854775808"});
  expect_error([] { rational(1, INT64_MIN); }, {"Rat"});
  expect_error([] { parse("Rat(-9223372036854775808,-1)"); }, {"Rat"});
  EXPECT_EQ(rational(INT64_MAX, -INT64_MAX).node().value, -1.0);
  // Dims whose sum or product leaves int: the dim wrapped to -2 and 0 before.
  expect_error([] { concat(vi(0, 1 << 24), vi(1, 1 << 24)); },
               {"Concat", "larger than the largest supported dim"});
  expect_error([] { parse("Concat(Vi(0,2147483647),Vi(1,2147483647))"); }, {"Vi", "2147483647"});
  expect_error([] { tensorprod(vi(0, 65536), vj(1, 65536)); }, {"TensorProd", "4294967296"});
  expect_error([] { vi(0, INT_MAX); }, {"Vi", "largest supported dim"});
  expect_error([] { one_hot(vi(0, 1), -3); }, {"OneHot", ">= 1"});
  expect_error([] { extract(vi(0, 3), INT_MAX, INT_MAX); }, {"Extract", "does not fit"});
  expect_error([] { sym_sqnorm(vi(0, 1), vi(1, 65536)); }, {"SymSqNorm", "4294967296"});
  expect_error([] { weighted_sqnorm(vi(0, 2), vi(1, 65536)); }, {"WeightedSqNorm", "4294967296"});
  expect_error([] { tensordot(vi(0, 4), vj(1, 4), {4, 1 << 30, 1 << 30, 1 << 30}, {4}, {0}, {0}); },
               {"TensorDot"});
  for (const char* text : {"Zero(-1)", "Vi(0,-3)", "Vj(-1,2)", "OneHot(Vi(0,1),-2)", "Var(0,-1,0)",
                           "Extract(Vi(0,3),2,-1)", "Elem(Vi(0,3),-1)"})
    expect_error([&] { parse(text); }, {"parse"});
  expect_error([] { parse("X", {"X = Vi(-4)"}); }, {"parse"});
  expect_error([] { parse("X", {"X = Vi(0,-4)"}); }, {"parse", "dim must be >= 1"});
}

TEST(BadInputLimits, MessagesQuoteOddCharactersSafely) {
  // The message must be printable ASCII around the quoted character: Python decodes it as UTF-8
  // (a lone lead byte made it ValueError('')) and C strings end at a NUL.
  auto printable = [](const std::string& m) {
    for (char c : m)
      if (c != '\n' && (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e))
        return false;
    return true;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"X+\xc3\xa9", "'U+00E9'"},          {"X + Y\xc3\xa9", "'U+00E9'"},
      {std::string("X\0Y", 3), "'\\x00'"}, {"Exp(X)\xff", "'\\xFF'"},
      {"\xe6\x97\xa5+X", "'U+65E5'"},      {"X\x7f", "'\\x7F'"},
      {"X\x01", "'\\x01'"},                {"\xf0\x9f\x98\x80", "'U+1F600'"},
      {"X+\xc3", "'\\xC3'"},               {"\xed\xa0\x80", "'\\xED\\xA0\\x80'"}};  // a lone surrogate
  for (const auto& [text, quoted] : cases) {
    try {
      parse(text, {"X = Vi(3)", "Y = Vj(3)"});
      ADD_FAILURE() << "no error for " << detail::escape_text(text, true);
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_TRUE(printable(m)) << m;
      EXPECT_NE(m.find(quoted), std::string::npos) << m;
      // the caret sits under the escaped character
      const size_t line = m.find("\n  "), caret = m.rfind('^');
      const size_t col = caret - m.rfind('\n') - 1;
      EXPECT_EQ(m.substr(line + 3 + col - 2, quoted.size() - 2), quoted.substr(1, quoted.size() - 2))
          << m;
    }
  }
  expect_error([] { parse("X", {"X\xc3\xa9 = Vi(3)"}); }, {"parse", "U+00E9"});
  // Any message: no NUL, no broken UTF-8, kept valid UTF-8 (file paths).
  EXPECT_EQ(std::string(Error(std::string("a\0b\xff\xc3\xa9", 6)).what()), "a\\x00b\\xFF\xc3\xa9");
}

namespace {

// torch.logsumexp / torch.softmax on one row of terms F (and weights w), in float64: the
// semantics every backend must give (see backend/cpu/reduce_state.hpp).
double lse_ref(const std::vector<double>& F, const std::vector<double>* w) {
  double M = -INFINITY, s = 0;
  for (double v : F)
    if (std::isnan(v)) return NAN;
  for (double v : F) M = std::max(M, v);
  if (M == -INFINITY) return -INFINITY;
  for (size_t j = 0; j < F.size(); ++j)
    if (M == INFINITY ? F[j] == INFINITY : true)
      s += (M == INFINITY ? 1.0 : std::exp(F[j] - M)) * (w ? (*w)[j] : 1.0);
  return M == INFINITY ? (s > 0 ? INFINITY : NAN) : M + std::log(s);
}
double softmax_ref(const std::vector<double>& F, const std::vector<double>& g) {
  double M = -INFINITY, num = 0, den = 0;
  for (double v : F)
    if (std::isnan(v)) return NAN;
  for (double v : F) M = std::max(M, v);
  if (M == INFINITY) return NAN;  // softmax computes inf - inf
  if (M == -INFINITY) return NAN;  // every weight is 0 / 0
  for (size_t j = 0; j < F.size(); ++j) num += std::exp(F[j] - M) * g[j], den += std::exp(F[j] - M);
  return num / den;
}

}  // namespace

TEST(BadInputLimits, InfiniteTermsGiveTorchsAnswerOnEveryBackend) {
  const int64_t M = 37;  // tails for every SIMD width
  const std::vector<double> xs = {0.0, 1.5, -2.0};
  auto column = [&](auto fill) {
    std::vector<double> y(M);
    for (int64_t j = 0; j < M; ++j) y[j] = fill(j);
    return y;
  };
  auto finite = [](int64_t j) { return std::sin(0.7 * static_cast<double>(j)); };
  const std::vector<std::pair<const char*, std::vector<double>>> cases = {
      {"one +inf", column([&](int64_t j) { return j == 5 ? INFINITY : finite(j); })},
      {"two +inf and a -inf",
       column([&](int64_t j) { return j == 5 || j == 33 ? INFINITY : j == 9 ? -INFINITY : finite(j); })},
      {"all +inf", column([](int64_t) { return INFINITY; })},
      {"all -inf", column([](int64_t) { return -INFINITY; })},
      {"a NaN", column([&](int64_t j) { return j == 30 ? NAN : finite(j); })},
      {"+inf and a NaN", column([&](int64_t j) { return j == 30 ? NAN : j == 2 ? INFINITY : finite(j); })},
      {"finite", column(finite)}};
  const std::vector<double> w_pos = column([](int64_t j) { return 0.5 + 0.01 * j; });
  const std::vector<double> w_zero_at_inf = column([](int64_t j) { return j == 5 ? 0.0 : 1.0; });
  const Formula F = vi(0, 1) + vj(1, 1);
  for (Backend b : {Backend::Interpreter, Backend::Compiled}) {
    if (b == Backend::Compiled && !compiler_info().usable) continue;
    Options o;
    o.backend = b;
    for (const auto& [name, y] : cases) {
      for (int kind = 0; kind < 4; ++kind) {
        const std::vector<double>& w = kind == 2 ? w_zero_at_inf : w_pos;
        const Reduction r = kind == 0   ? Reduction(ReductionOp::LogSumExp, F)
                            : kind <= 2 ? Reduction(ReductionOp::LogSumExp, F, 1, 0, vj(2, 1))
                                        : Reduction(ReductionOp::SumSoftMaxWeight, F, 1, 0, vj(2, 1));
        std::vector<Array> in = {Array::from(xs, {3, 1}), Array::from(y, {M, 1})};
        if (kind > 0) in.push_back(Array::from(w, {M, 1}));
        const Array out = evaluate(r, in, o)[0];
        for (size_t i = 0; i < xs.size(); ++i) {
          std::vector<double> Fi(M);
          for (int64_t j = 0; j < M; ++j) Fi[j] = xs[i] + y[j];
          const double want = kind == 0 ? lse_ref(Fi, nullptr)
                              : kind <= 2 ? lse_ref(Fi, &w)
                                          : softmax_ref(Fi, w);
          const double got = out.at(static_cast<int64_t>(i));
          const std::string where = std::string(b == Backend::Compiled ? "compiled" : "interpreter") +
                                    " " + r.str() + " on " + name + ", row " + std::to_string(i);
          if (std::isnan(want))
            EXPECT_TRUE(std::isnan(got)) << where << ": got " << got;
          else if (std::isinf(want))
            EXPECT_EQ(got, want) << where;
          else
            EXPECT_NEAR(got, want, 1e-12 * (1 + std::fabs(want))) << where;
        }
      }
    }
  }
}
