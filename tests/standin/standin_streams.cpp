// The stand-in's streams: one worker thread each, running copies, memsets, launches and event
// records in order, with CUDA's ordering between them.
//
// The legacy default stream (handle 0 or CU_STREAM_LEGACY, one per device) waits for all earlier
// work of the device's blocking streams, and their later work waits for it; non-blocking streams
// (what tessel creates) have no implicit ordering with it. TESSEL_STANDIN_DELAY_US=N delays each
// operation by a random 0..N microseconds (seeded by TESSEL_STANDIN_SEED, default 1), so that
// work read or freed before its stream was synchronised goes wrong visibly instead of by luck.
#include <chrono>
#include <cstdlib>
#include <random>
#include <set>

#include "standin.hpp"

namespace tessel::standin {

struct Stream {
  int device = 0;
  bool legacy = false, blocking = true;
  std::mutex mu;
  std::condition_variable cv;
  struct Op {
    uint64_t seq;
    std::vector<std::pair<Stream*, uint64_t>> deps;
    std::function<int()> work;
  };
  std::deque<Op> queue;
  uint64_t enqueued = 0, completed = 0;
  int error = 0;  // the first failure since the last synchronisation
  bool stop = false;
  std::mt19937 rng;
  std::thread worker;
};

namespace {

struct Registry {
  std::mutex mu;
  std::set<Stream*> live;
  std::vector<Stream*> retired;  // destroyed, kept: events recorded on them still name them
  std::vector<Stream*> legacy;  // per device, created on first use
};
Registry& registry() {
  static Registry* r = new Registry();  // streams and their threads live until exit
  return *r;
}

unsigned delay_us() {
  static const unsigned d = [] {
    const char* e = std::getenv("TESSEL_STANDIN_DELAY_US");
    return e ? static_cast<unsigned>(std::strtoul(e, nullptr, 10)) : 0u;
  }();
  return d;
}

void run_worker(Stream* s) {
  for (;;) {
    Stream::Op op;
    {
      std::unique_lock lk(s->mu);
      s->cv.wait(lk, [&] { return s->stop || !s->queue.empty(); });
      if (s->queue.empty()) return;  // stopped and drained
      op = std::move(s->queue.front());
    }
    for (const auto& [other, seq] : op.deps) wait_done(other, seq);
    if (const unsigned d = delay_us())
      std::this_thread::sleep_for(std::chrono::microseconds(s->rng() % (d + 1)));
    const int rc = op.work ? op.work() : kSuccess;
    std::lock_guard lk(s->mu);
    s->queue.pop_front();
    s->completed = op.seq;
    if (rc != kSuccess && s->error == kSuccess) s->error = rc;
    s->cv.notify_all();
  }
}

Stream* start(int device, bool legacy, bool blocking) {
  auto* s = new Stream();  // never freed: events may still name it after cuStreamDestroy
  s->device = device;
  s->legacy = legacy;
  s->blocking = blocking;
  static std::atomic<unsigned> count{0};
  const char* seed = std::getenv("TESSEL_STANDIN_SEED");
  s->rng.seed((seed ? std::strtoul(seed, nullptr, 10) : 1ul) * 7919 + count++);
  s->worker = std::thread(run_worker, s);
  return s;
}

}  // namespace

Stream* stream_of(void* handle) {
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  if (handle == nullptr || handle == reinterpret_cast<void*>(1)) {  // CU_STREAM_LEGACY
    const Context* c = current_context();
    if (!c) return nullptr;
    r.legacy.resize(devices().size(), nullptr);
    Stream*& s = r.legacy[c->device];
    if (!s) s = start(c->device, true, true);
    return s;
  }
  auto* s = static_cast<Stream*>(handle);
  return r.live.count(s) ? s : nullptr;
}

int stream_create(void** out, unsigned flags) {
  if (!out || flags > 1) return kInvalidValue;
  const Context* c = current_context();
  if (!c) return kInvalidContext;
  Stream* s = start(c->device, false, flags == 0);
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  r.live.insert(s);
  *out = s;
  return kSuccess;
}

int stream_destroy(void* handle) {
  Registry& r = registry();
  auto* s = static_cast<Stream*>(handle);
  {
    std::lock_guard lk(r.mu);
    if (!r.live.erase(s)) return kInvalidHandle;
    r.retired.push_back(s);
  }
  {  // queued work still runs (as CUDA's does); the call returns once it has
    std::lock_guard lk(s->mu);
    s->stop = true;
    s->cv.notify_all();
  }
  s->worker.join();
  return kSuccess;
}

uint64_t enqueue(Stream* s, std::function<int()> work, const char* what) {
  (void)what;
  std::vector<std::pair<Stream*, uint64_t>> deps;
  {  // the legacy stream's implicit synchronisation with the device's blocking streams
    Registry& r = registry();
    std::lock_guard lk(r.mu);
    if (s->legacy) {
      for (Stream* o : r.live)
        if (o->device == s->device && o->blocking) deps.emplace_back(o, last_seq(o));
    } else if (s->blocking && s->device < static_cast<int>(r.legacy.size()) &&
               r.legacy[s->device]) {
      deps.emplace_back(r.legacy[s->device], last_seq(r.legacy[s->device]));
    }
  }
  std::lock_guard lk(s->mu);
  const uint64_t seq = ++s->enqueued;
  s->queue.push_back(Stream::Op{seq, std::move(deps), std::move(work)});
  s->cv.notify_all();
  return seq;
}

uint64_t last_seq(Stream* s) {
  std::lock_guard lk(s->mu);
  return s->enqueued;
}

int wait_done(Stream* s, uint64_t seq) {
  std::unique_lock lk(s->mu);
  s->cv.wait(lk, [&] { return s->completed >= seq; });
  return s->error;
}

int stream_sync(Stream* s) {
  wait_done(s, last_seq(s));
  std::lock_guard lk(s->mu);
  const int rc = s->error;
  s->error = kSuccess;
  return rc;
}

void stream_wait(Stream* s, Stream* other, uint64_t seq) {
  // Queued as an operation of its own: `s` stops there until `other` has run `seq`.
  enqueue(
      s, [other, seq] { return wait_done(other, seq), kSuccess; }, "wait event");
}

void sync_all() {
  std::vector<Stream*> all;
  {
    Registry& r = registry();
    std::lock_guard lk(r.mu);
    all.assign(r.live.begin(), r.live.end());
    for (Stream* s : r.legacy)
      if (s) all.push_back(s);
  }
  for (Stream* s : all) wait_done(s, last_seq(s));
}

}  // namespace tessel::standin
