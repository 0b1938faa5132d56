// Content-addressed on-disk cache of compiled kernels, safe across threads and processes.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "tessel/runtime.hpp"

namespace tessel {

// Where one key's files live; filled by DiskCache so callers never build paths themselves.
struct CacheFiles {
  std::string so_path;
  std::string source_path;
};

// What one cache holds: CPU kernels (shared libraries from C++) or CUDA kernels (PTX from CUDA
// source); each kind has its own folder under the root and its own file extensions.
struct CacheKind {
  const char* folder;      // "kernels", "cuda"
  const char* binary_ext;  // ".so", ".ptx"
  const char* source_ext;  // ".cpp", ".cu"
};

// Layout: <root>/kernels/<key[0:2]>/<key>.so   the published shared library (.ptx for CUDA)
//                                   <key>.manifest  size + FNV-1a 64 checksum of the .so
//                                   <key>.cpp   the generated source (kept for debugging)
//                                   <key>.lock  flock()ed while the key is built or removed
// An entry counts as present only when the manifest matches the .so byte for byte, so a
// crash half-way through a publish or a damaged file is rebuilt instead of dlopen()ed.
// Nothing is loaded from a folder or file that another user could write (see cache_guard.hpp):
// the kernel is then built in a private per-process folder, with a warning; the same happens when
// another process holds a key's lock longer than cache_lock_timeout_s().
class DiskCache {
 public:
  // The cache rooted at cache_dir(); one object per distinct root, so a test that changes
  // TESSEL_CACHE_DIR gets a cache at the new place.
  static const CacheKind kCpu, kCuda;
  static DiskCache& instance(const CacheKind& kind = kCpu);
  explicit DiskCache(std::string root, const CacheKind& kind = kCpu);

  const std::string& root() const { return root_; }
  // Paths for `key` (32 lowercase hex chars); creates nothing.
  CacheFiles files(const std::string& key) const;

  // What a caller can say about a binary beyond the manifest: why it must not be used ("" when
  // it may). The manifest proves only that the bytes are those it names, and a manifest can be
  // rewritten to match damaged bytes; the CPU backend checks that a library is whole (see
  // elf_check.hpp) because dlopen() of a cut one kills the process.
  using BinaryCheck = std::function<std::string(const std::string& path)>;

  // Returns the path of a valid shared library for `key`, calling build(source_path, so_tmp_path)
  // to make it when it is absent, corrupt or refused by `check` (a freshly built one that `check`
  // refuses is an error). Exactly one caller builds a key at a time (others
  // wait on the key's lock file, then use the result). Exceptions from `build` propagate
  // unchanged and publish nothing. The path may be in the private folder (see above), which is
  // removed when the process exits: load or read it at once.
  std::string get_or_build(
      const std::string& key, const std::string& source,
      const std::function<void(const std::string& source_path, const std::string& so_path)>& build,
      const BinaryCheck& check = {});

  // The per-process private cache of this kind (created on first use, removed at exit).
  static DiskCache& private_instance(const CacheKind& kind);

  std::vector<CacheEntry> list() const;  // published entries, sorted by key
  int64_t clear();                       // removes every entry; returns how many had a .so

 private:
  std::string kernels_dir() const;
  void remove_stale_temps();
  std::string root_;
  CacheKind kind_;
  bool private_ = false;  // the private folder itself: nowhere further to fall back to
  std::once_flag swept_;
};

}  // namespace tessel
