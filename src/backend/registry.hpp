// Which backend runs a call: the selection rules, and the registry of backend objects by slot
// (and of the devices they compute on, by device kind).
#pragma once

#include <atomic>

#include "backend/backend.hpp"
#include "tessel/reduction.hpp"

namespace tessel {

// The backend to try first and whether the interpreter may take over when it declines.
struct BackendChoice {
  BackendId first = BackendId::Interpreter;
  bool interpreter_fallback = false;
};

// The selection rules. `device`: the CUDA device the call's arrays live on (or the one
// Backend::Cuda asks for), -1 for the CPU. `interpreter_only`: reductions only the interpreter
// implements. CUDA arrays go to CUDA; Interpreter (or such a reduction) to the interpreter;
// Compiled to compiled code or an error; Auto to compiled code, else the interpreter.
BackendChoice choose_backend(Backend requested, int device, bool interpreter_only);

// The backends the rules choose, taken from the registry's slots: `first`, and `fallback` (the
// interpreter, or nullptr) to run the problem when `first` declines it.
struct ChosenBackend {
  KernelBackend* first = nullptr;
  KernelBackend* fallback = nullptr;
};
ChosenBackend backend_for_call(Backend requested, int device, bool interpreter_only);

// The backend objects by slot: the built-in ones, unless a test put another one in a slot.
class BackendRegistry {
 public:
  static BackendRegistry& instance();

  KernelBackend& get(BackendId id) const {
    return *slots_[static_cast<int>(id)].load(std::memory_order_acquire);
  }
  // Test seam, reachable from C++ only through this internal header: puts `b` into slot `id`
  // (nullptr restores the built-in one) and returns what was there.
  KernelBackend* replace(BackendId id, KernelBackend* b);
  // By the device kind of a call's arrays (CUDA only: host arrays need neither): the backend
  // that runs calls on them, and the device that owns their memory (that backend's device).
  KernelBackend& backend_for(DeviceKind kind) const;
  DeviceApi& device_for(DeviceKind kind) const;
  // Every built-in backend drops the kernels it holds in memory (the disk cache stays).
  void forget_loaded();

 private:
  BackendRegistry();
  std::atomic<KernelBackend*> slots_[kBackendSlots];
};

// Puts a backend into a slot for the life of the object (tests).
class ScopedBackend {
 public:
  ScopedBackend(BackendId id, KernelBackend& b)
      : id_(id), prev_(BackendRegistry::instance().replace(id, &b)) {}
  ~ScopedBackend() { BackendRegistry::instance().replace(id_, prev_); }
  ScopedBackend(const ScopedBackend&) = delete;
  ScopedBackend& operator=(const ScopedBackend&) = delete;

 private:
  BackendId id_;
  KernelBackend* prev_;
};

}  // namespace tessel
