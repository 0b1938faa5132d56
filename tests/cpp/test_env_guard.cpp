// Guards the test process itself: no test may leave tessel's environment variables changed, and
// the suite never writes into the user's own kernel cache (~/.cache/tessel).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace {

// What decides where kernels go and how they are built.
const char* const kWatched[] = {"TESSEL_CACHE_DIR",       "TESSEL_SIMD",
                                "TESSEL_CXX",             "TESSEL_NUM_THREADS",
                                "TESSEL_COMPILE_TIMEOUT", "TESSEL_CACHE_LOCK_TIMEOUT",
                                "XDG_CACHE_HOME",         "HOME"};

using Snapshot = std::map<std::string, std::optional<std::string>>;

Snapshot snapshot() {
  Snapshot s;
  for (const char* name : kWatched) {
    const char* v = std::getenv(name);
    s[name] = v ? std::optional<std::string>(v) : std::nullopt;
  }
  return s;
}

void restore(const Snapshot& s) {
  for (const auto& [name, value] : s) {
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
}

// Fails a test that changed a watched variable, then puts it back so the tests after it run in
// the environment they expect (a test that unset TESSEL_CACHE_DIR sent them to ~/.cache).
class EnvGuard : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override { before_ = snapshot(); }
  void OnTestEnd(const ::testing::TestInfo&) override {
    const Snapshot after = snapshot();
    for (const auto& [name, value] : before_)
      if (after.at(name) != value)
        ADD_FAILURE() << "the test changed " << name << " from '" << value.value_or("(unset)")
                      << "' to '" << after.at(name).value_or("(unset)")
                      << "' and did not restore it (use test_env::ScopedEnv)";
    restore(before_);
  }
  Snapshot before_;
};

// Run outside ctest (which sets TESSEL_CACHE_DIR), the suite still keeps its kernels in a folder
// of its own, removed at the end.
class PrivateCacheForTheRun : public ::testing::Environment {
 public:
  void SetUp() override {
    if (std::getenv("TESSEL_CACHE_DIR")) return;
    std::string templ =
        (std::filesystem::temp_directory_path() / "tessel-test-cache-XXXXXX").string();
    if (!::mkdtemp(templ.data())) return;
    dir_ = templ;
    ::setenv("TESSEL_CACHE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    ::unsetenv("TESSEL_CACHE_DIR");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

 private:
  std::string dir_;
};

const bool kInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new EnvGuard);
  ::testing::AddGlobalTestEnvironment(new PrivateCacheForTheRun);
  return true;
}();

}  // namespace
