// A kernel library cut short in the disk cache, its manifest rewritten to match: the ELF check
// refuses it before dlopen() (which would die of SIGBUS), so it is rebuilt, here and in a fresh
// process.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/registry.hpp"
#include "cache/compiler.hpp"
#include "cache/disk_cache.hpp"
#include "cache/elf_check.hpp"
#include "reduction_helpers.hpp"
#include "temp_env.hpp"
#include "tessel/runtime.hpp"

using namespace tessel;
using namespace tessel::testing;
using tessel::test_env::ScopedEnv;
using tessel::test_env::slurp;
using tessel::test_env::spit;
using tessel::test_env::TempDir;

namespace {

// What someone who knows the manifest's format writes after cutting the library to `keep` bytes:
// a manifest whose size and FNV-1a 64 match the damaged file exactly.
void truncate_and_forge(const std::string& so, size_t keep) {
  const std::string bytes = slurp(so).substr(0, keep);
  ASSERT_EQ(::truncate(so.c_str(), static_cast<off_t>(keep)), 0);
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  const std::string manifest = so.substr(0, so.size() - 3) + ".manifest";
  std::string text = slurp(manifest);
  const std::string key = text.substr(text.find("key ") + 4, 32);
  char line[200];
  std::snprintf(line, sizeof line,
                "tessel-kernel-manifest 1\nkey %s\nsize %zu\nfnv1a64 %016" PRIx64 "\n", key.c_str(),
                keep, h);
  spit(manifest, line);
}

// The one library of the cache at `root`.
std::string only_library(const std::string& root) {
  std::vector<CacheEntry> entries = DiskCache(root).list();
  EXPECT_EQ(entries.size(), 1u);
  return entries.empty() ? "" : entries[0].path;
}

// A small real shared library, compiled once per test.
std::string compile_library(const TempDir& tmp) {
  const std::string src = tmp / "lib.cpp", so = tmp / "lib.so";
  spit(src, "extern \"C\" int tessel_answer() { return 42; }\n");
  run_compiler(compiler_info().path, {"-shared", "-fPIC", "-O1", "-o", so, src}, so + ".log");
  return so;
}

const Reduction kGauss(ReductionOp::Sum, exp(-sqdist(vi(0, 3), vj(1, 3))) * vj(2, 2));

std::vector<Array> gauss_inputs() {
  return {random_array(DType::Float32, {37, 3}, 1), random_array(DType::Float32, {53, 3}, 2),
          random_array(DType::Float32, {53, 2}, 3)};
}

// Compiled result of kGauss from the library in the disk cache, checked against the interpreter.
// The library is unloaded afterwards: the tests damage the file, and cutting a file that is mapped
// kills the process that maps it at its next touch, whatever the cache does.
bool compiled_matches_interpreter() {
  BackendRegistry::instance().forget_loaded();
  const std::vector<Array> in = gauss_inputs();
  Options compiled = with(Backend::Compiled);
  compiled.threads = 1;
  const Array got = evaluate(kGauss, in, compiled)[0];
  BackendRegistry::instance().forget_loaded();
  const Array want = evaluate(kGauss, in, with(Backend::Interpreter))[0];
  for (int64_t q = 0; q < want.size(); ++q)
    if (std::abs(got.at(q) - want.at(q)) > 1e-5 * (1 + std::abs(want.at(q)))) return false;
  return true;
}

}  // namespace

TEST(ElfCheck, AcceptsAWholeLibraryAndRefusesEveryCut) {
  if (!compiler_info().usable) GTEST_SKIP() << "no compiler";
  TempDir tmp;
  const std::string so = compile_library(tmp);
  EXPECT_EQ(detail::elf_library_problem(so), "");
  const std::string bytes = slurp(so);
  const std::string cut = tmp / "cut.so";
  for (size_t keep : {size_t{0}, size_t{4}, size_t{63}, size_t{64}, size_t{200}, bytes.size() / 3,
                      bytes.size() / 2, bytes.size() - 200, bytes.size() - 1}) {
    spit(cut, bytes.substr(0, keep));
    EXPECT_NE(detail::elf_library_problem(cut), "") << "kept " << keep << " of " << bytes.size();
  }
  spit(cut, "not a library at all");
  EXPECT_EQ(detail::elf_library_problem(cut), "not an ELF file");
  EXPECT_EQ(detail::elf_library_problem(tmp / "absent.so"), "cannot be read");
}

TEST(ElfCheck, DiskCacheRebuildsWhatTheCheckRefuses) {
  if (!compiler_info().usable) GTEST_SKIP() << "no compiler";
  TempDir tmp;
  const std::string good = slurp(compile_library(tmp));
  DiskCache cache(tmp / "cache");
  int builds = 0;
  auto build = [&](const std::string&, const std::string& out) {
    ++builds;
    spit(out, good);
  };
  const std::string key = "00112233445566778899aabbccddeeff";
  const std::string so = cache.get_or_build(key, "src", build, detail::elf_library_problem);
  EXPECT_EQ(builds, 1);
  truncate_and_forge(so, good.size() / 2);
  EXPECT_EQ(cache.get_or_build(key, "src", build), so) << "without a check the forgery passes";
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(cache.get_or_build(key, "src", build, detail::elf_library_problem), so);
  EXPECT_EQ(builds, 2);
  EXPECT_EQ(slurp(so), good);

  // A build whose output the check refuses is an error, and publishes nothing.
  const std::string key2 = "ffeeddccbbaa99887766554433221100";
  expect_error(
      [&] {
        cache.get_or_build(
            key2, "src", [](const std::string&, const std::string& out) { spit(out, "junk"); },
            detail::elf_library_problem);
      },
      {"get_or_build", key2.c_str(), "not an ELF file"});
  EXPECT_EQ(cache.list().size(), 1u);
}

TEST(ElfCheck, ForgedManifestOverATruncatedKernelIsRebuiltNotLoaded) {
  if (!compiler_info().usable) GTEST_SKIP() << "no compiler";
  TempDir tmp;
  ScopedEnv dir("TESSEL_CACHE_DIR", tmp.path());
  ASSERT_TRUE(compiled_matches_interpreter());
  const std::string so = only_library(tmp.path());
  const size_t size = slurp(so).size();

  // The same process, loading again from the cache.
  truncate_and_forge(so, size / 2);
  EXPECT_TRUE(compiled_matches_interpreter());
  EXPECT_EQ(slurp(so).size(), size) << "rebuilt";

  // A fresh process (forked, holding no loaded kernel): SIGBUS there before the fix.
  truncate_and_forge(so, size - 1);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    bool ok = false;
    try {
      ok = compiled_matches_interpreter();
    } catch (...) {
    }
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "wrong answer or an error in the child";
  EXPECT_EQ(slurp(so).size(), size) << "rebuilt";
  EXPECT_EQ(DiskCache(tmp.path()).list().size(), 1u);
}
