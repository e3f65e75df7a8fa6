// CUDA runtime glue: error wrappers, device queries, streams, events and the caching allocator.
// Host code only; compiled by the C++ compiler against the CUDA runtime and cuBLAS headers.
#include "kernels/cuda/runtime.h"

#include "kernels/cuda/cublas_api.h"

#include "core/base/error.h"

namespace cohort::kernels::cuda {

const char* dtype_name(DType t) { return t == DType::kF32 ? "f32" : "bf16"; }

void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so later calls do not see it again
  const Status s = err == cudaErrorMemoryAllocation ? Status::kOutOfMemory : Status::kInternal;
  throw_error(s, str_cat(call, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                         ") at ", file, ":", line));
}

void check_cublas(int status, const char* call, const char* file, int line) {
  const auto st = static_cast<cublasStatus_t>(status);
  if (st == CUBLAS_STATUS_SUCCESS) return;
  const Status s = st == CUBLAS_STATUS_ALLOC_FAILED    ? Status::kOutOfMemory
                   : st == CUBLAS_STATUS_NOT_SUPPORTED ? Status::kUnsupported
                                                       : Status::kInternal;
  throw_error(s, str_cat(call, " failed: ", cublas().status_name(st), " (",
                         cublas().status_string(st), ") at ", file, ":", line));
}

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return;
  throw_error(Status::kInternal,
              str_cat("launch of kernel ", kernel, " failed: ", cudaGetErrorName(err), " (",
                      cudaGetErrorString(err), ") at ", file, ":", line));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string no_device_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  (void)cudaGetLastError();
  if (err != cudaSuccess) return str_cat(cudaGetErrorName(err), ": ", cudaGetErrorString(err));
  return n == 0 ? "cudaGetDeviceCount returned 0" : "";
}

DeviceInfo device_info(int device) {
  cudaDeviceProp p{};
  COHORT_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceInfo d;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.multiprocessors = p.multiProcessorCount;
  d.total_memory = p.totalGlobalMem;
  d.l2_bytes = static_cast<size_t>(p.l2CacheSize);
  d.shared_per_block_optin = p.sharedMemPerBlockOptin;
  return d;
}

// ---- Stream / Event ----

Stream::Stream(int priority) {
  COHORT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
}
Stream::~Stream() {
  if (stream_) (void)cudaStreamDestroy(stream_);
}
void Stream::synchronize() const { COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
void Stream::wait(const Event& event) const {
  COHORT_CUDA_CHECK(cudaStreamWaitEvent(stream_, event.get(), 0));
}

Event::Event(bool timing) {
  COHORT_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (event_) (void)cudaEventDestroy(event_);
}
void Event::record(cudaStream_t stream) { COHORT_CUDA_CHECK(cudaEventRecord(event_, stream)); }
void Event::synchronize() const { COHORT_CUDA_CHECK(cudaEventSynchronize(event_)); }
bool Event::query() const {
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  COHORT_CUDA_CHECK(err);
  return true;
}
float Event::elapsed_ms(const Event& start) const {
  float ms = 0.0f;
  COHORT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

void StreamPair::comm_after_compute() {
  compute_done_.record(compute.get());
  comm.wait(compute_done_);
}
void StreamPair::compute_after_comm() {
  comm_done_.record(comm.get());
  compute.wait(comm_done_);
}

// ---- DeviceAllocator ----

namespace {
constexpr size_t kSmallLimit = size_t{1} << 20;  // below: power-of-two classes
constexpr size_t kLargeStep = size_t{2} << 20;   // above: multiples of 2 MiB
constexpr size_t kMinClass = 512;
}  // namespace

size_t DeviceAllocator::size_class(size_t bytes) {
  if (bytes >= kSmallLimit) return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
  size_t c = kMinClass;
  while (c < bytes) c <<= 1;
  return c;
}

DeviceAllocator::DeviceAllocator(int device) : device_(device) {
  if (device_ < 0) COHORT_CUDA_CHECK(cudaGetDevice(&device_));
}

DeviceAllocator::~DeviceAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : live_) (void)cudaFree(kv.second.ptr);
  live_.clear();
  for (auto& kv : cache_) {
    (void)cudaFree(kv.second.ptr);
    if (kv.second.freed) (void)cudaEventDestroy(kv.second.freed);
  }
  cache_.clear();
  for (cudaEvent_t e : spare_events_) (void)cudaEventDestroy(e);
}

// Exact class match only (a 64 MiB block never serves a 2 MiB request). Same-stream blocks are
// reusable at once; a block freed on another stream only once its free event has completed.
bool DeviceAllocator::take_cached(size_t size, cudaStream_t stream, Block* out) {
  auto range = cache_.equal_range(size);
  auto pick = cache_.end();
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second.stream == stream) {
      pick = it;
      break;
    }
    if (pick == cache_.end() && cudaEventQuery(it->second.freed) == cudaSuccess) pick = it;
  }
  (void)cudaGetLastError();  // cudaErrorNotReady from the queries is not an error
  if (pick == cache_.end()) return false;
  *out = pick->second;
  cache_.erase(pick);
  spare_events_.push_back(out->freed);
  out->freed = nullptr;
  out->stream = stream;
  return true;
}

void* DeviceAllocator::allocate(size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  const size_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  Block b;
  if (take_cached(size, stream, &b)) {
    stats_.cached -= size;
    ++stats_.reuses;
  } else {
    COHORT_CUDA_CHECK(cudaSetDevice(device_));
    cudaError_t err = cudaMalloc(&b.ptr, size);
    if (err == cudaErrorMemoryAllocation) {  // give the cache back to the driver and retry once
      (void)cudaGetLastError();
      release_cached_locked();
      err = cudaMalloc(&b.ptr, size);
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      throw_error(err == cudaErrorMemoryAllocation ? Status::kOutOfMemory : Status::kInternal,
                  str_cat("cudaMalloc(", size, " bytes) on device ", device_,
                          " failed: ", cudaGetErrorString(err), "; in use ", stats_.in_use,
                          " bytes, reserved ", stats_.reserved, " bytes"));
    }
    b.size = size;
    b.stream = stream;
    stats_.reserved += size;
    ++stats_.mallocs;
  }
  live_[b.ptr] = b;
  stats_.in_use += size;
  if (stats_.in_use > stats_.peak) stats_.peak = stats_.in_use;
  return b.ptr;
}

void DeviceAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  COHORT_CHECK(it != live_.end(), Status::kInvalidArgument,
               "DeviceAllocator::free: pointer was not allocated here or was already freed");
  Block b = it->second;
  live_.erase(it);
  if (!spare_events_.empty()) {
    b.freed = spare_events_.back();
    spare_events_.pop_back();
  } else {
    COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&b.freed, cudaEventDisableTiming));
  }
  const cudaError_t err = cudaEventRecord(b.freed, b.stream);
  if (err != cudaSuccess) {  // e.g. the stream is gone: give the block back instead of caching it
    spare_events_.push_back(b.freed);
    (void)cudaFree(b.ptr);
    stats_.in_use -= b.size;
    stats_.reserved -= b.size;
    check_cuda(err, "cudaEventRecord(free event)", __FILE__, __LINE__);
  }
  cache_.emplace(b.size, b);
  stats_.in_use -= b.size;
  stats_.cached += b.size;
}

void DeviceAllocator::release_cached_locked() {
  for (auto& kv : cache_) {
    // A block may still be read by queued work: wait for its free event before cudaFree.
    (void)cudaEventSynchronize(kv.second.freed);
    (void)cudaFree(kv.second.ptr);
    spare_events_.push_back(kv.second.freed);
    stats_.reserved -= kv.second.size;
  }
  cache_.clear();
  stats_.cached = 0;
}

void DeviceAllocator::release_all() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

DeviceAllocator::Stats DeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak = stats_.in_use;
}

}  // namespace cohort::kernels::cuda
