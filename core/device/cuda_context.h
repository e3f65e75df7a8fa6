// The CUDA backend's process-wide state, for code that launches CUDA kernels on tensors (the
// operators' CUDA kernels in core/ops/cuda, the optimizer): the compute stream, the cuBLAS
// handle bound to it and the caching allocator every device tensor comes from. Only in builds
// with the CUDA backend (COHORT_HAVE_CUDA); everything else goes through core/device/device.h.
//
// One thread at a time: the executor and the optimizer of one trainer queue their work from the
// thread that runs the step (the cuBLAS handle is not thread-safe).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/base/error.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/runtime.h"

namespace cohort {

// Index checks of the operators' CUDA kernels (ids, labels), read once at the end of an executor
// run instead of a host round trip each: add() hands a kernel a device slot (reset on the compute
// stream) that kernels/cuda/index_check.h fills with the first bad element; flush() copies every
// pending slot back at once and throws the error of the first check that found one.
class DeferredChecks {
 public:
  // Builds the error for a bad `value` at flat `position`.
  using Failure = std::function<Error(int64_t position, int32_t value)>;
  explicit DeferredChecks(cudaStream_t stream) : stream_(stream) {}
  uint64_t* add(Failure failure);  // flushes first when every slot is in use
  void flush();                    // waits for the compute stream; clears the list, then throws
  void clear() { pending_.clear(); }

 private:
  static constexpr size_t kSlots = 256;
  cudaStream_t stream_;
  uint64_t* slots_ = nullptr;  // device memory, made on first use and kept
  std::vector<Failure> pending_;
};

struct CudaContext {
  explicit CudaContext(int device);
  int device;
  kernels::cuda::Stream stream;
  kernels::cuda::DeviceAllocator allocator;
  kernels::cuda::Blas blas;
  DeferredChecks checks;
  cudaStream_t compute() const { return stream.get(); }
};

// The context of the current CUDA device, made on first use; throws kUnsupported naming the
// reason when no device can be used. Never destroyed (CUDA may be torn down before static
// destructors run at exit).
CudaContext& cuda_context();

// Device scratch memory for one kernel's workspace, handed back to the allocator (ordered on the
// compute stream, so the kernel queued before that still owns it) when this goes out of scope.
class CudaScratch {
 public:
  explicit CudaScratch(size_t bytes);
  ~CudaScratch();
  CudaScratch(const CudaScratch&) = delete;
  CudaScratch& operator=(const CudaScratch&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

}  // namespace cohort
