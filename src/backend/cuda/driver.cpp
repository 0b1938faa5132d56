// CUDA driver API through dlopen: the library is optional, so its absence is a message, not a link
// error.
#include "backend/cuda/driver.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

#include "tessel/error.hpp"

namespace tessel {

namespace {

// The driver's C ABI: CUresult is an int, CUdevice an int, handles are pointers.
struct Memcpy2D {  // CUDA_MEMCPY2D
  size_t src_x_bytes, src_y;
  unsigned src_type;
  const void* src_host;
  CuDevicePtr src_device;
  void* src_array;
  size_t src_pitch;
  size_t dst_x_bytes, dst_y;
  unsigned dst_type;
  void* dst_host;
  CuDevicePtr dst_device;
  void* dst_array;
  size_t dst_pitch;
  size_t width_bytes, height;
};
constexpr unsigned kMemHost = 1, kMemDevice = 2;
constexpr int kAttrSmCount = 16, kAttrCcMajor = 75, kAttrCcMinor = 76, kAttrSharedOptin = 97;
constexpr int kFuncMaxDynamicShared = 8;
constexpr int kPointerMemoryType = 2, kPointerDeviceOrdinal = 9;

struct Api {
  int (*init)(unsigned) = nullptr;
  int (*driver_version)(int*) = nullptr;
  int (*device_count)(int*) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*device_name)(char*, int, int) = nullptr;
  int (*device_attribute)(int*, int, int) = nullptr;
  int (*device_total_mem)(size_t*, int) = nullptr;
  int (*primary_ctx_retain)(void**, int) = nullptr;
  int (*ctx_set_current)(void*) = nullptr;
  int (*ctx_get_current)(void**) = nullptr;
  int (*module_load)(void**, const void*, unsigned, int*, void**) = nullptr;
  int (*module_function)(void**, void*, const char*) = nullptr;
  int (*func_set_attribute)(void*, int, int) = nullptr;
  int (*launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                void**, void**) = nullptr;
  int (*mem_alloc)(CuDevicePtr*, size_t) = nullptr;
  int (*mem_free)(CuDevicePtr) = nullptr;
  int (*memcpy_2d)(const Memcpy2D*, void*) = nullptr;
  int (*memcpy)(CuDevicePtr, CuDevicePtr, size_t, void*) = nullptr;  // unified addresses
  int (*memset_d8)(CuDevicePtr, unsigned char, size_t, void*) = nullptr;
  int (*stream_sync)(void*) = nullptr;
  int (*error_name)(int, const char**) = nullptr;
  int (*error_string)(int, const char**) = nullptr;
  int (*pointer_attribute)(void*, int, CuDevicePtr) = nullptr;
  // Streamed launches (stream_plan.hpp): pinned host memory, streams, events.
  int (*mem_host_alloc)(void**, size_t, unsigned) = nullptr;
  int (*mem_free_host)(void*) = nullptr;
  int (*stream_create)(void**, unsigned) = nullptr;
  int (*stream_destroy)(void*) = nullptr;
  int (*event_create)(void**, unsigned) = nullptr;
  int (*event_record)(void*, void*) = nullptr;
  int (*event_sync)(void*) = nullptr;
  int (*event_destroy)(void*) = nullptr;
  int (*stream_wait_event)(void*, void*, unsigned) = nullptr;
};

struct Loaded {
  Api api;
  CudaInfo info;
  std::vector<void*> contexts;  // primary context per device, retained on first use
};

template <class F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

std::string describe(const Api& a, int rc) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (a.error_name) a.error_name(rc, &name);
  if (a.error_string) a.error_string(rc, &text);
  return std::string(name ? name : "CUDA error " + std::to_string(rc)) +
         (text ? std::string(" (") + text + ")" : std::string());
}

// Each Api member and the driver symbol it is loaded from (the _v2 names take 64-bit sizes).
constexpr auto kSymbols = std::tuple{
    std::pair{"cuInit", &Api::init},
    std::pair{"cuDriverGetVersion", &Api::driver_version},
    std::pair{"cuDeviceGetCount", &Api::device_count},
    std::pair{"cuDeviceGet", &Api::device_get},
    std::pair{"cuDeviceGetName", &Api::device_name},
    std::pair{"cuDeviceGetAttribute", &Api::device_attribute},
    std::pair{"cuDeviceTotalMem_v2", &Api::device_total_mem},
    std::pair{"cuDevicePrimaryCtxRetain", &Api::primary_ctx_retain},
    std::pair{"cuCtxSetCurrent", &Api::ctx_set_current},
    std::pair{"cuCtxGetCurrent", &Api::ctx_get_current},
    std::pair{"cuModuleLoadDataEx", &Api::module_load},
    std::pair{"cuModuleGetFunction", &Api::module_function},
    std::pair{"cuFuncSetAttribute", &Api::func_set_attribute},
    std::pair{"cuLaunchKernel", &Api::launch},
    std::pair{"cuMemAlloc_v2", &Api::mem_alloc},
    std::pair{"cuMemFree_v2", &Api::mem_free},
    std::pair{"cuMemcpy2DAsync_v2", &Api::memcpy_2d},
    std::pair{"cuMemcpyAsync", &Api::memcpy},
    std::pair{"cuMemsetD8Async", &Api::memset_d8},
    std::pair{"cuStreamSynchronize", &Api::stream_sync},
    std::pair{"cuGetErrorName", &Api::error_name},
    std::pair{"cuGetErrorString", &Api::error_string},
    std::pair{"cuPointerGetAttribute", &Api::pointer_attribute},
    std::pair{"cuMemHostAlloc", &Api::mem_host_alloc},
    std::pair{"cuMemFreeHost", &Api::mem_free_host},
    std::pair{"cuStreamCreate", &Api::stream_create},
    std::pair{"cuStreamDestroy_v2", &Api::stream_destroy},
    std::pair{"cuEventCreate", &Api::event_create},
    std::pair{"cuEventRecord", &Api::event_record},
    std::pair{"cuEventSynchronize", &Api::event_sync},
    std::pair{"cuEventDestroy_v2", &Api::event_destroy},
    std::pair{"cuStreamWaitEvent", &Api::stream_wait_event},
};

bool bind_all(void* lib, Api& a) {
  return std::apply([&](const auto&... s) { return (bind(lib, s.first, a.*s.second) && ...); },
                    kSymbols);
}

Loaded* load() {
  auto* l = new Loaded();  // never freed: handles stay valid until exit
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TESSEL_LIBCUDA"); env && *env) candidates.push_back(env);
  candidates.insert(candidates.end(), {"libcuda.so.1", "libcuda.so"});
  void* lib = nullptr;
  std::string tried;
  for (const std::string& c : candidates) {
    if ((lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      l->info.path = c;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + c;
  }
  if (!lib) {
    l->info.problem = "no CUDA driver (libcuda) found (tried " + tried +
                      "); on a machine with an NVIDIA GPU install its driver, or set "
                      "TESSEL_LIBCUDA to libcuda.so";
    return l;
  }
  Api& a = l->api;
  if (!bind_all(lib, a)) {
    l->info.problem = l->info.path + " lacks driver API entry points (driver too old?)";
    return l;
  }
  if (int rc = a.init(0); rc != 0) {
    l->info.problem = "cuInit failed: " + describe(a, rc) +
                      " (no usable GPU, or the driver does not match the kernel module)";
    return l;
  }
  a.driver_version(&l->info.driver_version);
  int count = 0;
  a.device_count(&count);
  for (int k = 0; k < count; ++k) {
    CudaDevice d;
    int dev = 0;
    a.device_get(&dev, k);
    char name[256] = {0};
    a.device_name(name, sizeof name, dev);
    d.index = k;
    d.name = name;
    a.device_attribute(&d.cc_major, kAttrCcMajor, dev);
    a.device_attribute(&d.cc_minor, kAttrCcMinor, dev);
    a.device_attribute(&d.sm_count, kAttrSmCount, dev);
    a.device_attribute(&d.max_shared_per_block, kAttrSharedOptin, dev);
    size_t mem = 0;
    a.device_total_mem(&mem, dev);
    d.memory = static_cast<int64_t>(mem);
    l->info.devices.push_back(d);
  }
  l->contexts.assign(static_cast<size_t>(count), nullptr);
  if (count == 0) {
    l->info.problem = "the CUDA driver reports no GPU";
    return l;
  }
  l->info.usable = true;
  return l;
}

std::mutex& mutex() {
  static std::mutex mu;
  return mu;
}

Loaded& loaded() {
  static Loaded* l = load();
  return *l;
}

const Api& api(const char* who) {
  Loaded& l = loaded();
  if (!l.info.usable) detail::fail(who, "CUDA is not usable: ", l.info.problem);
  return l.api;
}

void check(int rc, const char* call) {
  if (rc != 0) detail::fail("cuda", call, " failed: ", describe(loaded().api, rc));
}

}  // namespace

std::string CudaDevice::arch() const {
  return "compute_" + std::to_string(cc_major) + std::to_string(cc_minor);
}

const CudaInfo& cuda_info() { return loaded().info; }

std::string cuda_status() {
  const CudaInfo& i = cuda_info();
  if (!i.usable) return i.problem;
  std::string s = "driver " + std::to_string(i.driver_version / 1000) + "." +
                  std::to_string(i.driver_version % 1000 / 10) + " (" + i.path + ")";
  for (const CudaDevice& d : i.devices)
    s += "; GPU " + std::to_string(d.index) + ": " + d.name + ", sm_" + std::to_string(d.cc_major) +
         std::to_string(d.cc_minor) + ", " + std::to_string(d.memory >> 20) + " MiB";
  return s;
}

bool cuda_available() { return cuda_info().usable && !cuda_info().devices.empty(); }

const CudaDevice& cuda_device(int device, const char* who) {
  const CudaInfo& i = cuda_info();
  if (!i.usable) detail::fail(who, "CUDA is not usable: ", i.problem);
  if (device < 0 || device >= static_cast<int>(i.devices.size()))
    detail::fail(who, "CUDA device ", device, " does not exist (this machine has ",
                 i.devices.size(), " GPU", i.devices.size() == 1 ? "" : "s", ")");
  return i.devices[static_cast<size_t>(device)];
}

namespace {

void* primary_context(int device) {
  cuda_device(device, "cuda_set_device");
  Loaded& l = loaded();
  std::lock_guard lk(mutex());
  void*& slot = l.contexts[static_cast<size_t>(device)];
  if (!slot) {
    int dev = 0;
    check(l.api.device_get(&dev, device), "cuDeviceGet");
    check(l.api.primary_ctx_retain(&slot, dev), "cuDevicePrimaryCtxRetain");
  }
  return slot;
}

}  // namespace

void cuda_set_device(int device) {
  check(loaded().api.ctx_set_current(primary_context(device)), "cuCtxSetCurrent");
}

CudaContextScope::CudaContextScope(int device) {
  const Api& a = api("cuda_set_device");
  check(a.ctx_get_current(&previous_), "cuCtxGetCurrent");
  void* ctx = primary_context(device);
  if (ctx != previous_) check(a.ctx_set_current(ctx), "cuCtxSetCurrent");
  changed_ = ctx != previous_;
}

CudaContextScope::~CudaContextScope() {
  if (changed_) loaded().api.ctx_set_current(previous_);  // cannot fail on a valid context
}

CuFunction cuda_function(int device, const std::string& ptx, const std::string& name) {
  const Api& a = api("cuda_function");
  static std::map<std::pair<int, std::string>, void*> functions;  // (device, ptx+name) -> fn
  const auto key = std::make_pair(device, name + '\n' + ptx);
  {
    std::lock_guard lk(mutex());
    if (auto it = functions.find(key); it != functions.end()) return it->second;
  }
  const CudaContextScope scope(device);
  void* module = nullptr;
  // The JIT's error log says why a module does not load (e.g. PTX newer than the driver).
  char log[4096] = {0};
  int opts[2] = {5 /* CU_JIT_ERROR_LOG_BUFFER */, 6 /* CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES */};
  void* vals[2] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log))};
  if (int rc = a.module_load(&module, ptx.c_str(), 2, opts, vals); rc != 0)
    detail::fail("cuda", "cuModuleLoadDataEx failed: ", describe(a, rc),
                 log[0] ? std::string("\n") + log : std::string(),
                 "\n(the PTX comes from NVRTC; a driver older than NVRTC cannot load it)");
  void* fn = nullptr;
  check(a.module_function(&fn, module, name.c_str()), "cuModuleGetFunction");
  const int max_shared = cuda_device(device, "cuda_function").max_shared_per_block;
  if (max_shared > 48 * 1024)
    check(a.func_set_attribute(fn, kFuncMaxDynamicShared, max_shared), "cuFuncSetAttribute");
  std::lock_guard lk(mutex());
  return functions.emplace(key, fn).first->second;
}

void cuda_launch(CuFunction f, unsigned grid_x, unsigned grid_y, unsigned block_x,
                 unsigned shared_bytes, CuStream stream, void** args) {
  const Api& a = api("cuda_launch");
  check(a.launch(f, grid_x, grid_y, 1, block_x, 1, 1, shared_bytes, stream, args, nullptr),
        "cuLaunchKernel");
}

CudaBuffer::CudaBuffer(int device, size_t bytes) : device_(device), bytes_(bytes) {
  const Api& a = api("CudaBuffer");
  if (bytes == 0) return;
  const CudaContextScope scope(device);
  if (int rc = a.mem_alloc(&ptr_, bytes); rc != 0)
    detail::fail("cuda", "cuMemAlloc of ", bytes >> 20, " MiB on GPU ", device,
                 " failed: ", describe(a, rc));
}

CudaBuffer::~CudaBuffer() {
  if (!ptr_) return;
  try {  // nothing can be reported from a destructor: a failure leaks the buffer
    const CudaContextScope scope(device_);
    loaded().api.mem_free(ptr_);
  } catch (...) {
  }
}

CudaBuffer::CudaBuffer(CudaBuffer&& o) noexcept
    : device_(o.device_), ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = 0;
  o.bytes_ = 0;
}

CudaBuffer& CudaBuffer::operator=(CudaBuffer&& o) noexcept {
  std::swap(device_, o.device_);
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

int cuda_pointer_device(const void* p) {
  const Api& a = api("cuda_pointer_device");
  unsigned type = 0;
  const auto ptr = reinterpret_cast<CuDevicePtr>(p);
  // Pageable host memory is unknown to the driver: CUDA_ERROR_INVALID_VALUE means "host". Any
  // other error (no current context, a sticky error) must not pass a device pointer off as host
  // memory.
  constexpr int kInvalidValue = 1;
  const int rc = a.pointer_attribute(&type, kPointerMemoryType, ptr);
  if (rc == kInvalidValue) return -1;
  check(rc, "cuPointerGetAttribute");
  if (type != kMemDevice) return -1;
  int ordinal = -1;
  check(a.pointer_attribute(&ordinal, kPointerDeviceOrdinal, ptr), "cuPointerGetAttribute");
  return ordinal;
}

void cuda_copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                  size_t rows, CuStream stream) {
  const Api& a = api("cuda_copy_2d");
  if (rows == 0 || row_bytes == 0) return;
  // Contiguous data (one row, or rows without gaps) as one linear copy: cuMemcpy2D caps pitches at
  // 2^31 - 1 bytes, which a flat array passes, and one linear copy is the faster path anyway.
  if (rows == 1 || (src_pitch == row_bytes && dst_pitch == row_bytes)) {
    check(a.memcpy(reinterpret_cast<CuDevicePtr>(dst), reinterpret_cast<CuDevicePtr>(src),
                   row_bytes * rows, stream),
          "cuMemcpyAsync");
    return;
  }
  Memcpy2D c{};
  const bool src_dev = cuda_pointer_device(src) >= 0, dst_dev = cuda_pointer_device(dst) >= 0;
  c.src_type = src_dev ? kMemDevice : kMemHost;
  if (src_dev)
    c.src_device = reinterpret_cast<CuDevicePtr>(src);
  else
    c.src_host = src;
  c.dst_type = dst_dev ? kMemDevice : kMemHost;
  if (dst_dev)
    c.dst_device = reinterpret_cast<CuDevicePtr>(dst);
  else
    c.dst_host = dst;
  c.src_pitch = src_pitch;
  c.dst_pitch = dst_pitch;
  c.width_bytes = row_bytes;
  c.height = rows;
  check(a.memcpy_2d(&c, stream), "cuMemcpy2DAsync");
}

void cuda_memset(CuDevicePtr dst, size_t bytes, CuStream stream) {
  if (bytes) check(api("cuda_memset").memset_d8(dst, 0, bytes, stream), "cuMemsetD8Async");
}

void cuda_synchronize(CuStream stream) {
  check(api("cuda_synchronize").stream_sync(stream), "cuStreamSynchronize");
}

}  // namespace tessel

namespace tessel {

void* cuda_host_alloc(size_t bytes) {
  void* p = nullptr;
  check(api("cuda_host_alloc").mem_host_alloc(&p, std::max<size_t>(1, bytes), 0), "cuMemHostAlloc");
  return p;
}

void cuda_host_free(void* p) {
  if (p) api("cuda_host_free").mem_free_host(p);
}

CuStream cuda_stream_create() {
  void* s = nullptr;
  constexpr unsigned kNonBlocking = 1;  // no implicit ordering with the legacy default stream
  check(api("cuda_stream_create").stream_create(&s, kNonBlocking), "cuStreamCreate");
  return s;
}

void cuda_stream_destroy(CuStream s) {
  if (s) api("cuda_stream_destroy").stream_destroy(s);
}

CuEvent cuda_event_record(CuStream stream) {
  const Api& a = api("cuda_event_record");
  void* e = nullptr;
  constexpr unsigned kDisableTiming = 2;
  check(a.event_create(&e, kDisableTiming), "cuEventCreate");
  check(a.event_record(e, stream), "cuEventRecord");
  return e;
}

void cuda_stream_wait(CuStream stream, CuEvent event) {
  check(api("cuda_stream_wait").stream_wait_event(stream, event, 0), "cuStreamWaitEvent");
}

void cuda_event_sync(CuEvent event) {
  check(api("cuda_event_sync").event_sync(event), "cuEventSynchronize");
}

void cuda_event_destroy(CuEvent event) {
  if (event) api("cuda_event_destroy").event_destroy(event);
}

}  // namespace tessel
