// The small CUDA kernels the engine runs around a reduction so that results stay on the device:
// gradient terms added into outputs, sums over all rows, and half <-> float32 conversions.
#pragma once

#include <string>

#include "tessel/array.hpp"

namespace tessel {

// `tessel_add_rows(T* dst, long long dst_pitch, const T* src, long long rows, long long cols)`:
// dst[r * dst_pitch + c] += src[r * cols + c], one thread per element (grid of
// ceil(rows * cols / block) blocks): gradient terms added into device outputs in place.
std::string cuda_add_rows_source(bool f64);

// `tessel_sum_rows(const T* src, long long rows, long long cols, T* dst, long long dst_stride)`:
// dst[c * dst_stride] = sum over r of src[r * cols + c], one block per column (grid.x = cols),
// blockDim.x a power of two with blockDim.x doubles of dynamic shared memory. Accumulated in
// double, as the host's sum over all rows is, and in a fixed order: the same input gives the same
// bits on every run.
std::string cuda_sum_rows_source(bool f64);
constexpr unsigned kCudaSumRowsBlock = 256;

// `tessel_convert(const S* src, D* dst, long long n)`: dst[q] = src[q] converted, a grid-stride
// loop (any grid covers every element). S and D are float32, float16 or bfloat16 (one of them
// float32); the conversions are tessel/half.hpp's, bit for bit (round to nearest even, overflow to
// infinity, NaN kept quiet).
std::string cuda_convert_source(DType from, DType to);

// Conjugate gradient's vector steps on the device (KernelSolve), elementwise over flat contiguous
// arrays, in double whatever the storage (X, Y: float or double), grid-stride loops:
// `tessel_axpby(double a, const X* x, double b, Y* y, long long n)`: y = a x + b y, and y = a x
// when b = 0 (y is not read, so that it may hold anything);
// `tessel_dot(const X* x, const Y* y, long long n, double* part)`: part[blockIdx.x] = this
// block's share of sum x y, blockDim.x doubles of dynamic shared memory (a power of two); the
// partial sums are then added by tessel_sum_rows. Fixed orders: the same bits on every run.
std::string cuda_axpby_source(DType x, DType y);
std::string cuda_dot_source(DType x, DType y);
constexpr unsigned kCudaDotBlocks = 128;

}  // namespace tessel
