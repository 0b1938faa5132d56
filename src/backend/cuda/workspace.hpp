// Device buffers reused across calls, one workspace per GPU, shared by the kernel launches
// (launch.cpp) and the device's small steps (device_api.cpp) so that a repeated call allocates
// nothing on the device.
#pragma once

#include <algorithm>
#include <mutex>
#include <vector>

#include "backend/cuda/driver.hpp"

namespace tessel {

// Device buffers reused across calls on one device; the mutex serialises calls on it, which is
// what makes the reuse safe (each call synchronises its stream before releasing it).
struct Workspace {
  std::mutex mu;
  std::vector<CudaBuffer> slots;

  CuDevicePtr get(int device, size_t slot, size_t bytes) {
    if (slots.size() <= slot) slots.resize(slot + 1);
    if (slots[slot].bytes() < bytes) {
      const size_t grown = std::max(bytes, slots[slot].bytes() * 2);
      slots[slot] = CudaBuffer();  // free before allocating the larger one
      slots[slot] = CudaBuffer(device, grown);
    }
    return slots[slot].ptr();
  }
};

// The workspace of `device`, created on first use and kept for the process (device_api.cpp).
Workspace& cuda_workspace(int device);

}  // namespace tessel
