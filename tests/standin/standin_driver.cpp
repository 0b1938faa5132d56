// The stand-in driver's C entry points for devices, contexts, memory, copies, streams and
// events: the CUDA driver ABI (CUresult an int, CUdeviceptr 64 bits, handles pointers).
#include <cstdlib>
#include <cstring>
#include <set>

#include "standin.hpp"

#define STANDIN_API extern "C" __attribute__((visibility("default"))) int

namespace tessel::standin {

namespace {

std::atomic<bool> g_initialized{false};

int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  return e && *e ? std::atoi(e) : fallback;
}

// CUDA_MEMCPY2D's layout.
struct Memcpy2D {
  size_t src_x, src_y;
  unsigned src_type;
  const void* src_host;
  uint64_t src_device;
  void* src_array;
  size_t src_pitch;
  size_t dst_x, dst_y;
  unsigned dst_type;
  void* dst_host;
  uint64_t dst_device;
  void* dst_array;
  size_t dst_pitch;
  size_t width, height;
};
constexpr unsigned kTypeAny = 0, kTypeHost = 1, kTypeDevice = 2, kTypeUnified = 4;

// One side of a copy as the stand-in reads or writes it; `span` bytes from `p` must lie in one
// device region when it is device memory, whose kind must match what the caller declared.
struct Side {
  Kind kind = Kind::Pageable;
  char* at = nullptr;
};
int resolve(uintptr_t p, size_t span, unsigned declared, Side& out) {
  if (p == 0) return kInvalidValue;
  const Region r = classify(reinterpret_cast<const void*>(p));
  out.kind = r.kind;
  if (r.kind == Kind::Device) {
    if (declared == kTypeHost || span > r.end - p) return kInvalidValue;
    out.at = r.host + (p - r.begin);
    return kSuccess;
  }
  if (declared == kTypeDevice) return kInvalidValue;
  out.at = reinterpret_cast<char*>(p);
  return kSuccess;
}

// A copy of `height` rows of `width` bytes, ordered as cuMemcpyAsync orders it: host to host is
// synchronous, pageable host to device returns once the source is staged, device to pageable host
// once the copy is complete, and the rest (device or pinned memory on both sides) is asynchronous.
int copy_rows(uintptr_t dst, size_t dst_pitch, unsigned dst_type, uintptr_t src, size_t src_pitch,
              unsigned src_type, size_t width, size_t height, void* stream) {
  if (!current_context()) return kInvalidContext;
  Stream* s = stream_of(stream);
  if (!s) return kInvalidHandle;
  if (width == 0 || height == 0) return kSuccess;
  if (height > 1 && (dst_pitch < width || src_pitch < width)) return kInvalidValue;
  Side d, from;
  if (int rc = resolve(dst, dst_pitch * (height - 1) + width, dst_type, d)) return rc;
  if (int rc = resolve(src, src_pitch * (height - 1) + width, src_type, from)) return rc;
  if (inject(Fault::Copy)) return kIllegalAddress;
  auto rows = [=](const char* source, size_t pitch) {
    for (size_t r = 0; r < height; ++r)
      std::memcpy(d.at + r * dst_pitch, source + r * pitch, width);
    return int{kSuccess};
  };
  const char* at = from.at;
  if (d.kind != Kind::Device && from.kind != Kind::Device) {
    wait_done(s, last_seq(s));
    return rows(at, src_pitch);
  }
  if (from.kind == Kind::Pageable) {
    wait_done(s, last_seq(s));  // CUDA synchronises the stream before staging
    auto staged = std::make_shared<std::vector<char>>(width * height);
    for (size_t r = 0; r < height; ++r)
      std::memcpy(staged->data() + r * width, at + r * src_pitch, width);
    enqueue(
        s, [rows, staged, width] { return rows(staged->data(), width); }, "copy");
    return kSuccess;
  }
  const uint64_t seq = enqueue(
      s, [rows, at, src_pitch] { return rows(at, src_pitch); }, "copy");
  if (d.kind == Kind::Pageable) return wait_done(s, seq);
  return kSuccess;
}

std::set<Event*>& events() {
  static auto* e = new std::set<Event*>();
  return *e;
}
std::mutex g_events_mu;

Event* event_of(void* h) {
  std::lock_guard lk(g_events_mu);
  return events().count(static_cast<Event*>(h)) ? static_cast<Event*>(h) : nullptr;
}

}  // namespace

const std::vector<DeviceProps>& devices() {
  static const std::vector<DeviceProps> d = [] {
    DeviceProps p;
    p.sms = env_int("TESSEL_STANDIN_SMS", p.sms);
    p.cc_major = env_int("TESSEL_STANDIN_CC", p.cc_major * 10 + p.cc_minor) / 10;
    p.cc_minor = env_int("TESSEL_STANDIN_CC", 90) % 10;
    p.shared_optin = env_int("TESSEL_STANDIN_SHARED_OPTIN", p.shared_optin);
    p.memory = static_cast<size_t>(env_int("TESSEL_STANDIN_MEMORY_MB", 141 << 10)) << 20;
    return std::vector<DeviceProps>(static_cast<size_t>(env_int("TESSEL_STANDIN_DEVICES", 1)), p);
  }();
  return d;
}

Context* primary_context(int device) {
  static auto* contexts = [] {
    auto* c = new std::vector<Context>(devices().size());
    for (size_t k = 0; k < c->size(); ++k) (*c)[k].device = static_cast<int>(k);
    return c;
  }();
  return &(*contexts)[static_cast<size_t>(device)];
}

Context*& current_context() {
  thread_local Context* current = nullptr;
  return current;
}

}  // namespace tessel::standin

using namespace tessel::standin;

#define NEED_INIT() \
  if (!g_initialized) return kNotInitialized
#define NEED_DEVICE(d) \
  if ((d) < 0 || (d) >= static_cast<int>(devices().size())) return kInvalidDevice

STANDIN_API cuInit(unsigned flags) {
  if (flags != 0) return kInvalidValue;
  if (devices().empty()) return kNoDevice;
  g_initialized = true;
  return kSuccess;
}

STANDIN_API cuDriverGetVersion(int* v) {
  if (!v) return kInvalidValue;
  *v = 12080;
  return kSuccess;
}

STANDIN_API cuDeviceGetCount(int* n) {
  NEED_INIT();
  if (!n) return kInvalidValue;
  *n = static_cast<int>(devices().size());
  return kSuccess;
}

STANDIN_API cuDeviceGet(int* dev, int ordinal) {
  NEED_INIT();
  if (!dev) return kInvalidValue;
  NEED_DEVICE(ordinal);
  *dev = ordinal;
  return kSuccess;
}

STANDIN_API cuDeviceGetName(char* name, int len, int dev) {
  NEED_INIT();
  NEED_DEVICE(dev);
  if (!name || len <= 0) return kInvalidValue;
  std::snprintf(name, static_cast<size_t>(len), "%s", devices()[dev].name.c_str());
  return kSuccess;
}

STANDIN_API cuDeviceGetAttribute(int* v, int attr, int dev) {
  NEED_INIT();
  NEED_DEVICE(dev);
  if (!v) return kInvalidValue;
  const DeviceProps& p = devices()[dev];
  // cuda.h's CU_DEVICE_ATTRIBUTE_* numbers: threads and block dims (1-4), grid dims (5-7), shared
  // memory per block (8), warp size (10), registers per block and per SM (12, 82), SMs (16),
  // unified addressing (41), compute capability (75, 76), opt-in shared memory per block (97).
  const std::pair<int, int> table[] = {{1, p.max_threads},
                                       {2, 1024},
                                       {3, 1024},
                                       {4, 64},
                                       {5, 0x7fffffff},
                                       {6, 65535},
                                       {7, 65535},
                                       {8, p.shared_default},
                                       {10, 32},
                                       {12, p.registers},
                                       {82, p.registers},
                                       {16, p.sms},
                                       {41, 1},
                                       {75, p.cc_major},
                                       {76, p.cc_minor},
                                       {97, p.shared_optin}};
  for (const auto& [a, value] : table)
    if (a == attr) return *v = value, int{kSuccess};
  return kInvalidValue;
}

STANDIN_API cuDeviceTotalMem_v2(size_t* bytes, int dev) {
  NEED_INIT();
  NEED_DEVICE(dev);
  if (!bytes) return kInvalidValue;
  *bytes = devices()[dev].memory;
  return kSuccess;
}

STANDIN_API cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  NEED_INIT();
  NEED_DEVICE(dev);
  if (!ctx) return kInvalidValue;
  *ctx = primary_context(dev);
  return kSuccess;
}

STANDIN_API cuCtxSetCurrent(void* ctx) {
  NEED_INIT();
  if (ctx) {
    bool known = false;
    for (size_t k = 0; k < devices().size(); ++k)
      known |= ctx == primary_context(static_cast<int>(k));
    if (!known) return kInvalidContext;
  }
  current_context() = static_cast<Context*>(ctx);
  return kSuccess;
}

STANDIN_API cuCtxGetCurrent(void** ctx) {
  NEED_INIT();
  if (!ctx) return kInvalidValue;
  *ctx = current_context();
  return kSuccess;
}

STANDIN_API cuMemAlloc_v2(uint64_t* p, size_t bytes) {
  NEED_INIT();
  if (!current_context()) return kInvalidContext;
  if (p && bytes && inject(Fault::Alloc)) return kOutOfMemory;
  return mem_alloc(p, bytes, current_context()->device);
}

STANDIN_API cuMemFree_v2(uint64_t p) {
  NEED_INIT();
  if (p == 0) return kSuccess;
  sync_all();  // the real cuMemFree waits for the device too: queued work may still use it
  return mem_free(p);
}

STANDIN_API cuMemHostAlloc(void** p, size_t bytes, unsigned flags) {
  NEED_INIT();
  if (!current_context()) return kInvalidContext;
  if (flags > 0xf) return kInvalidValue;
  if (p && inject(Fault::Alloc)) return kOutOfMemory;
  return host_alloc(p, bytes);
}

STANDIN_API cuMemFreeHost(void* p) {
  NEED_INIT();
  sync_all();
  return host_free(p);
}

STANDIN_API cuMemcpyAsync(uint64_t dst, uint64_t src, size_t bytes, void* stream) {
  NEED_INIT();
  return copy_rows(dst, bytes, kTypeAny, src, bytes, kTypeAny, bytes, 1, stream);
}

STANDIN_API cuMemcpy2DAsync_v2(const Memcpy2D* c, void* stream) {
  NEED_INIT();
  if (!c) return kInvalidValue;
  auto where = [](unsigned type, const void* host, uint64_t dev, size_t x, size_t y, size_t pitch,
                  uintptr_t& at) {
    if (type != kTypeHost && type != kTypeDevice && type != kTypeUnified) return false;
    at = (type == kTypeHost ? reinterpret_cast<uintptr_t>(host) : dev) + y * pitch + x;
    return true;
  };
  uintptr_t dst = 0, src = 0;
  if (!where(c->src_type, c->src_host, c->src_device, c->src_x, c->src_y, c->src_pitch, src) ||
      !where(c->dst_type, c->dst_host, c->dst_device, c->dst_x, c->dst_y, c->dst_pitch, dst))
    return kInvalidValue;
  // cuMemcpy2D's documented limits: pitches up to 2^31 - 1 bytes, no wider than the pitch.
  constexpr size_t kMaxPitch = 0x7fffffff;
  if (c->src_pitch > kMaxPitch || c->dst_pitch > kMaxPitch) return kInvalidValue;
  if (c->width > c->src_pitch || c->width > c->dst_pitch) return kInvalidValue;
  return copy_rows(dst, c->dst_pitch, c->dst_type, src, c->src_pitch, c->src_type, c->width,
                   c->height, stream);
}

STANDIN_API cuMemsetD8Async(uint64_t dst, unsigned char value, size_t n, void* stream) {
  NEED_INIT();
  if (!current_context()) return kInvalidContext;
  Stream* s = stream_of(stream);
  if (!s) return kInvalidHandle;
  if (n == 0) return kSuccess;
  char* at = device_alias(dst, n);
  if (!at) return kInvalidValue;
  enqueue(
      s, [at, value, n] { return std::memset(at, value, n), int{kSuccess}; }, "memset");
  return kSuccess;
}

STANDIN_API cuStreamSynchronize(void* stream) {
  NEED_INIT();
  Stream* s = stream_of(stream);
  return s ? stream_sync(s) : (current_context() ? kInvalidHandle : kInvalidContext);
}

STANDIN_API cuStreamCreate(void** s, unsigned flags) {
  NEED_INIT();
  return stream_create(s, flags);
}

STANDIN_API cuStreamDestroy_v2(void* s) {
  NEED_INIT();
  return s ? stream_destroy(s) : kInvalidHandle;
}

STANDIN_API cuEventCreate(void** e, unsigned flags) {
  NEED_INIT();
  if (!e || flags > 0xf) return kInvalidValue;
  if (!current_context()) return kInvalidContext;
  auto* ev = new Event();
  std::lock_guard lk(g_events_mu);
  events().insert(ev);
  *e = ev;
  return kSuccess;
}

STANDIN_API cuEventRecord(void* e, void* stream) {
  NEED_INIT();
  Event* ev = event_of(e);
  Stream* s = stream_of(stream);
  if (!ev || !s) return kInvalidHandle;
  const uint64_t seq = enqueue(s, {}, "event");
  std::lock_guard lk(ev->mu);
  ev->stream = s;
  ev->seq = seq;
  return kSuccess;
}

STANDIN_API cuEventSynchronize(void* e) {
  NEED_INIT();
  Event* ev = event_of(e);
  if (!ev) return kInvalidHandle;
  std::unique_lock lk(ev->mu);
  Stream* s = ev->stream;
  const uint64_t seq = ev->seq;
  lk.unlock();
  if (s) wait_done(s, seq);
  return kSuccess;
}

STANDIN_API cuEventDestroy_v2(void* e) {
  NEED_INIT();
  std::lock_guard lk(g_events_mu);
  if (!events().erase(static_cast<Event*>(e))) return kInvalidHandle;
  delete static_cast<Event*>(e);  // waits already queued hold the stream and sequence, not it
  return kSuccess;
}

STANDIN_API cuStreamWaitEvent(void* stream, void* e, unsigned flags) {
  NEED_INIT();
  Event* ev = event_of(e);
  Stream* s = stream_of(stream);
  if (!ev || !s) return kInvalidHandle;
  if (flags != 0) return kInvalidValue;
  std::unique_lock lk(ev->mu);
  if (ev->stream) stream_wait(s, ev->stream, ev->seq);
  return kSuccess;
}

STANDIN_API cuPointerGetAttribute(void* data, int attr, uint64_t ptr) {
  NEED_INIT();
  if (!data) return kInvalidValue;
  const Region r = classify(reinterpret_cast<const void*>(ptr));
  if (r.kind == Kind::Pageable) return kInvalidValue;  // unregistered host memory
  const int device = r.device >= 0 ? r.device : (current_context() ? current_context()->device : 0);
  switch (attr) {
    case 1:
      *static_cast<void**>(data) = primary_context(device);
      break;  // CONTEXT
    case 2:
      *static_cast<unsigned*>(data) = r.kind == Kind::Device ? 2u : 1u;
      break;
    case 3:
      *static_cast<uint64_t*>(data) = ptr;
      break;  // DEVICE_POINTER
    case 4:   // HOST_POINTER
      if (r.kind == Kind::Device) return kInvalidValue;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      break;
    case 9:
      *static_cast<int*>(data) = device;
      break;  // DEVICE_ORDINAL
    default:
      return kInvalidValue;
  }
  return kSuccess;
}

STANDIN_API cuGetErrorName(int rc, const char** s) {
  if (!s) return kInvalidValue;
  *s = result_name(rc);
  return *s ? kSuccess : kInvalidValue;
}

STANDIN_API cuGetErrorString(int rc, const char** s) {
  if (!s) return kInvalidValue;
  *s = result_text(rc);
  return *s ? kSuccess : kInvalidValue;
}

STANDIN_API tessel_standin_adopt(void* p, size_t bytes, int device) {
  return adopt(p, bytes, device);
}

STANDIN_API tessel_standin_release(void* p) { return release(p); }
