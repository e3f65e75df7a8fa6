// CUDA runtime glue for the GPU kernels: the one error wrapper for CUDA runtime and cuBLAS calls
// (throws cohort::Error naming the call and carrying the library's text; never aborts), device
// queries, a caching device allocator, and Stream / Event wrappers. Plain C++ header: it needs
// only cuda_runtime_api.h, so host-only translation units (tests, core) may include it.
//
// The one thing to know: device memory comes from cudaMalloc only (never managed memory), and
// the allocator hands a freed block back to the stream that freed it at once (stream order makes
// that safe); another stream may take it only after the free's event has completed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace cohort::kernels::cuda {

// Storage types of the fused kernels. kBF16 holds bf16 in memory and computes in fp32.
enum class DType { kF32, kBF16 };
inline size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 2; }
const char* dtype_name(DType t);

// Throws cohort::Error (kOutOfMemory for cudaErrorMemoryAllocation, else kInternal) when err is
// not cudaSuccess; the message names `call` and carries cudaGetErrorString. Clears the sticky
// last-error state of non-sticky errors.
void check_cuda(cudaError_t err, const char* call, const char* file, int line);
// Same for a cublasStatus_t (passed as int so this header needs no cuBLAS).
void check_cublas(int status, const char* call, const char* file, int line);
// After a kernel launch: turns cudaGetLastError into an Error naming the kernel.
void check_launch(const char* kernel, const char* file, int line);

#define COHORT_CUDA_CHECK(call) \
  ::cohort::kernels::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define COHORT_CUBLAS_CHECK(call) \
  ::cohort::kernels::cuda::check_cublas(static_cast<int>(call), #call, __FILE__, __LINE__)
#define COHORT_CUDA_CHECK_LAUNCH(name) \
  ::cohort::kernels::cuda::check_launch(name, __FILE__, __LINE__)

// Number of visible CUDA devices; 0 (never an error) when there is no driver or no device.
int device_count();
// A one-line reason when device_count() is 0 (the CUDA error text), else "".
std::string no_device_reason();

struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t total_memory = 0;  // bytes
  size_t l2_bytes = 0;
  size_t shared_per_block_optin = 0;  // bytes a block may have after cudaFuncSetAttribute
};
DeviceInfo device_info(int device);

class Event;

// An owned cudaStream_t (non-blocking with respect to the legacy default stream).
class Stream {
 public:
  explicit Stream(int priority = 0);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;
  // Work submitted to this stream after the call waits for `event` (no host blocking).
  void wait(const Event& event) const;

 private:
  cudaStream_t stream_ = nullptr;
};

// An owned cudaEvent_t; timing is off unless asked for (cheaper ordering events).
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  void synchronize() const;
  bool query() const;  // true when complete
  // Milliseconds between `start` (recorded earlier) and this event; both need timing.
  float elapsed_ms(const Event& start) const;

 private:
  cudaEvent_t event_ = nullptr;
};

// The pair the executor drives: compute and communication streams, ordered with events.
struct StreamPair {
  Stream compute;
  Stream comm;
  // comm waits for everything compute has submitted so far (e.g. gradients ready to reduce).
  void comm_after_compute();
  // compute waits for everything comm has submitted so far (e.g. reduced gradients arrived).
  void compute_after_comm();

 private:
  Event compute_done_, comm_done_;
};

// Caching device allocator. Sizes round up to a class (powers of two from 512 B below 1 MiB,
// multiples of 2 MiB above); a free block goes to its class's cache, tagged with its stream and
// an event recorded at free. Thread-safe.
class DeviceAllocator {
 public:
  struct Stats {
    size_t in_use = 0;     // bytes of blocks handed out (class sizes)
    size_t peak = 0;       // max of in_use since construction or reset_peak()
    size_t cached = 0;     // bytes held in the cache, ready for reuse
    size_t reserved = 0;   // bytes obtained from cudaMalloc and not yet released
    uint64_t mallocs = 0;  // cudaMalloc calls
    uint64_t reuses = 0;   // allocations served from the cache
  };

  // device < 0: the current device at construction.
  explicit DeviceAllocator(int device = -1);
  ~DeviceAllocator();  // frees the cache; blocks still in use are freed too (the owner is gone)
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // A block of at least `bytes` (256-byte aligned) usable on `stream`; bytes == 0 gives null.
  // Throws Error(kOutOfMemory) after releasing the cache and retrying once.
  void* allocate(size_t bytes, cudaStream_t stream = nullptr);
  // Returns a block to the cache; work already queued on its stream may still use it. Free
  // before destroying the block's stream (the free records an event on it). Throws
  // kInvalidArgument for a pointer not from here; on a CUDA error the block is released, not
  // cached, and the error thrown.
  void free(void* ptr);
  // cudaFree for every cached block (blocks in use stay valid).
  void release_all();
  Stats stats() const;
  void reset_peak();
  static size_t size_class(size_t bytes);

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    cudaStream_t stream = nullptr;
    cudaEvent_t freed = nullptr;  // recorded on `stream` at free
  };
  bool take_cached(size_t size, cudaStream_t stream, Block* out);
  void release_cached_locked();

  int device_ = 0;
  mutable std::mutex mu_;
  std::multimap<size_t, Block> cache_;     // by class size
  std::unordered_map<void*, Block> live_;  // handed out
  std::vector<cudaEvent_t> spare_events_;
  Stats stats_;
};

}  // namespace cohort::kernels::cuda
