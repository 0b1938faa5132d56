// The null backend: records problems and writes call numbers instead of computing (or computes
// them on the CPU, standing in for a GPU whose memory is host memory).
#include "support/null_backend.hpp"

#include <cstring>

#include "support/guarded_memory.hpp"
#include "tessel/error.hpp"
#include "tessel/half.hpp"

namespace tessel {

namespace {

void fill(const ArrayView& o, int64_t value) {
  int64_t n = 1;
  for (int64_t d : o.shape) n *= d;
  for (int64_t q = 0; q < n; ++q) {
    switch (o.dtype) {
      case DType::Float32:
        static_cast<float*>(o.data)[q] = static_cast<float>(value);
        break;
      case DType::Float64:
        static_cast<double*>(o.data)[q] = static_cast<double>(value);
        break;
      case DType::Int64:
        static_cast<int64_t*>(o.data)[q] = value;
        break;
      default:  // half outputs are float32 buffers by the time a backend runs
        break;
    }
  }
}

// Copies between contiguous host rows and a test's "device" array (host memory with contiguous
// rows, as the CUDA backend requires of device outputs).
void copy_rows(const ArrayView& dev, void* host, bool to_dev) {
  int64_t rows = 0, cols = 0;
  output_rows(dev, rows, cols);
  const size_t row = static_cast<size_t>(cols) * dtype_size(dev.dtype);
  const int64_t pitch = dev.shape.size() == 2 || cols == 1 ? dev.stride(0) : 1;
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* d = static_cast<uint8_t*>(dev.data) + r * pitch * dtype_size(dev.dtype);
    uint8_t* h = static_cast<uint8_t*>(host) + r * row;
    std::memcpy(to_dev ? d : h, to_dev ? h : d, row);
  }
}

// Element q of a float32 or float64 array, read and written in double.
double element(const ArrayView& a, int64_t q) {
  return a.dtype == DType::Float32 ? static_cast<const float*>(a.data)[q]
                                   : static_cast<const double*>(a.data)[q];
}

void put(const ArrayView& a, int64_t q, double v) {
  if (a.dtype == DType::Float32)
    static_cast<float*>(a.data)[q] = static_cast<float>(v);
  else
    static_cast<double*>(a.data)[q] = v;
}

}  // namespace

bool NullBackend::run(const Problem& p, std::span<const ArrayView> outs) {
  const GuardedAccess open(guarded_);
  NullCall c;
  c.op = p.r->op;
  c.hash_lo = p.r->hash.lo;
  c.hash_hi = p.r->hash.hi;
  c.n_outer = p.n_outer;
  c.n_inner = p.n_inner;
  c.dtype = p.dtype;
  c.device = p.device;
  c.threads = p.threads;
  c.vars = p.vars;
  c.blocks = p.blocks;
  for (const ArrayView& o : outs) {
    c.out_shapes.push_back(o.shape);
    c.out_dtypes.push_back(o.dtype);
  }
  int64_t number = 0;
  {
    std::lock_guard lk(mu_);
    if (!accept_) return false;
    number = static_cast<int64_t>(calls_.size());
    calls_.push_back(std::move(c));
  }
  if (compute_) return compiled_backend().run(p, outs) || interpreter_backend().run(p, outs);
  for (const ArrayView& o : outs) fill(o, number);
  return true;
}

void NullBackend::open_device(int device) {
  std::lock_guard lk(mu_);
  opened_.push_back(device);
}

void NullBackend::wait_for_stream(int device, void* stream) {
  std::lock_guard lk(mu_);
  waits_.emplace_back(device, stream);
}

void NullBackend::store_rows(const Array& src, const ArrayView& dst) {
  const GuardedAccess open(guarded_);
  copy_rows(dst, const_cast<void*>(src.data()), true);
  std::lock_guard lk(mu_);
  ++stores_;
}

Array NullBackend::load_rows(const ArrayView& src) {
  const GuardedAccess open(guarded_);
  int64_t rows = 0, cols = 0;
  output_rows(src, rows, cols);
  Array host(src.dtype, {rows, cols});
  copy_rows(src, host.data(), false);
  std::lock_guard lk(mu_);
  ++loads_;
  return host;
}

DeviceRows NullBackend::alloc_rows(DType dtype, int64_t rows, int64_t cols, int device) {
  DeviceRows d;
  if (guarded_) {
    d.owner = guarded_alloc(static_cast<size_t>(rows * cols) * dtype_size(dtype), &d.view.data);
    d.view.dtype = dtype;
    d.view.shape = {rows, cols};
  } else {
    auto a = std::make_shared<Array>(dtype, std::vector<int64_t>{rows, cols});
    d = DeviceRows{a, a->view()};
  }
  d.view.device = Device{DeviceKind::CUDA, device};
  std::lock_guard lk(mu_);
  ++allocs_;
  return d;
}

void NullBackend::add_rows_device(const ArrayView& src, const ArrayView& dst) {
  const GuardedAccess open(guarded_);
  int64_t rows = 0, cols = 0;
  output_rows(dst, rows, cols);
  const int64_t pitch = dst.shape.size() == 2 || cols == 1 ? dst.stride(0) : 1;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      put(dst, r * pitch + c, element(dst, r * pitch + c) + element(src, r * cols + c));
  std::lock_guard lk(mu_);
  ++adds_;
}

void NullBackend::sum_rows_device(const ArrayView& src, const ArrayView& dst) {
  const GuardedAccess open(guarded_);
  int64_t rows = 0, cols = 0;
  output_rows(src, rows, cols);
  const int64_t stride = dst.shape.empty() ? 1 : dst.stride(static_cast<int>(dst.shape.size()) - 1);
  for (int64_t c = 0; c < cols; ++c) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += element(src, r * cols + c);
    put(dst, c * stride, s);
  }
  std::lock_guard lk(mu_);
  ++sums_;
}

void NullBackend::convert_device(const ArrayView& src, const ArrayView& dst) {
  const GuardedAccess open(guarded_);
  if (src.size() != dst.size() || (src.dtype == DType::Float32) == (dst.dtype == DType::Float32))
    detail::fail("evaluate", "internal: convert_device from ", dtype_name(src.dtype), " to ",
                 dtype_name(dst.dtype));
  const auto* h = static_cast<const uint16_t*>(src.data);
  const auto* f = static_cast<const float*>(src.data);
  for (int64_t q = 0; q < src.size(); ++q) {
    if (dst.dtype == DType::Float32)
      static_cast<float*>(dst.data)[q] =
          src.dtype == DType::Float16 ? half_to_float(h[q]) : bfloat16_to_float(h[q]);
    else
      static_cast<uint16_t*>(dst.data)[q] =
          dst.dtype == DType::Float16 ? float_to_half(f[q]) : float_to_bfloat16(f[q]);
  }
  std::lock_guard lk(mu_);
  ++converts_;
}

void NullBackend::axpby_device(double a, const ArrayView& x, double b, const ArrayView& y) {
  const GuardedAccess open(guarded_);
  for (int64_t q = 0; q < y.size(); ++q)
    put(y, q, b == 0 ? a * element(x, q) : a * element(x, q) + b * element(y, q));
  std::lock_guard lk(mu_);
  ++vector_ops_;
}

double NullBackend::dot_device(const ArrayView& x, const ArrayView& y) {
  const GuardedAccess open(guarded_);
  double s = 0;
  for (int64_t q = 0; q < x.size(); ++q) s += element(x, q) * element(y, q);
  std::lock_guard lk(mu_);
  ++vector_ops_;
  return s;
}

}  // namespace tessel
