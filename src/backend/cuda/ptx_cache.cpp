// PTX cache: NVRTC output kept in memory and in the disk cache, keyed by everything that changes
// it.
#include "backend/cuda/ptx_cache.hpp"

#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "backend/cuda/nvrtc.hpp"
#include "ir/node.hpp"
#include "cache/disk_cache.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace {

constexpr size_t kMaxPtx = 256;

struct Table {
  std::mutex mu;
  std::unordered_map<std::string, std::string> ptx;  // key -> PTX
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
    if (auto it = t.ptx.find(key); it != t.ptx.end()) {
      ++t.stats.memory_hits;
      return it->second;
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
  // At most kMaxPtx texts (hundreds of KB each) stay in memory; one dropped is read from the
  // disk cache again.
  if (t.ptx.size() >= kMaxPtx && !t.ptx.count(key)) t.ptx.erase(t.ptx.begin());
  return t.ptx.emplace(key, std::move(ptx)).first->second;
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
