// Content-addressed on-disk kernel cache: flock()ed builds, atomic publish, checksummed entries.
#include "cache/disk_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "cache/cache_guard.hpp"
#include "support/warning.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace {

using detail::fail_folder;
using detail::KeyLock;

constexpr const char* kManifestHeader = "tessel-kernel-manifest 1";

bool is_key(const std::string& s) {
  if (s.size() != 32) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void check_key(const char* function, const std::string& key) {
  if (!is_key(key))
    detail::fail(function, "key '", key, "' is not a kernel cache key (expected 32 lowercase hex ",
                 "characters)");
}

// mkdir -p with 0755; an existing folder is fine, an existing non-folder is not.
void make_dirs(const char* function, const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) == 0) continue;
    int err = errno;
    struct stat st;
    if (err == EEXIST && ::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    if (err == EEXIST) err = ENOTDIR;
    fail_folder(function, "cannot create the kernel cache folder", prefix, err);
  }
}

void unlink_quietly(const std::string& path) { ::unlink(path.c_str()); }

// fsync a folder so that a rename() done in it survives a power cut.
void sync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

struct FileDigest {
  int64_t size = 0;
  uint64_t fnv1a = 0;
};

// Size and FNV-1a 64 of a file's bytes; `sync` also fsyncs it (used before publishing).
std::optional<FileDigest> digest_file(const std::string& path, bool sync) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  FileDigest d;
  d.fnv1a = 14695981039346656037ull;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    for (ssize_t k = 0; k < n; ++k) {
      d.fnv1a ^= static_cast<unsigned char>(buf[k]);
      d.fnv1a *= 1099511628211ull;
    }
    d.size += n;
  }
  if (sync && ::fsync(fd) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  ::close(fd);
  return d;
}

std::string manifest_text(const std::string& key, const FileDigest& d) {
  char line[64];
  std::snprintf(line, sizeof line, "%016" PRIx64, d.fnv1a);
  return std::string(kManifestHeader) + "\nkey " + key + "\nsize " + std::to_string(d.size) +
         "\nfnv1a64 " + line + "\n";
}

std::optional<std::string> read_small_file(const std::string& path, size_t limit) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || out.size() + n > limit) {
      ::close(fd);
      if (n == 0) return out;
      return std::nullopt;
    }
    out.append(buf, n);
  }
}

// True when the .so exists, is this user's and writable by nobody else (as is its manifest), and
// matches its manifest exactly. Safe without the lock: both files are only ever replaced by
// rename(), and a stale manifest can only match identical bytes.
bool entry_valid(const std::string& key, const CacheFiles& f, const std::string& manifest_path) {
  struct stat st, mst;
  if (::stat(manifest_path.c_str(), &mst) != 0 || !detail::trusted_file(mst)) return false;
  std::optional<std::string> manifest = read_small_file(manifest_path, 1024);
  if (!manifest) return false;
  if (::stat(f.so_path.c_str(), &st) != 0 || !detail::trusted_file(st)) return false;
  std::optional<FileDigest> d = digest_file(f.so_path, false);
  if (!d || d->size == 0 || d->size != static_cast<int64_t>(st.st_size)) return false;
  return *manifest == manifest_text(key, *d);
}

// Writes `data` to `path` via a temp file + fsync + rename, so readers never see half of it.
void write_atomic(const char* function, const std::string& dir, const std::string& path,
                  const std::string& data) {
  static std::atomic<uint64_t> counter{0};
  std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_folder(function, "cannot write in the kernel cache folder", dir, errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      unlink_quietly(tmp);
      fail_folder(function, "cannot write in the kernel cache folder", dir, err);
    }
    done += n;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    unlink_quietly(tmp);
    fail_folder(function, "cannot write in the kernel cache folder", dir, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink_quietly(tmp);
    fail_folder(function, "cannot write in the kernel cache folder", dir, err);
  }
}

std::vector<std::string> dir_names(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Leftovers of a builder that died: only called while holding the key's lock, when nobody else
// can be writing them.
void remove_temps(const std::string& dir, const std::string& key) {
  for (const std::string& name : dir_names(dir))
    if (name.compare(0, key.size(), key) == 0 && name.find(".tmp-") != std::string::npos)
      unlink_quietly(dir + "/" + name);
}

std::string dir_of(const std::string& path) { return path.substr(0, path.rfind('/')); }
// The entry's path without its extension: <dir>/<key>.
std::string stem_of(const std::string& path) { return path.substr(0, path.rfind('.')); }
std::string manifest_of(const std::string& so_path) { return stem_of(so_path) + ".manifest"; }
std::string lock_of(const std::string& so_path) { return stem_of(so_path) + ".lock"; }

}  // namespace

const CacheKind DiskCache::kCpu{"kernels", ".so", ".cpp"};
const CacheKind DiskCache::kCuda{"cuda", ".ptx", ".cu"};

DiskCache& DiskCache::instance(const CacheKind& kind) {
  // One object per root, never destroyed: references handed out stay valid for the process.
  // Bounded by the cache folders the process names (TESSEL_CACHE_DIR values), a handful.
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<DiskCache>>* caches =
      new std::map<std::string, std::unique_ptr<DiskCache>>();
  std::string root = cache_dir();
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<DiskCache>& slot = (*caches)[root + "\n" + kind.folder];
  if (!slot) slot = std::make_unique<DiskCache>(root, kind);
  return *slot;
}

DiskCache::DiskCache(std::string root, const CacheKind& kind)
    : root_(std::move(root)), kind_(kind) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  if (root_.empty())
    detail::fail("DiskCache", "root is empty (expected a folder path; set TESSEL_CACHE_DIR to a ",
                 "writable folder)");
}

std::string DiskCache::kernels_dir() const { return root_ + "/" + kind_.folder; }

CacheFiles DiskCache::files(const std::string& key) const {
  check_key("DiskCache::files", key);
  std::string stem = kernels_dir() + "/" + key.substr(0, 2) + "/" + key;
  return CacheFiles{stem + kind_.binary_ext, stem + kind_.source_ext};
}

DiskCache& DiskCache::private_instance(const CacheKind& kind) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<DiskCache>>* caches =
      new std::map<std::string, std::unique_ptr<DiskCache>>();
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<DiskCache>& slot = (*caches)[kind.folder];
  if (!slot) {
    slot = std::make_unique<DiskCache>(detail::private_cache_root(), kind);
    slot->private_ = true;
  }
  return *slot;
}

// Leftovers of builders that died (killed mid-compile): a temporary file whose key's lock is
// free belongs to nobody, since every writer holds that lock. Once per process and cache, at the
// first build, so a warm cache never pays for the walk.
void DiskCache::remove_stale_temps() {
  std::call_once(swept_, [this] {
    for (const std::string& sub : dir_names(kernels_dir())) {
      const std::string dir = kernels_dir() + "/" + sub;
      std::set<std::string> keys;
      for (const std::string& name : dir_names(dir))
        if (name.size() > 32 && is_key(name.substr(0, 32)) &&
            name.find(".tmp-") != std::string::npos)
          keys.insert(name.substr(0, 32));
      for (const std::string& key : keys) {
        KeyLock lock("DiskCache::get_or_build", dir, dir + "/" + key + ".lock", -1);
        if (lock.held()) remove_temps(dir, key);
      }
    }
  });
}

std::string DiskCache::get_or_build(
    const std::string& key, const std::string& source,
    const std::function<void(const std::string& source_path, const std::string& so_path)>& build,
    const BinaryCheck& check) {
  static constexpr const char* kFn = "DiskCache::get_or_build";
  check_key(kFn, key);
  if (!build) detail::fail(kFn, "build is empty (expected a function that writes the .so)");
  CacheFiles f = files(key);
  std::string dir = dir_of(f.so_path), manifest = manifest_of(f.so_path);
  auto usable = [&] {
    return entry_valid(key, f, manifest) && (!check || check(f.so_path).empty());
  };
  // Another user able to write here could plant a library: never load from such a folder.
  std::string unsafe = detail::unsafe_folder_reason(root_, dir);
  // Fast path without the lock: the common case is a warm cache.
  if (unsafe.empty() && usable()) return f.so_path;
  if (unsafe.empty()) {
    make_dirs(kFn, dir);
    unsafe = detail::unsafe_folder_reason(root_, dir);
  }
  if (!unsafe.empty()) {
    if (private_) detail::fail(kFn, unsafe);
    detail::warn_once("unsafe:" + root_, unsafe + ". Kernels are compiled into a private " +
                                             "temporary folder instead, and not kept.");
    return private_instance(kind_).get_or_build(key, source, build, check);
  }
  remove_stale_temps();
  std::optional<KeyLock> lock;
  try {
    lock.emplace(kFn, dir, lock_of(f.so_path), private_ ? 0.0 : cache_lock_timeout_s());
  } catch (const detail::LockTimeout& e) {
    detail::warn_once("lock-timeout:" + f.so_path,
                      std::string(e.what()) + "; compiling into a private folder instead");
    return private_instance(kind_).get_or_build(key, source, build, check);
  }
  // Someone may have built it while we waited for the lock.
  if (usable()) return f.so_path;

  // Absent, half-written, corrupt or not trusted: drop what is there (manifest first, so a
  // lock-free reader never pairs the old manifest with new bytes and a mismatch just sends it to
  // the lock).
  unlink_quietly(manifest);
  unlink_quietly(f.so_path);
  remove_temps(dir, key);
  write_atomic(kFn, dir, f.source_path, source);

  static std::atomic<uint64_t> counter{0};
  // Same folder as the final name, so rename() is atomic; ends in .so for compilers that care.
  std::string tmp = dir + "/" + key + ".tmp-" + std::to_string(::getpid()) + "-" +
                    std::to_string(++counter) + kind_.binary_ext;
  try {
    build(f.source_path, tmp);
  } catch (...) {
    unlink_quietly(tmp);
    throw;
  }
  struct stat st;
  if (::stat(tmp.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
    unlink_quietly(tmp);
    detail::fail(kFn, "building key ", key, " produced no shared library at '", tmp,
                 "' (expected build(source_path, so_path) to write a non-empty file there)");
  }
  if (check) {
    const std::string problem = check(tmp);
    if (!problem.empty()) {
      unlink_quietly(tmp);
      detail::fail(kFn, "building key ", key, " produced an unusable binary: ", problem);
    }
  }
  // A linker under umask 002 makes the file group-writable, which entry_valid() would distrust.
  ::chmod(tmp.c_str(), 0644);
  std::optional<FileDigest> digest = digest_file(tmp, true);
  if (!digest) {
    int err = errno;
    unlink_quietly(tmp);
    fail_folder(kFn, "cannot read back a built kernel in the kernel cache folder", dir, err);
  }
  if (::rename(tmp.c_str(), f.so_path.c_str()) != 0) {
    int err = errno;
    unlink_quietly(tmp);
    fail_folder(kFn, "cannot write in the kernel cache folder", dir, err);
  }
  // The manifest goes last: until it exists the entry reads as absent, never as valid.
  write_atomic(kFn, dir, manifest, manifest_text(key, *digest));
  sync_dir(dir);
  return f.so_path;
}

std::vector<CacheEntry> DiskCache::list() const {
  std::vector<CacheEntry> out;
  for (const std::string& sub : dir_names(kernels_dir())) {
    std::string dir = kernels_dir() + "/" + sub;
    for (const std::string& name : dir_names(dir)) {
      const std::string ext = kind_.binary_ext;
      if (!ends_with(name, ext) || name.size() != 32 + ext.size() || !is_key(name.substr(0, 32)))
        continue;
      struct stat st;
      std::string path = dir + "/" + name;
      if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      out.push_back(CacheEntry{name.substr(0, 32), path, static_cast<int64_t>(st.st_size)});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const CacheEntry& a, const CacheEntry& b) { return a.key < b.key; });
  return out;
}

int64_t DiskCache::clear() {
  static constexpr const char* kFn = "DiskCache::clear";
  int64_t removed = 0;
  for (const std::string& sub : dir_names(kernels_dir())) {
    std::string dir = kernels_dir() + "/" + sub;
    std::set<std::string> keys;
    for (const std::string& name : dir_names(dir))
      if (name.size() >= 32 && is_key(name.substr(0, 32))) keys.insert(name.substr(0, 32));
    for (const std::string& key : keys) {
      std::string stem = dir + "/" + key;
      // Under the key's lock, so an entry is never removed in the middle of its build.
      KeyLock lock(kFn, dir, stem + ".lock", cache_lock_timeout_s());
      struct stat st;
      if (::stat((stem + kind_.binary_ext).c_str(), &st) == 0) ++removed;
      unlink_quietly(stem + ".manifest");
      unlink_quietly(stem + kind_.binary_ext);
      unlink_quietly(stem + kind_.source_ext);
      remove_temps(dir, key);
      unlink_quietly(stem + ".lock");
    }
    // Folders stay: removing them would race with a builder about to create its lock file.
  }
  return removed;
}

}  // namespace tessel
