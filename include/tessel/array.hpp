// Array views (pointer, dtype, shape, strides, device) in and out of reductions, and a small owning
// array.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tessel/error.hpp"

namespace tessel {

/// Float16 and BFloat16: inputs and outputs only; reductions run on float32 copies
/// (tessel/half.hpp).
enum class DType : uint8_t { Float32, Float64, Int64, Float16, BFloat16 };
inline bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
enum class DeviceKind : uint8_t { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
};

const char* dtype_name(DType t);
size_t dtype_size(DType t);

/// A non-owning view. Strides are in elements (not bytes); an empty stride vector means
/// C-contiguous. Variables are 2-D (n, dim); a 1-D array of length n is accepted for dim 1, and
/// parameters may be 1-D (dim).
struct ArrayView {
  void* data = nullptr;
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  Device device{};

  int64_t size() const;
  int64_t stride(int axis) const;  // resolves the contiguous default
};

/// An owning, C-contiguous array: what the convenience API returns.
class Array {
 public:
  Array() = default;
  Array(DType dtype, std::vector<int64_t> shape);
  template <class T>
  static Array from(const std::vector<T>& values, std::vector<int64_t> shape);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t size() const;
  void* data() { return storage_.get(); }
  const void* data() const { return storage_.get(); }
  template <class T>
  T* as() {
    return static_cast<T*>(data());
  }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(data());
  }
  ArrayView view() const;
  /// Element k of the flattened array, converted to double (any dtype).
  double at(int64_t k) const;

 private:
  DType dtype_ = DType::Float32;
  std::vector<int64_t> shape_;
  std::shared_ptr<uint8_t[]> storage_;
};

template <class T>
Array Array::from(const std::vector<T>& values, std::vector<int64_t> shape) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                std::is_same_v<T, int64_t>);
  DType t = std::is_same_v<T, float>    ? DType::Float32
            : std::is_same_v<T, double> ? DType::Float64
                                        : DType::Int64;
  Array a(t, std::move(shape));
  if (static_cast<size_t>(a.size()) != values.size())
    detail::fail("Array::from", "values has ", values.size(), " elements but the shape holds ",
                 a.size());
  std::copy(values.begin(), values.end(), a.as<T>());
  return a;
}

}  // namespace tessel
