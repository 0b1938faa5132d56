// The backend registry and selection rules, and the interface's defaults for host backends.
#include "backend/registry.hpp"

#include "tessel/error.hpp"

namespace tessel {

void KernelBackend::store_rows(const Array&, const ArrayView&) {
  detail::fail("evaluate", "internal: the ", name(), " backend was given a device output");
}

Array KernelBackend::load_rows(const ArrayView&) {
  detail::fail("evaluate", "internal: the ", name(), " backend was given a device output");
}

DeviceRows KernelBackend::alloc_rows(DType, int64_t, int64_t, int) {
  detail::fail("evaluate", "internal: the ", name(), " backend has no device memory");
}

void KernelBackend::add_rows_device(const ArrayView&, const ArrayView&) {
  detail::fail("evaluate", "internal: the ", name(), " backend has no device memory");
}

void KernelBackend::sum_rows_device(const ArrayView&, const ArrayView&) {
  detail::fail("evaluate", "internal: the ", name(), " backend has no device memory");
}

void KernelBackend::convert_device(const ArrayView&, const ArrayView&) {
  detail::fail("evaluate", "internal: the ", name(), " backend has no device memory");
}

void KernelBackend::axpby_device(double, const ArrayView&, double, const ArrayView&) {
  detail::fail("kernel_solve", "internal: the ", name(), " backend has no device memory");
}

double KernelBackend::dot_device(const ArrayView&, const ArrayView&) {
  detail::fail("kernel_solve", "internal: the ", name(), " backend has no device memory");
}

BackendChoice choose_backend(Backend requested, int device, bool interpreter_only) {
  if (device >= 0) return {BackendId::Cuda, false};
  if (requested == Backend::Interpreter || interpreter_only) return {BackendId::Interpreter, false};
  if (requested == Backend::Compiled) return {BackendId::Compiled, false};
  // Auto, and Cuda with no device to run on (a negative Options::device): as before the
  // interface, compiled code when it applies, else the interpreter.
  return {BackendId::Compiled, true};
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

void BackendRegistry::forget_loaded() {
  for (int k = 0; k < kBackendSlots; ++k) builtin(static_cast<BackendId>(k))->forget_loaded();
}

}  // namespace tessel
