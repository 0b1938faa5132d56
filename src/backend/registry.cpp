// The backend registry and selection rules.
#include "backend/registry.hpp"

#include "tessel/error.hpp"

namespace tessel {

BackendChoice choose_backend(Backend requested, int device, bool interpreter_only) {
  if (device >= 0) return {BackendId::Cuda, false};
  if (requested == Backend::Interpreter || interpreter_only) return {BackendId::Interpreter, false};
  if (requested == Backend::Compiled) return {BackendId::Compiled, false};
  // Auto, and Cuda with no device to run on (a negative Options::device): as before the
  // interface, compiled code when it applies, else the interpreter.
  return {BackendId::Compiled, true};
}

ChosenBackend backend_for_call(Backend requested, int device, bool interpreter_only) {
  const BackendChoice c = choose_backend(requested, device, interpreter_only);
  const BackendRegistry& reg = BackendRegistry::instance();
  return {&reg.get(c.first), c.interpreter_fallback ? &reg.get(BackendId::Interpreter) : nullptr};
}

namespace {

KernelBackend* builtin(BackendId id) {
  switch (id) {
    case BackendId::Compiled:
      return &compiled_backend();
    case BackendId::Interpreter:
      return &interpreter_backend();
    case BackendId::Cuda:
      return &cuda_backend();
  }
  return nullptr;
}

}  // namespace

BackendRegistry::BackendRegistry() {
  for (int k = 0; k < kBackendSlots; ++k) slots_[k].store(builtin(static_cast<BackendId>(k)));
}

BackendRegistry& BackendRegistry::instance() {
  static BackendRegistry* r = new BackendRegistry();  // used by static destructors of callers
  return *r;
}

KernelBackend* BackendRegistry::replace(BackendId id, KernelBackend* b) {
  return slots_[static_cast<int>(id)].exchange(b ? b : builtin(id), std::memory_order_acq_rel);
}

KernelBackend& BackendRegistry::backend_for(DeviceKind kind) const {
  TESSEL_ASSERT(kind == DeviceKind::CUDA, "host arrays have no backend or device of their own");
  return get(BackendId::Cuda);
}

DeviceApi& BackendRegistry::device_for(DeviceKind kind) const {
  DeviceApi* d = backend_for(kind).device();
  TESSEL_ASSERT(d != nullptr, "the ", backend_for(kind).name(), " backend has no device");
  return *d;
}

void BackendRegistry::forget_loaded() {
  for (int k = 0; k < kBackendSlots; ++k) builtin(static_cast<BackendId>(k))->forget_loaded();
}

}  // namespace tessel
