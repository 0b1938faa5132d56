// Bad input: every mistake raises tessel::Error naming the function, the argument and the
// expectation.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "backend/registry.hpp"
#include "reduction_helpers.hpp"
#include "temp_env.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

const Reduction kGauss(ReductionOp::Sum, exp(-sqdist(vi(0, 3), vj(1, 3))) * vj(2, 1));

std::vector<Array> good_inputs() {
  return {random_array(DType::Float32, {5, 3}, 1), random_array(DType::Float32, {7, 3}, 2),
          random_array(DType::Float32, {7, 1}, 3)};
}

}  // namespace

TEST(BadInput, DimensionMismatches) {
  expect_error([] { (void)(vi(0, 3) * vj(1, 2)); }, {"Mult", "3 and 2"});
  expect_error([] { (void)sqdist(vi(0, 3), vj(1, 4)); }, {"SqDist", "3 and 4"});
  expect_error([] { (void)matvecmult(vi(0, 5), vj(1, 2)); }, {"MatVecMult", "multiple"});
  auto in = good_inputs();
  in[1] = random_array(DType::Float32, {7, 2}, 2);
  expect_error([&] { evaluate(kGauss, in); }, {"evaluate", "input 1", "(7, 2)", "expected (n, 3)"});
}

TEST(BadInput, UnknownAndDuplicatedVariables) {
  expect_error([] { parse("Exp(Q)", {"X = Vi(3)"}); }, {"parse", "'Q'"});
  expect_error([] { parse("X", {"X = Vi(3)", "X = Vj(3)"}); }, {"parse", "X"});
  expect_error([] { Reduction(ReductionOp::Sum, vi(0, 3) + vj(0, 3)); },
               {"Reduction", "variable 0", "Vi(0,3)", "Vj(0,3)"});
  expect_error([] { grad(kGauss, 9); }, {"grad", "variable 9"});
}

TEST(BadInput, WrongDtypesAndMixedDtypes) {
  auto in = good_inputs();
  in[2] = random_array(DType::Float64, {7, 1}, 3);
  expect_error([&] { evaluate(kGauss, in); }, {"evaluate", "input 2", "float64", "float32"});
  in[2] = Array(DType::Int64, {7, 1});
  expect_error([&] { evaluate(kGauss, in); },
               {"evaluate", "input 2", "int64", "float32 or float64"});
  // outputs of the wrong dtype
  auto ok = good_inputs();
  Array out(DType::Float64, {5, 1});
  std::vector<ArrayView> iv;
  for (auto& a : ok) iv.push_back(a.view());
  std::vector<ArrayView> ov = {out.view()};
  expect_error([&] { evaluate(kGauss, iv, ov); }, {"evaluate", "output 0", "float64", "float32"});
}

TEST(BadInput, NullPointersAndNegativeSizes) {
  auto in = good_inputs();
  std::vector<ArrayView> iv;
  for (auto& a : in) iv.push_back(a.view());
  iv[0].data = nullptr;
  expect_error([&] { evaluate(kGauss, iv); }, {"evaluate", "input 0", "null"});
  iv[0] = in[0].view();
  iv[1].shape = {-7, 3};
  expect_error([&] { evaluate(kGauss, iv); }, {"evaluate", "input 1", "negative"});
  expect_error([] { Array(DType::Float32, {-1, 3}); }, {"Array", "negative"});
  // a null pointer is fine when there is nothing to read
  std::vector<ArrayView> empty = {in[0].view(), ArrayView{nullptr, DType::Float32, {0, 3}},
                                  ArrayView{nullptr, DType::Float32, {0, 1}}};
  const auto out = evaluate(kGauss, empty);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(out[0].at(k), 0.0);
}

TEST(BadInput, MismatchedLengthsAndCounts) {
  auto in = good_inputs();
  in[2] = random_array(DType::Float32, {6, 1}, 3);
  expect_error([&] { evaluate(kGauss, in); }, {"evaluate", "input 2", "6 rows", "input 1", "7"});
  auto two = good_inputs();
  two.pop_back();
  expect_error([&] { evaluate(kGauss, two); }, {"evaluate", "expected 3 inputs", "got 2"});
  expect_error(
      [] {
        evaluate(Reduction(ReductionOp::Sum, vj(0, 1)),
                 std::vector<Array>{Array(DType::Float32, {3, 1})});
      },
      {"evaluate", "number of i rows", "pass their number as ni"});
}

TEST(BadInput, KLargerThanM) {
  Reduction r(ReductionOp::ArgKMin, sqdist(vi(0, 3), vj(1, 3)), 1, 10);
  std::vector<Array> in = {random_array(DType::Float32, {5, 3}, 1),
                           random_array(DType::Float32, {7, 3}, 2)};
  expect_error([&] { evaluate(r, in); }, {"ArgKMin", "K = 10", "7"});
  expect_error([] { Reduction(ReductionOp::KMin, sqdist(vi(0, 3), vj(1, 3)), 1, 0); },
               {"KMin", "K >= 1"});
  expect_error([] { Reduction(ReductionOp::Sum, vi(0, 3), 2); }, {"axis"});
}

TEST(BadInput, FailingCompilerKeepsSourceAndLog) {
  // A "compiler" that answers --version but fails to compile anything.
  char dir[] = "/tmp/tessel-cc-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string cc = std::string(dir) + "/bad-cc";
  {
    std::ofstream f(cc);
    f << "#!/bin/sh\nif [ \"$1\" = --version ]; then echo bad-cc 1.0; exit 0; fi\n"
         "echo 'bad-cc: error: this compiler always fails' >&2\nexit 3\n";
  }
  chmod(cc.c_str(), 0755);
  const pid_t pid = fork();
  if (pid == 0) {
    // In a child: compiler_info() caches its answer per process.
    BackendRegistry::instance().forget_loaded();  // kernels the parent already loaded must not hide the compiler
    setenv("TESSEL_CXX", cc.c_str(), 1);
    setenv("TESSEL_CACHE_DIR", (std::string(dir) + "/cache").c_str(), 1);
    Options o;
    o.backend = Backend::Compiled;
    try {
      evaluate(kGauss, good_inputs(), o);
      _exit(10);
    } catch (const Error& e) {
      const std::string m = e.what();
      const bool ok = m.find("exit code 3") != std::string::npos &&
                      m.find("always fails") != std::string::npos &&
                      m.find(".log") != std::string::npos &&
                      m.find("generated source kept at") != std::string::npos;
      _exit(ok ? 0 : 11);
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no error raised, 11: message lacks details";
}

TEST(BadInput, NoCompilerFallsBackToInterpreter) {
  const pid_t pid = fork();
  if (pid == 0) {
    BackendRegistry::instance().forget_loaded();
    setenv("TESSEL_CXX", "/nonexistent/c++", 1);
    auto in = good_inputs();
    const Array a = evaluate(kGauss, in)[0];  // Auto: the interpreter answers
    Options o;
    o.backend = Backend::Compiled;
    try {
      evaluate(kGauss, in, o);
      _exit(10);
    } catch (const Error& e) {
      _exit(std::string(e.what()).find("not") != std::string::npos && a.size() == 5 ? 0 : 11);
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(DiskCacheProcesses, TwoProcessesBuildTheSameKernelAtOnce) {
  char dir[] = "/tmp/tessel-2p-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  // A formula no other test compiles, so both children meet an empty cache.
  const Reduction r(ReductionOp::Sum, exp(-1.2345 * sqdist(vi(0, 3), vj(1, 3))) * vj(2, 1));
  pid_t kids[2];
  for (pid_t& k : kids) {
    k = fork();
    if (k == 0) {
      setenv("TESSEL_CACHE_DIR", dir, 1);
      Options o;
      o.backend = Backend::Compiled;
      const Array got = evaluate(r, good_inputs(), o)[0];
      Options oi;
      oi.backend = Backend::Interpreter;
      const Array want = evaluate(r, good_inputs(), oi)[0];
      for (int64_t q = 0; q < got.size(); ++q)
        if (std::fabs(got.at(q) - want.at(q)) > 1e-5 * (1 + std::fabs(want.at(q)))) _exit(12);
      _exit(0);
    }
  }
  for (pid_t k : kids) {
    int status = 0;
    waitpid(k, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  // Scoped: unsetting it afterwards sent later tests of this process to the user's own cache.
  test_env::ScopedEnv cache("TESSEL_CACHE_DIR", std::string(dir));
  EXPECT_EQ(cache_list().size(), 1u);
}

// Two tiers: a user error carries its kind (Python maps Type to TypeError, Value to ValueError);
// a broken invariant is an InternalError that no `catch (const Error&)` swallows as bad input.
TEST(ErrorTiers, KindsAndInternalErrors) {
  auto kind_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.kind();
    }
    ADD_FAILURE() << "no tessel::Error";
    return ErrorKind::Value;
  };
  auto in = good_inputs();
  in[2] = Array(DType::Int64, {7, 1});
  EXPECT_EQ(kind_of([&] { evaluate(kGauss, in); }), ErrorKind::Type);
  in = good_inputs();
  in[2] = random_array(DType::Float64, {7, 1}, 3);
  EXPECT_EQ(kind_of([&] { evaluate(kGauss, in); }), ErrorKind::Type);
  in = good_inputs();
  in[1] = random_array(DType::Float32, {7, 2}, 2);
  EXPECT_EQ(kind_of([&] { evaluate(kGauss, in); }), ErrorKind::Value);

  const int line = __LINE__ + 3;
  auto broken = [](int k) {
    if (k < 0) TESSEL_UNREACHABLE("negative ", k);
    TESSEL_ASSERT(k == 0, "k is ", k);
    TESSEL_ASSERT(k + 1 == 1);
    return k;
  };
  EXPECT_EQ(broken(0), 0);
  bool caught_as_user_error = false;
  try {
    try {
      broken(2);
    } catch (const Error&) {
      caught_as_user_error = true;
    }
  } catch (const InternalError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tessel: internal error in "), std::string::npos) << what;
    EXPECT_NE(
        what.find(": k is 2 (test_bad_input.cpp:" + std::to_string(line) + "); please report"),
        std::string::npos)
        << what;
    EXPECT_EQ(what.find('/'), std::string::npos) << "no build folder in the message: " << what;
  }
  EXPECT_FALSE(caught_as_user_error);
  EXPECT_THROW(broken(-1), InternalError);
  try {
    broken(-1);
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("internal error in operator(): negative -1 ("), std::string::npos)
        << e.what();
  }
}
