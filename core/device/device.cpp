// Devices: the host always; the CUDA device in builds with the CUDA backend.
#include "core/device/device.h"

#include <cstring>

#include "core/base/error.h"
#include "core/base/log.h"

#ifdef COHORT_HAVE_CUDA
#include "core/device/cuda_context.h"
#include "kernels/cuda/index_check.h"
#endif

namespace cohort {

const char* device_name(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

Tensor to_device(const Tensor& t, Device device) {
  if (t.device() == device && t.is_contiguous()) return t;
  Tensor r = Tensor::empty(t.shape(), t.dtype(), device_allocator(device));
  r.copy_from(t);
  return r;
}

#ifdef COHORT_HAVE_CUDA

namespace {

// Device tensors' storage: the context's caching allocator, ordered on the compute stream.
class CudaTensorAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    CudaContext& c = cuda_context();
    return c.allocator.allocate(bytes, c.compute());
  }
  void deallocate(void* ptr, size_t) override {
    try {  // called from Storage's destructor: an error is logged, never thrown
      cuda_context().allocator.free(ptr);
    } catch (const std::exception& e) {
      log(LogLevel::kError, str_cat("freeing device memory: ", e.what()));
    }
  }
  Device device() const override { return Device::kCuda; }
};

cudaMemcpyKind copy_kind(Device dst, Device src) {
  if (dst == Device::kCuda) return src == Device::kCuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  return src == Device::kCuda ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
}

}  // namespace

CudaContext::CudaContext(int dev)
    : device(dev), stream(), allocator(dev), blas(stream.get()), checks(stream.get()) {}

uint64_t* DeferredChecks::add(Failure failure) {
  if (pending_.size() == kSlots) flush();
  if (!slots_) COHORT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&slots_), kSlots * sizeof(uint64_t)));
  uint64_t* slot = slots_ + pending_.size();
  COHORT_CUDA_CHECK(cudaMemsetAsync(slot, 0xFF, sizeof(uint64_t), stream_));  // kNoBadIndex
  pending_.push_back(std::move(failure));
  return slot;
}

void DeferredChecks::flush() {
  if (pending_.empty()) return;
  std::vector<Failure> pending;
  pending.swap(pending_);  // cleared whatever happens below
  std::vector<uint64_t> found(pending.size());
  COHORT_CUDA_CHECK(cudaMemcpyAsync(found.data(), slots_, found.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                                    stream_));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i < found.size(); ++i)
    if (found[i] != kernels::cuda::kNoBadIndex)
      throw pending[i](kernels::cuda::bad_index_position(found[i]), kernels::cuda::bad_index_value(found[i]));
}

CudaContext& cuda_context() {
  static CudaContext* context = [] {
    const std::string why = device_unavailable_reason(Device::kCuda);
    COHORT_CHECK(why.empty(), Status::kUnsupported, "the CUDA device cannot be used: ", why);
    int dev = 0;
    COHORT_CUDA_CHECK(cudaGetDevice(&dev));
    return new CudaContext(dev);
  }();
  return *context;
}

CudaScratch::CudaScratch(size_t bytes) {
  if (bytes == 0) return;
  CudaContext& c = cuda_context();
  ptr_ = c.allocator.allocate(bytes, c.compute());
}

CudaScratch::~CudaScratch() {
  if (!ptr_) return;
  try {
    cuda_context().allocator.free(ptr_);
  } catch (const std::exception& e) {
    log(LogLevel::kError, str_cat("freeing device scratch: ", e.what()));
  }
}

bool cuda_built() { return true; }
int cuda_device_count() { return kernels::cuda::device_count(); }

std::string device_unavailable_reason(Device device) {
  if (device == Device::kCpu) return "";
  if (kernels::cuda::device_count() > 0) return "";
  const std::string why = kernels::cuda::no_device_reason();
  return why.empty() ? "no CUDA device visible" : str_cat("no CUDA device visible (", why, ")");
}

Allocator* device_allocator(Device device) {
  if (device == Device::kCpu) return cpu_allocator();
  (void)cuda_context();  // throws, naming the reason, when there is no device
  static CudaTensorAllocator allocator;
  return &allocator;
}

void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device == Device::kCpu && src_device == Device::kCpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
  CudaContext& c = cuda_context();
  COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, copy_kind(dst_device, src_device), c.compute()));
  c.stream.synchronize();
}

void device_copy_queued(void* dst, const void* src, Device device, size_t bytes) {
  if (bytes == 0) return;
  if (device == Device::kCpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
  COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_context().compute()));
}

void device_memset_zero(void* ptr, Device device, size_t bytes) {
  if (bytes == 0) return;
  if (device == Device::kCpu) {
    std::memset(ptr, 0, bytes);
    return;
  }
  COHORT_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, cuda_context().compute()));
}

void device_synchronize(Device device) {
  if (device == Device::kCuda) cuda_context().stream.synchronize();
}

void device_flush_checks(Device device) {
  if (device == Device::kCuda) cuda_context().checks.flush();
}

void device_discard_checks(Device device) {
  if (device == Device::kCuda) cuda_context().checks.clear();
}

void set_cuda_allow_tf32(bool allow) {
  if (cuda_device_count() > 0) cuda_context().blas.set_allow_tf32(allow);
}

#else  // no CUDA backend in this build

bool cuda_built() { return false; }
int cuda_device_count() { return 0; }

std::string device_unavailable_reason(Device device) {
  return device == Device::kCpu ? "" : "this build has no CUDA backend (nvcc was not found when it was configured)";
}

Allocator* device_allocator(Device device) {
  const std::string why = device_unavailable_reason(device);
  COHORT_CHECK(why.empty(), Status::kUnsupported, "the CUDA device cannot be used: ", why);
  return cpu_allocator();
}

void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  COHORT_CHECK(dst_device == Device::kCpu && src_device == Device::kCpu, Status::kUnsupported,
               "the CUDA device cannot be used: ", device_unavailable_reason(Device::kCuda));
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void device_copy_queued(void* dst, const void* src, Device device, size_t bytes) {
  device_copy(dst, device, src, device, bytes);
}

void device_memset_zero(void* ptr, Device device, size_t bytes) {
  COHORT_CHECK(device == Device::kCpu, Status::kUnsupported, "the CUDA device cannot be used: ",
               device_unavailable_reason(Device::kCuda));
  if (bytes > 0) std::memset(ptr, 0, bytes);
}

void device_synchronize(Device) {}
void device_flush_checks(Device) {}
void device_discard_checks(Device) {}

void set_cuda_allow_tf32(bool) {}

#endif

}  // namespace cohort
