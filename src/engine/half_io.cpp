// Half-precision (float16, bfloat16) arrays at the engine's boundary: inputs converted to float32
// on load, the reduction run in float32 (its accumulators as for float32 inputs), results rounded
// back to the half dtype. Device arrays move through their device (the registry's, by kind), as
// device outputs do.
#include "engine/half_io.hpp"

#include <cstring>

#include "backend/registry.hpp"
#include "engine/engine_impl.hpp"
#include "tessel/half.hpp"

namespace tessel::engine {

namespace {

// Calls f(q, off) for every element of `a` in C order: q its position, off its element offset.
template <class F>
void for_each_element(const ArrayView& a, F&& f) {
  const int64_t n = a.size();
  if (n == 0) return;
  const size_t nd = a.shape.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  for (int64_t q = 0; q < n; ++q) {
    f(q, off);
    for (int k = static_cast<int>(nd) - 1; k >= 0; --k) {
      if (++idx[k] < a.shape[k]) {
        off += a.stride(k);
        break;
      }
      off -= (a.shape[k] - 1) * a.stride(k);
      idx[k] = 0;
    }
  }
}

void require_contiguous(const ArrayView& a, const std::string& who) {
  if (!contiguous(a))
    detail::fail("evaluate", who, " is a non-contiguous ", dtype_name(a.dtype),
                 " CUDA array; pass a contiguous one (.contiguous())");
}

// A device array's elements as one host row (contiguous arrays only: one copy).
Array load_device(const ArrayView& a, const std::string& who) {
  require_contiguous(a, who);
  ArrayView flat = a;
  flat.shape = {1, a.size()};
  flat.strides = {a.size(), 1};
  return BackendRegistry::instance().device_for(DeviceKind::CUDA).load_rows(flat);
}

float decode(DType t, uint16_t bits) {
  return t == DType::Float16 ? half_to_float(bits) : bfloat16_to_float(bits);
}

uint16_t encode(DType t, float v) {
  return t == DType::Float16 ? float_to_half(v) : float_to_bfloat16(v);
}

// The device that owns CUDA arrays' memory, when it also converts there: when the backend for
// CUDA arrays keeps results on the device.
DeviceApi* device_converter() {
  const BackendRegistry& reg = BackendRegistry::instance();
  if (!reg.backend_for(DeviceKind::CUDA).writes_device_outputs()) return nullptr;
  return &reg.device_for(DeviceKind::CUDA);
}

}  // namespace

bool any_half(std::span<const ArrayView> inputs, std::span<const ArrayView> outputs) {
  for (const ArrayView& a : inputs)
    if (is_half(a.dtype)) return true;
  for (const ArrayView& a : outputs)
    if (is_half(a.dtype)) return true;
  return false;
}

HalfInputs convert_half_inputs(std::span<const ArrayView> inputs, const Options& opt, int device) {
  HalfInputs h;
  h.opt = opt;
  int from = -1;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const ArrayView& a = inputs[k];
    if (a.dtype == DType::Int64) continue;
    if (from < 0) {
      h.dtype = a.dtype, from = static_cast<int>(k), h.have_dtype = true;
    } else if (a.dtype != h.dtype) {
      detail::fail_type("evaluate", "input ", k, " has dtype ", dtype_name(a.dtype), " but input ",
                        from, " has ", dtype_name(h.dtype), "; all inputs must share one dtype");
    }
  }
  h.views.assign(inputs.begin(), inputs.end());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const ArrayView& a = inputs[k];
    if (!is_half(a.dtype)) continue;
    const std::string who = "input " + std::to_string(k);
    if (a.data == nullptr && a.size() != 0) detail::fail("evaluate", who, " has no data");
    DeviceApi* conv = device_converter();
    if (a.device.kind == DeviceKind::CUDA && conv != nullptr) {
      require_contiguous(a, who);
      DeviceRows& d = h.device_arrays.emplace_back(
          conv->alloc_rows(DType::Float32, 1, a.size(), a.device.index));
      conv->convert_device(flat_view(a), flat_view(d.view));
      h.views[k] = d.view;
      h.views[k].shape = a.shape;
      continue;
    }
    Array f(DType::Float32, a.shape);
    float* out = f.as<float>();
    if (a.device.kind == DeviceKind::CUDA) {
      if (a.size() > 0) {
        const Array host = load_device(a, who);
        const uint16_t* bits = host.as<uint16_t>();
        for (int64_t q = 0; q < a.size(); ++q) out[q] = decode(a.dtype, bits[q]);
      }
    } else {
      const uint16_t* bits = static_cast<const uint16_t*>(a.data);
      for_each_element(a, [&](int64_t q, int64_t off) { out[q] = decode(a.dtype, bits[off]); });
    }
    h.arrays.push_back(f);
    h.views[k] = f.view();
  }
  // The float32 copies are host arrays: a call on a GPU stays there.
  if (device >= 0) {
    h.opt.backend = Backend::Cuda;
    h.opt.device = device;
  }
  return h;
}

void check_half_outputs(std::span<const ArrayView> outputs, DType half) {
  for (size_t k = 0; k < outputs.size(); ++k) {
    const DType t = outputs[k].dtype;
    if (t != DType::Int64 && t != half)
      detail::fail_type("evaluate", "output ", k, " has dtype ", dtype_name(t),
                        " but the inputs are ", dtype_name(half), "; expected ", dtype_name(half));
  }
}

void store_half(const Array& src, const ArrayView& dst, const std::string& who) {
  if (dst.size() == 0) return;
  if (dst.device.kind == DeviceKind::CUDA) {
    if (!contiguous(dst))
      detail::fail("evaluate", who, " is a non-contiguous ", dtype_name(dst.dtype),
                   " CUDA array; pass a contiguous one");
    Array bits(dst.dtype, {1, dst.size()});
    for (int64_t q = 0; q < dst.size(); ++q)
      bits.as<uint16_t>()[q] = encode(dst.dtype, src.as<float>()[q]);
    ArrayView flat = dst;
    flat.shape = {1, dst.size()};
    flat.strides = {dst.size(), 1};
    BackendRegistry::instance().device_for(DeviceKind::CUDA).store_rows(bits, flat);
    return;
  }
  uint16_t* out = static_cast<uint16_t*>(dst.data);
  for_each_element(
      dst, [&](int64_t q, int64_t off) { out[off] = encode(dst.dtype, src.as<float>()[q]); });
}

HalfOutputs::HalfOutputs(std::span<const ArrayView> outputs, int device) : outputs_(outputs) {
  DeviceApi* conv = device >= 0 ? device_converter() : nullptr;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const ArrayView& o = outputs[k];
    if (!is_half(o.dtype)) {
      views_.push_back(o);
      continue;
    }
    if (o.device.kind == DeviceKind::CUDA && conv != nullptr && contiguous(o)) {
      ArrayView v =
          device_.emplace_back(conv->alloc_rows(DType::Float32, 1, o.size(), o.device.index)).view;
      v.shape = o.shape;
      views_.push_back(v);
    } else {
      views_.push_back(host_.emplace_back(DType::Float32, o.shape).view());
    }
  }
}

void HalfOutputs::finish() const {
  size_t h = 0, d = 0;
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const ArrayView& o = outputs_[k];
    if (!is_half(o.dtype)) continue;
    if (views_[k].device.kind == DeviceKind::CUDA) {
      if (o.size() > 0)
        device_converter()->convert_device(flat_view(device_[d].view), flat_view(o));
      ++d;
    } else {
      store_half(host_[h++], o, "output " + std::to_string(k));
    }
  }
}

Array round_to_half(const Array& src, DType half) {
  if (src.dtype() != DType::Float32) return src;  // index outputs
  Array out(half, src.shape());
  for (int64_t q = 0; q < src.size(); ++q) out.as<uint16_t>()[q] = encode(half, src.as<float>()[q]);
  return out;
}

}  // namespace tessel::engine
