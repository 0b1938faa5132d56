// Arrays across the boundary: DLPack arrays and PyTorch tensors read as views, results handed to
// NumPy, block-sparse ranges.
#include <algorithm>

#include "bindings.hpp"

namespace tessel::py {

namespace {

template <class A>
DType dtype_of(const A& a, const char* what, size_t k) {
  const nb::dlpack::dtype t = a.dtype();
  if (t == nb::dtype<float>()) return DType::Float32;
  if (t == nb::dtype<double>()) return DType::Float64;
  if (t == nb::dtype<int64_t>()) return DType::Int64;
  if (t.bits == 16 && t.lanes == 1) {
    if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float)) return DType::Float16;
    if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat)) return DType::BFloat16;
  }
  throw nb::type_error(("tessel: " + std::string(what) + " " + std::to_string(k) +
                        " has an unsupported dtype; expected float32, float64, float16 or "
                        "bfloat16")
                           .c_str());
}

template <class A>
ArrayView view_any(const A& a, const char* what, size_t k) {
  ArrayView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));  // inputs are never written
  v.dtype = dtype_of(a, what, k);
  for (size_t d = 0; d < a.ndim(); ++d) {
    v.shape.push_back(static_cast<int64_t>(a.shape(d)));
    v.strides.push_back(static_cast<int64_t>(a.stride(d)));
  }
  if (a.device_type() == nb::device::cuda::value) {
    v.device = Device{DeviceKind::CUDA, a.device_id()};
  } else if (a.device_type() != nb::device::cpu::value) {
    throw nb::type_error(("tessel: " + std::string(what) + " " + std::to_string(k) +
                          " lives on an unsupported device (DLPack device type " +
                          std::to_string(a.device_type()) + "); expected CPU or CUDA memory")
                             .c_str());
  }
  return v;
}

// PyTorch's objects, looked up once torch is imported (a process without torch has no tensors).
struct TorchNames {
  nb::object tensor, strided;
  std::vector<std::pair<nb::object, DType>> dtypes;
};

const TorchNames* torch_names() {
  static TorchNames* names = nullptr;
  if (names) return names;
  PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (!torch) return nullptr;
  nb::handle t(torch);
  // Kept for the life of the process, as the module keeps them.
  names = new TorchNames{t.attr("Tensor"), t.attr("strided"), {}};
  const std::pair<const char*, DType> table[] = {{"float32", DType::Float32},
                                                 {"float64", DType::Float64},
                                                 {"float16", DType::Float16},
                                                 {"bfloat16", DType::BFloat16}};
  for (const auto& [name, dt] : table) names->dtypes.emplace_back(t.attr(name), dt);
  return names;
}

[[noreturn]] void fail_argument(const std::string& who, size_t k, const std::string& rest,
                                bool type_error) {
  const std::string m = who + ": argument " + std::to_string(k) + " " + rest;
  if (type_error) throw nb::type_error(m.c_str());
  throw nb::value_error(m.c_str());
}

// Names as Python shows them: type(x).__name__ ("ndarray", "list"), str(x).
std::string py_type(nb::handle h) { return nb::str(h.type().attr("__name__")).c_str(); }
std::string text_of(nb::handle h) { return nb::str(h).c_str(); }

std::vector<int64_t> int_tuple(nb::handle seq) {
  std::vector<int64_t> out;
  for (nb::handle v : seq) out.push_back(nb::cast<int64_t>(v));
  return out;
}

// A tensor read through its attributes: the memory PyTorch holds, whatever its autograd state.
ArrayView read_tensor(nb::handle t, const TorchNames& torch, const std::string& who, size_t k) {
  if (!t.attr("layout").is(torch.strided))
    fail_argument(
        who, k, "is a " + text_of(t.attr("layout")) + " tensor; expected a dense (strided) tensor",
        false);
  // A negative view's memory holds the values before the negation (which is a flag).
  if (nb::hasattr(t, "is_neg") && nb::cast<bool>(t.attr("is_neg")()))
    fail_argument(who, k, "is a negative view (is_neg()); pass x.resolve_neg()", false);
  ArrayView v;
  nb::object dt = t.attr("dtype");
  auto hit = std::find_if(torch.dtypes.begin(), torch.dtypes.end(),
                          [&](const auto& e) { return e.first.is(dt); });
  if (hit == torch.dtypes.end())
    fail_argument(who, k,
                  "has dtype " + text_of(dt) +
                      "; expected torch.float32, torch.float64, torch.float16 or "
                      "torch.bfloat16",
                  true);
  v.dtype = hit->second;
  if (nb::cast<bool>(t.attr("is_cuda"))) {
    v.device = Device{DeviceKind::CUDA, nb::cast<int>(t.attr("get_device")())};
  } else if (!nb::cast<bool>(t.attr("is_cpu"))) {
    fail_argument(who, k, "is on " + text_of(t.attr("device")) + "; expected CPU or CUDA tensors",
                  false);
  }
  v.shape = int_tuple(t.attr("shape"));
  v.strides = int_tuple(t.attr("stride")());
  v.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(t.attr("data_ptr")()));
  return v;
}

// isinstance(h, numpy.ndarray), subclasses (memmap, matrix) included.
bool is_numpy_array(nb::handle h) {
  static PyObject* ndarray = nullptr;
  if (!ndarray) {
    PyObject* np = PyDict_GetItemString(PyImport_GetModuleDict(), "numpy");  // borrowed
    if (!np) return false;
    ndarray = PyObject_GetAttrString(np, "ndarray");  // kept for the life of the process
    if (!ndarray) {
      PyErr_Clear();
      return false;
    }
  }
  return PyObject_IsInstance(h.ptr(), ndarray) == 1;
}

}  // namespace

ArrayView view_of(const InArray& a, const char* what, size_t k) { return view_any(a, what, k); }
ArrayView view_of(const OutArray& a, const char* what, size_t k) { return view_any(a, what, k); }

ArrayView read_argument(nb::handle h, const std::string& who, size_t k, ArrayKind kind) {
  if (kind != ArrayKind::Numpy) {
    const TorchNames* torch = torch_names();
    if (torch && PyObject_IsInstance(h.ptr(), torch->tensor.ptr()) == 1)
      return read_tensor(h, *torch, who, k);
    if (kind == ArrayKind::Torch)
      fail_argument(who, k, "is a " + py_type(h) + "; expected a torch.Tensor", true);
  }
  if (kind == ArrayKind::Numpy && !is_numpy_array(h))
    fail_argument(who, k, "is a " + py_type(h) + "; expected a numpy.ndarray", true);
  InArray a;
  if (!nb::try_cast(h, a)) {
    if (is_numpy_array(h))  // object, string or structured dtypes have no DLPack form
      fail_argument(
          who, k,
          "has dtype " + text_of(h.attr("dtype")) + "; expected float32, float64 or float16", true);
    fail_argument(who, k, "is a " + py_type(h) + "; expected an array", true);
  }
  if (kind == ArrayKind::Numpy) {
    const nb::dlpack::dtype t = a.dtype();
    if (!(t == nb::dtype<float>() || t == nb::dtype<double>() ||
          (t.bits == 16 && t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float))))
      fail_argument(
          who, k,
          "has dtype " + text_of(h.attr("dtype")) + "; expected float32, float64 or float16", true);
  }
  return view_any(a, "argument", k);
}

nb::object to_numpy(const Array& a) {
  // The capsule keeps the shared buffer alive.
  auto* keep = new Array(a);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Array*>(p); });
  std::vector<size_t> shape(a.shape().begin(), a.shape().end());
  switch (a.dtype()) {
    case DType::Float32:
      return nb::cast(
          nb::ndarray<nb::numpy, float>(keep->as<float>(), shape.size(), shape.data(), owner));
    case DType::Float64:
      return nb::cast(
          nb::ndarray<nb::numpy, double>(keep->as<double>(), shape.size(), shape.data(), owner));
    case DType::Int64:
      return nb::cast(
          nb::ndarray<nb::numpy, int64_t>(keep->as<int64_t>(), shape.size(), shape.data(), owner));
    case DType::Float16:
      return nb::cast(nb::ndarray<nb::numpy>(
          keep->data(), shape.size(), shape.data(), owner, nullptr,
          nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}));
    case DType::BFloat16:  // NumPy has no bfloat16: the bits as int16, viewed as bfloat16 by torch
      return nb::cast(
          nb::ndarray<nb::numpy, int16_t>(keep->as<int16_t>(), shape.size(), shape.data(), owner));
  }
  return nb::none();
}

std::shared_ptr<const BlockRanges> block_ranges(const RangesArg& ranges) {
  if (!ranges) return nullptr;
  if (ranges->size() != 6)
    throw nb::value_error(("tessel: ranges must hold 6 arrays (ranges_i, slices_i, redranges_j, "
                           "ranges_j, slices_j, redranges_i), got " +
                           std::to_string(ranges->size()))
                              .c_str());
  auto br = std::make_shared<BlockRanges>();
  br->ranges_i = (*ranges)[0];
  br->slices_i = (*ranges)[1];
  br->redranges_j = (*ranges)[2];
  br->ranges_j = (*ranges)[3];
  br->slices_j = (*ranges)[4];
  br->redranges_i = (*ranges)[5];
  return br;
}

}  // namespace tessel::py
