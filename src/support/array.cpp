// Array views and the small owning Array type.
#include <cstring>
#include <new>
#include <string>

#include "tessel/array.hpp"

#include "tessel/error.hpp"
#include "tessel/half.hpp"

namespace tessel {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float16:
    case DType::BFloat16: return 2;
    default: return 8;
  }
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

int64_t element_count(const std::vector<int64_t>& shape, const char* function) {
  int64_t n = 1;
  for (int64_t s : shape) n = detail::checked_mul(n, s, function, "the number of elements");
  return n;
}

}  // namespace

int64_t ArrayView::size() const { return element_count(shape, "ArrayView"); }

int64_t ArrayView::stride(int axis) const {
  if (!strides.empty()) return strides.at(axis);
  int64_t s = 1;
  for (size_t k = axis + 1; k < shape.size(); ++k)
    s = detail::checked_mul(s, shape[k], "ArrayView", "a stride");
  return s;
}

Array::Array(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t s : shape_)
    if (s < 0) detail::fail("Array", "negative size ", s, " in shape ", shape_text(shape_));
  const int64_t n = element_count(shape_, "Array");
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<int64_t>(dtype_size(dtype_)), &bytes))
    detail::fail("Array", "cannot allocate shape ", shape_text(shape_), " of ", dtype_name(dtype_),
                 ": ", n, " elements do not fit in 2^63 bytes");
  try {
    storage_ = std::shared_ptr<uint8_t[]>(new uint8_t[bytes > 0 ? bytes : 1]());
  } catch (const std::bad_alloc&) {
    detail::fail("Array", "cannot allocate shape ", shape_text(shape_), " of ", dtype_name(dtype_),
                 ": ", bytes, " bytes (out of memory)");
  }
}

int64_t Array::size() const { return element_count(shape_, "Array"); }

ArrayView Array::view() const {
  return ArrayView{const_cast<uint8_t*>(storage_.get()), dtype_, shape_, {}, {}};
}

double Array::at(int64_t k) const {
  if (k < 0 || k >= size())
    detail::fail("Array::at", "index ", k, " out of range for size ", size());
  switch (dtype_) {
    case DType::Float32: return as<float>()[k];
    case DType::Float64: return as<double>()[k];
    case DType::Int64: return static_cast<double>(as<int64_t>()[k]);
    case DType::Float16: return half_to_float(as<uint16_t>()[k]);
    case DType::BFloat16: return bfloat16_to_float(as<uint16_t>()[k]);
  }
  return 0;
}

}  // namespace tessel
