// The CUDA driver API loaded at run time: devices, primary contexts, PTX modules, launches, copies.
//
// libcuda is opened with dlopen, never linked, so one build runs on machines with and without a
// GPU; what is missing (no driver library, no device, a driver too old for the PTX) is reported
// in plain words by cuda_info() and by `tessel doctor`. Every failing driver call becomes a
// tessel::Error naming the call, the CUDA error name and its description.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel {

struct CudaDevice {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  int sm_count = 0;
  int64_t memory = 0;            // bytes
  int max_shared_per_block = 0;  // bytes, opt-in maximum
  std::string arch() const;      // "compute_90": what NVRTC compiles for
};

struct CudaInfo {
  bool usable = false;
  std::string path;        // the driver library that was loaded
  int driver_version = 0;  // e.g. 12040 for 12.4
  std::vector<CudaDevice> devices;
  std::string problem;  // why CUDA is not usable, in plain words
};

// Loads libcuda (TESSEL_LIBCUDA, then libcuda.so.1, libcuda.so) and runs cuInit once per process.
const CudaInfo& cuda_info();
std::string cuda_status();  // one line for `tessel doctor`

// Opaque driver handles (CUdeviceptr is a 64-bit integer, the others pointers).
using CuDevicePtr = uint64_t;
using CuStream = void*;
using CuFunction = void*;

// Throws unless CUDA is usable and `device` exists; `who` names the caller in the message.
const CudaDevice& cuda_device(int device, const char* who);

// Makes the device's primary context current on this thread (what PyTorch uses too, so
// pointers and streams from PyTorch are valid in it).
void cuda_set_device(int device);

// The device's primary context current on this thread for the scope's life, the previous one
// restored after: the CUDA runtime (PyTorch's current device) follows the driver's current
// context, so a call on cuda:1 must not leave a caller on cuda:0 switched.
class CudaContextScope {
 public:
  explicit CudaContextScope(int device);
  ~CudaContextScope();
  CudaContextScope(const CudaContextScope&) = delete;
  CudaContextScope& operator=(const CudaContextScope&) = delete;

 private:
  void* previous_ = nullptr;
  bool changed_ = false;
};

// The kernel `name` of `ptx`, loaded once per (device, PTX) and kept for the process.
CuFunction cuda_function(int device, const std::string& ptx, const std::string& name);

void cuda_launch(CuFunction f, unsigned grid_x, unsigned grid_y, unsigned block_x,
                 unsigned shared_bytes, CuStream stream, void** args);

// Device memory owned by RAII; freed on the device it came from.
class CudaBuffer {
 public:
  CudaBuffer() = default;
  CudaBuffer(int device, size_t bytes);
  ~CudaBuffer();
  CudaBuffer(CudaBuffer&& o) noexcept;
  CudaBuffer& operator=(CudaBuffer&& o) noexcept;
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  CuDevicePtr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  int device_ = 0;
  CuDevicePtr ptr_ = 0;
  size_t bytes_ = 0;
};

// Strided 2-D copy of `rows` rows of `row_bytes` bytes; either side may be host or device memory
// (unified addressing tells them apart). Asynchronous on `stream`.
void cuda_copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                  size_t rows, CuStream stream);
void cuda_memset(CuDevicePtr dst, size_t bytes, CuStream stream);
void cuda_synchronize(CuStream stream);

// Pinned host memory (copies from it run asynchronously), streams and events, for launches that
// overlap copies with kernels (stream_plan.hpp).
using CuEvent = void*;
void* cuda_host_alloc(size_t bytes);
void cuda_host_free(void* p);
CuStream cuda_stream_create();
void cuda_stream_destroy(CuStream s);
CuEvent cuda_event_record(CuStream stream);  // a new event, recorded on the stream
void cuda_stream_wait(CuStream stream, CuEvent event);
void cuda_event_sync(CuEvent event);
void cuda_event_destroy(CuEvent event);

// The device a pointer lives on, or -1 for host memory (pageable or pinned).
int cuda_pointer_device(const void* p);

}  // namespace tessel
