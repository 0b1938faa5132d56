// The GPU as a device (device.hpp): its memory, the copies between it and the host, the
// ordering after the caller's stream, and the small kernels that keep results there (adds, sums
// over rows, half-precision conversion, conjugate gradient's vector steps). The kernel launches
// themselves are launch.cpp's; both share the per-device workspaces.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "backend/backend.hpp"
#include "backend/cuda/driver.hpp"
#include "backend/cuda/ptx_cache.hpp"
#include "backend/cuda/workspace.hpp"
#include "codegen/cuda_rows.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace {

constexpr const char* kWho = "evaluate";

class CudaDeviceApi final : public DeviceApi {
 public:
  void open_device(int device) override { cuda_device(device, kWho); }
  void wait_for_stream(int device, void* stream) override {
    // An event, not a host wait: the caller's earlier kernels keep running while this call is
    // prepared, and its default-stream steps start after them.
    const CudaContextScope scope(device);
    CuEvent done = cuda_event_record(static_cast<CuStream>(stream));
    cuda_stream_wait(nullptr, done);
    cuda_event_destroy(done);  // released by the driver once it has completed
  }
  void store_rows(const Array& src, const ArrayView& dst) override;
  Array load_rows(const ArrayView& src) override;
  DeviceRows alloc_rows(DType dtype, int64_t rows, int64_t cols, int device) override;
  void add_rows_device(const ArrayView& src, const ArrayView& dst) override;
  void sum_rows_device(const ArrayView& src, const ArrayView& dst) override;
  void convert_device(const ArrayView& src, const ArrayView& dst) override;
  void axpby_device(double a, const ArrayView& x, double b, const ArrayView& y) override;
  double dot_device(const ArrayView& x, const ArrayView& y) override;
};

// A device output's rows as a 2-D copy: its components must be contiguous within a row.
size_t device_pitch(const ArrayView& a, int64_t cols) {
  if (a.shape.size() == 2 && cols > 1 && a.stride(1) != 1)
    detail::fail(kWho, "a CUDA output must be contiguous along its last dimension");
  return static_cast<size_t>(a.shape.size() == 2 || cols == 1 ? a.stride(0) : 1) *
         dtype_size(a.dtype);
}

void CudaDeviceApi::store_rows(const Array& src, const ArrayView& dst) {
  const CudaContextScope scope(dst.device.index);
  int64_t rows = 0, cols = 0;
  output_rows(dst, rows, cols);
  const size_t pitch = device_pitch(dst, cols);
  const size_t row = static_cast<size_t>(cols) * dtype_size(dst.dtype);
  cuda_copy_2d(dst.data, pitch, src.data(), row, row, static_cast<size_t>(rows), nullptr);
  cuda_synchronize(nullptr);
}

Array CudaDeviceApi::load_rows(const ArrayView& src) {
  const CudaContextScope scope(src.device.index);
  int64_t rows = 0, cols = 0;
  output_rows(src, rows, cols);
  const size_t pitch = device_pitch(src, cols);
  Array host(src.dtype, {rows, cols});
  const size_t row = static_cast<size_t>(cols) * dtype_size(src.dtype);
  cuda_copy_2d(host.data(), row, src.data, pitch, row, static_cast<size_t>(rows), nullptr);
  cuda_synchronize(nullptr);
  return host;
}

DeviceRows CudaDeviceApi::alloc_rows(DType dtype, int64_t rows, int64_t cols, int device) {
  auto buf = std::make_shared<CudaBuffer>(
      device, std::max<size_t>(1, static_cast<size_t>(rows * cols) * dtype_size(dtype)));
  DeviceRows d;
  d.view.data = reinterpret_cast<void*>(buf->ptr());
  d.view.dtype = dtype;
  d.view.shape = {rows, cols};
  d.view.device = Device{DeviceKind::CUDA, device};
  d.owner = std::move(buf);
  return d;
}

void CudaDeviceApi::add_rows_device(const ArrayView& src, const ArrayView& dst) {
  int64_t rows = 0, cols = 0;
  output_rows(dst, rows, cols);
  if (rows * cols == 0) return;
  const int device = dst.device.index;
  const bool f64 = dst.dtype == DType::Float64;
  const CudaDevice& dev = cuda_device(device, kWho);
  const CudaContextScope scope(device);
  CuFunction add =
      cuda_function(device, cuda_ptx(cuda_add_rows_source(f64), dev.arch()), "tessel_add_rows");
  CuDevicePtr d = reinterpret_cast<CuDevicePtr>(dst.data),
              s = reinterpret_cast<CuDevicePtr>(src.data);
  long long pitch = device_pitch(dst, cols) / dtype_size(dst.dtype), r = rows, c = cols;
  void* args[] = {&d, &pitch, &s, &r, &c};
  constexpr unsigned kBlock = 256;
  cuda_launch(add, static_cast<unsigned>((rows * cols + kBlock - 1) / kBlock), 1, kBlock, 0,
              nullptr, args);
  cuda_synchronize(nullptr);
}

void CudaDeviceApi::sum_rows_device(const ArrayView& src, const ArrayView& dst) {
  int64_t rows = 0, cols = 0;
  output_rows(src, rows, cols);
  if (cols == 0) return;
  const int device = dst.device.index;
  const CudaDevice& dev = cuda_device(device, kWho);
  const CudaContextScope scope(device);
  CuFunction sum =
      cuda_function(device, cuda_ptx(cuda_sum_rows_source(dst.dtype == DType::Float64), dev.arch()),
                    "tessel_sum_rows");
  CuDevicePtr s = reinterpret_cast<CuDevicePtr>(src.data),
              d = reinterpret_cast<CuDevicePtr>(dst.data);
  long long r = rows, c = cols,
            stride = dst.shape.empty() ? 1 : dst.stride(static_cast<int>(dst.shape.size()) - 1);
  void* args[] = {&s, &r, &c, &d, &stride};
  cuda_launch(sum, static_cast<unsigned>(cols), 1, kCudaSumRowsBlock,
              kCudaSumRowsBlock * sizeof(double), nullptr, args);
  cuda_synchronize(nullptr);
}

void CudaDeviceApi::convert_device(const ArrayView& src, const ArrayView& dst) {
  const long long n = src.size();
  if (n == 0) return;
  const int device = dst.device.index;
  const CudaDevice& dev = cuda_device(device, kWho);
  const CudaContextScope scope(device);
  CuFunction conv = cuda_function(
      device, cuda_ptx(cuda_convert_source(src.dtype, dst.dtype), dev.arch()), "tessel_convert");
  CuDevicePtr s = reinterpret_cast<CuDevicePtr>(src.data),
              d = reinterpret_cast<CuDevicePtr>(dst.data);
  long long count = n;
  void* args[] = {&s, &d, &count};
  constexpr unsigned kBlock = 256;
  const long long blocks = std::min<long long>((n + kBlock - 1) / kBlock, 1 << 16);
  cuda_launch(conv, static_cast<unsigned>(blocks), 1, kBlock, 0, nullptr, args);
  cuda_synchronize(nullptr);
}

void CudaDeviceApi::axpby_device(double a, const ArrayView& x, double b, const ArrayView& y) {
  const long long n = y.size();
  if (n == 0) return;
  const int device = y.device.index;
  const CudaDevice& dev = cuda_device(device, "kernel_solve");
  const CudaContextScope scope(device);
  CuFunction k = cuda_function(device, cuda_ptx(cuda_axpby_source(x.dtype, y.dtype), dev.arch()),
                               "tessel_axpby");
  CuDevicePtr xp = reinterpret_cast<CuDevicePtr>(x.data),
              yp = reinterpret_cast<CuDevicePtr>(y.data);
  long long count = n;
  void* args[] = {&a, &xp, &b, &yp, &count};
  constexpr unsigned kBlock = 256;
  const long long blocks = std::min<long long>((n + kBlock - 1) / kBlock, 1 << 16);
  cuda_launch(k, static_cast<unsigned>(blocks), 1, kBlock, 0, nullptr, args);
  cuda_synchronize(nullptr);
}

double CudaDeviceApi::dot_device(const ArrayView& x, const ArrayView& y) {
  const long long n = x.size();
  if (n == 0) return 0;
  const int device = x.device.index;
  const CudaDevice& dev = cuda_device(device, "kernel_solve");
  const CudaContextScope scope(device);
  CuFunction dot =
      cuda_function(device, cuda_ptx(cuda_dot_source(x.dtype, y.dtype), dev.arch()), "tessel_dot");
  CuFunction sum =
      cuda_function(device, cuda_ptx(cuda_sum_rows_source(true), dev.arch()), "tessel_sum_rows");
  Workspace& ws = cuda_workspace(device);
  std::lock_guard lk(ws.mu);
  // Blocks by n alone (up to kCudaDotBlocks), never by the device or timing: the partial sums,
  // and so the result, are the same on every run; a short vector (CG on a few hundred points)
  // does not launch 127 idle blocks.
  const long long blocks =
      std::clamp<long long>((n + kCudaSumRowsBlock - 1) / kCudaSumRowsBlock, 1, kCudaDotBlocks);
  const CuDevicePtr part = ws.get(device, 8, (kCudaDotBlocks + 1) * sizeof(double));
  CuDevicePtr xp = reinterpret_cast<CuDevicePtr>(x.data),
              yp = reinterpret_cast<CuDevicePtr>(y.data),
              out = part + kCudaDotBlocks * sizeof(double);
  long long count = n, rows = blocks, cols = 1, stride = 1;
  void* dargs[] = {&xp, &yp, &count, const_cast<CuDevicePtr*>(&part)};
  void* sargs[] = {const_cast<CuDevicePtr*>(&part), &rows, &cols, &out, &stride};
  cuda_launch(dot, static_cast<unsigned>(blocks), 1, kCudaSumRowsBlock,
              kCudaSumRowsBlock * sizeof(double), nullptr, dargs);
  cuda_launch(sum, 1, 1, kCudaSumRowsBlock, kCudaSumRowsBlock * sizeof(double), nullptr, sargs);
  double result = 0;
  cuda_copy_2d(&result, sizeof(double), reinterpret_cast<const void*>(out), sizeof(double),
               sizeof(double), 1, nullptr);
  cuda_synchronize(nullptr);
  return result;
}

}  // namespace

Workspace& cuda_workspace(int device) {
  // Kept for the process, as the device buffers in it are (used by static destructors' calls).
  static std::mutex* mu = new std::mutex();
  static auto* table = new std::map<int, std::unique_ptr<Workspace>>();
  std::lock_guard lk(*mu);
  auto& w = (*table)[device];
  if (!w) w = std::make_unique<Workspace>();
  return *w;
}

DeviceApi& cuda_device_api() {
  static CudaDeviceApi* d = new CudaDeviceApi();
  return *d;
}

}  // namespace tessel
