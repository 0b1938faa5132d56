// Internal: the kernel cache's guards against other processes and other users: key locks that
// are waited on for a bounded time, folder and file ownership checks, a private fallback folder.
#pragma once

#include <sys/stat.h>

#include <string>

#include "tessel/error.hpp"

namespace tessel::detail {

// Every failure to create or write inside the cache is most likely a bad cache location, so the
// message always says which folder and how to pick another one.
[[noreturn]] void fail_folder(const char* function, const char* what, const std::string& path,
                              int err);

// A lock held by another process for longer than the caller would wait.
class LockTimeout : public Error {
 public:
  using Error::Error;
};

// Exclusive flock() on a key's lock file, held for the object's lifetime; the holder's pid is
// written into the file so that waiters can name it. flock() locks belong to an open file
// description, so two threads of one process exclude each other as well (each opens the file
// itself). clear() unlinks lock files while holding them; a waiter that then gets the lock on
// the unlinked inode notices (inode differs from the path's) and locks the new file.
class KeyLock {
 public:
  // wait_s > 0: wait that long, saying once after 2 s whom it waits for, then throw LockTimeout;
  // 0: wait as long as it takes; < 0: try once, and held() tells whether it worked.
  KeyLock(const char* function, const std::string& dir, const std::string& path, double wait_s);
  ~KeyLock();
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Why kernels in `dir` must not be loaded ("" when they may): `dir` and the folders from `root`
// down to it must belong to this user (or root) and be writable by nobody else, and no folder
// above `root` may be writable by others without the sticky bit — otherwise another user could
// put a library there that this process would load. Folders that do not exist yet are skipped.
std::string unsafe_folder_reason(const std::string& root, const std::string& dir);

// True when a cache file may be trusted: a regular file of this user (or root) that nobody else
// may write.
bool trusted_file(const struct stat& st);

// A fresh folder (mode 0700) under $TMPDIR or /tmp, removed when the process exits: where kernels
// are built when the shared cache folder is unsafe or locked for too long.
std::string private_cache_root();

}  // namespace tessel::detail
