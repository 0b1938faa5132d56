// A persistent worker pool: threads are started once and reused, so a cached call stays cheap.
#include "backend/cpu/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <vector>

namespace tessel {

namespace {

class Pool {
 public:
  static Pool& instance() {
    // Leaked on purpose: workers must outlive static destructors. A forked child has none of the
    // parent's threads, so it starts a fresh pool (data loaders and multiprocessing fork often).
    static Pool* p = [] {
      pthread_atfork(nullptr, nullptr, [] { current() = new Pool; });
      return new Pool;
    }();
    if (!current()) current() = p;
    return *current();
  }

  void run(int64_t n_chunks, int threads, const std::function<void(int64_t)>& chunk) {
    std::unique_lock job_lock(job_mu_);  // one parallel region at a time
    ensure_workers(threads - 1);
    {
      std::lock_guard lk(mu_);
      chunk_ = &chunk;
      n_chunks_ = n_chunks;
      next_.store(0);
      active_ = std::min<int>(threads - 1, static_cast<int>(workers_.size()));
      pending_ = active_;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock lk(mu_);
    done_cv_.wait(lk, [&] { return pending_ == 0; });
    chunk_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static Pool*& current() {
    static Pool* c = nullptr;
    return c;
  }
  void ensure_workers(int want) {
    while (static_cast<int>(workers_.size()) < want) {
      const int id = static_cast<int>(workers_.size());
      workers_.emplace_back([this, id] { loop(id); });
      workers_.back().detach();
    }
  }
  void work() {
    for (;;) {
      const int64_t c = next_.fetch_add(1);
      if (c >= n_chunks_) return;
      try {
        (*chunk_)(c);
      } catch (...) {
        std::lock_guard lk(mu_);
        if (!error_) error_ = std::current_exception();
        next_.store(n_chunks_);
      }
    }
  }
  void loop(int id) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (id >= active_) continue;
      }
      work();
      std::lock_guard lk(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }

  std::mutex job_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t)>* chunk_ = nullptr;
  int64_t n_chunks_ = 0;
  std::atomic<int64_t> next_{0};
  int active_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  std::exception_ptr error_;
};

}  // namespace

void parallel_for(int64_t n, int64_t grain, int threads,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_chunks = (n + grain - 1) / grain;
  threads = static_cast<int>(std::min<int64_t>(std::max(1, threads), n_chunks));
  if (threads == 1) {
    fn(0, n);
    return;
  }
  Pool::instance().run(n_chunks, threads, [&](int64_t c) {
    fn(c * grain, std::min(n, (c + 1) * grain));
  });
}

}  // namespace tessel
