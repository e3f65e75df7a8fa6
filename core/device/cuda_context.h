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

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/runtime.h"

namespace cohort {

struct CudaContext {
  explicit CudaContext(int device);
  int device;
  kernels::cuda::Stream stream;
  kernels::cuda::DeviceAllocator allocator;
  kernels::cuda::Blas blas;
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
