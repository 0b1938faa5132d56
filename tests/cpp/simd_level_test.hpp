// A test fixture run once per SIMD level of the compiled backend, with that level forced.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "reduction_helpers.hpp"
#include "temp_env.hpp"

namespace tessel::testing {

// Instantiate over kSimdLevels (or some of them): a level this machine cannot run is skipped, and
// the forced level is scoped, so that a run of a whole suite at TESSEL_SIMD=avx2 keeps that level
// after these tests.
class SimdLevelTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!simd_level_runs(level())) GTEST_SKIP() << "this CPU does not run " << level() << " code";
    force_.emplace("TESSEL_SIMD", level());
  }
  std::string level() const { return GetParam(); }

 private:
  std::optional<test_env::ScopedEnv> force_;
};

// Names the instances by level ("Levels/CompiledChunks.Test/avx2").
inline std::string simd_level_name(const ::testing::TestParamInfo<const char*>& p) {
  return p.param;
}

}  // namespace tessel::testing
