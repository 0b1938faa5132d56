// The test stand-in for the CUDA driver: the state its entry points share (devices, memory,
// streams, the launch log, injected faults), in plain C++ behind the C ABI of standin_driver.cpp.
//
// Device memory is host memory that host code cannot touch: each allocation is a memfd mapped
// twice, a device view that is PROT_NONE (a device pointer dereferenced on the host faults) and a
// private read-write alias the stand-in copies through and hands to emulated kernels. Work runs on
// one thread per stream, ordered as CUDA orders it, so that a buffer freed or read too early is a
// sanitizer report rather than luck.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessel::standin {

// CUresult values, as cuda.h numbers them.
// clang-format off
enum Result : int {
  kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kNotInitialized = 3,
  kNoDevice = 100, kInvalidDevice = 101, kInvalidImage = 200, kInvalidContext = 201,
  kInvalidHandle = 400, kNotFound = 500, kIllegalAddress = 700, kLaunchOutOfResources = 701,
  kLaunchFailed = 719,
};
// clang-format on
const char* result_name(int rc);
const char* result_text(int rc);

// One device's properties: H200-like unless TESSEL_STANDIN_* variables say otherwise.
struct DeviceProps {
  std::string name = "tessel stand-in (H200-like)";
  int cc_major = 9, cc_minor = 0, sms = 132;
  int shared_default = 48 * 1024, shared_optin = 227 * 1024;
  int registers = 65536, max_threads = 1024;
  size_t memory = size_t{141} << 30;
};
struct Context {
  int device = 0;
};
// The devices (TESSEL_STANDIN_DEVICES, default 1) and their primary contexts.
const std::vector<DeviceProps>& devices();
Context* primary_context(int device);
Context*& current_context();  // this thread's

// ---- memory (standin_memory.cpp) ----
enum class Kind { Pageable, Pinned, Device };
// What an address is: device memory (an allocation or an adopted range), pinned host memory, or
// anything else (pageable). `host` is where the stand-in itself reads and writes it.
struct Region {
  Kind kind = Kind::Pageable;
  int device = -1;
  uintptr_t begin = 0, end = 0;  // the range as the caller knows it (device addresses)
  char* host = nullptr;          // the alias of `begin`; the address itself for host memory
};
Region classify(const void* p);
// The alias of [p, p + bytes) when it lies inside one device region, else null.
char* device_alias(uintptr_t p, size_t bytes, int* device = nullptr);
int mem_alloc(uint64_t* out, size_t bytes, int device);
int mem_free(uint64_t p);
int host_alloc(void** out, size_t bytes);
int host_free(void* p);
int adopt(void* p, size_t bytes, int device);
int release(void* p);
// Kernels reading device pointers out of device memory: the SIGSEGV handler opens the device
// view they touch while set_in_kernel(true) holds on the faulting thread.
void install_fault_handler();
void set_in_kernel(bool on);
void close_opened_views();

// ---- streams (standin_streams.cpp) ----
struct Stream;
struct Event {
  std::mutex mu;
  Stream* stream = nullptr;  // where it was last recorded; null: never (complete)
  uint64_t seq = 0;          // the stream's operation it waits for
};
// A stream handle as tessel passes it: null and CU_STREAM_LEGACY are the current device's legacy
// default stream. Null when the handle is unknown.
Stream* stream_of(void* handle);
int stream_create(void** out, unsigned flags);
int stream_destroy(void* handle);
// Queues `work` on the stream (after the legacy stream's ordering rules); its error, if any,
// is reported by the next synchronisation. Returns the operation's sequence number.
uint64_t enqueue(Stream* s, std::function<int()> work, const char* what);
int stream_sync(Stream* s);
void stream_wait(Stream* s, Stream* other, uint64_t seq);
int wait_done(Stream* s, uint64_t seq);  // blocks until operation `seq` of `s` has run
uint64_t last_seq(Stream* s);
void sync_all();  // every stream's queued work done (cuMemFree's implicit synchronisation)

// ---- fault injection and the launch log (standin_launch.cpp) ----
enum class Fault { Alloc, Copy, Launch };
// True when this call of `kind` is the one set to fail (TESSEL_STANDIN_FAIL="alloc:3,copy:1").
bool inject(Fault kind);
void log_launch(const std::string& line);

}  // namespace tessel::standin
