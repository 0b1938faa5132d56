// PTX cache: NVRTC output kept in memory and in the disk cache, keyed by everything that changes
// it.
#include "backend/cuda/ptx_cache.hpp"

#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>

#include "backend/cuda/nvrtc.hpp"
#include "backend/lru_map.hpp"
#include "ir/node.hpp"
#include "cache/disk_cache.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace {

// PTX held in memory, bounded (one per formula, dtype and architecture): a process that builds
// ever new formulas would otherwise keep them all. A dropped one is read back from disk.
constexpr size_t kPtxInMemory = 1024;

struct Table {
  std::mutex mu;
  LruMap<std::string, std::string> ptx{kPtxInMemory};  // key -> PTX
  PtxCacheStats stats;
};

Table& table() {
  static Table* t = new Table();  // outlives static destructors of callers
  return *t;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) detail::fail("cuda_ptx", "cannot read the cached PTX '", path, "'");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

std::string cuda_ptx(const std::string& source, const std::string& arch,
                     const std::vector<std::string>& options) {
  const NvrtcInfo& nv = nvrtc_info();
  if (!nv.usable) detail::fail("cuda_ptx", "cannot compile CUDA kernels: ", nv.problem);
  std::string all = source + "\n" + arch + "\nNVRTC " + nv.version + "\n";
  for (const std::string& o : options) all += o + " ";
  const std::string key = hash_bytes(all).hex();
  Table& t = table();
  {
    std::lock_guard lk(t.mu);
    if (const std::string* have = t.ptx.find(key)) {
      ++t.stats.memory_hits;
      return *have;
    }
  }
  bool built = false;
  const std::string path =
      DiskCache::instance(DiskCache::kCuda)
          .get_or_build(key, source, [&](const std::string& src_path, const std::string& out_path) {
            std::string ptx;
            try {
              ptx = nvrtc_compile(source, "tessel_kernel.cu", arch, options);
            } catch (const Error& e) {
              throw Error(std::string(e.what()) + "\ngenerated source kept at: " + src_path);
            }
            std::ofstream out(out_path, std::ios::binary);
            out << ptx;
            if (!out.flush()) detail::fail("cuda_ptx", "cannot write '", out_path, "'");
            built = true;
          });
  std::string ptx = read_file(path);
  std::lock_guard lk(t.mu);
  ++(built ? t.stats.compiles : t.stats.disk_hits);
  return t.ptx.insert(key, std::move(ptx));
}

PtxCacheStats cuda_ptx_stats() {
  Table& t = table();
  std::lock_guard lk(t.mu);
  return t.stats;
}

void cuda_ptx_forget_loaded() {
  Table& t = table();
  std::lock_guard lk(t.mu);
  t.ptx.clear();
}

}  // namespace tessel
