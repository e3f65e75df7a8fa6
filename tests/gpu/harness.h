// Shared pieces of the GPU test driver: device buffers with host conversion (fp32 or bf16),
// output poisoning (0xFF bytes are NaN in both types, so an unwritten element fails its check),
// and the list of test functions. Buffers come from the caching allocator under test.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/cuda/runtime.h"
#include "tests/gpu/check.h"

namespace cohort::gpu_test {

using kernels::cuda::DType;

// Owns the device buffers of one test; frees them (back to the cache) at scope exit.
class Buffers {
 public:
  explicit Buffers(kernels::cuda::DeviceAllocator& alloc) : alloc_(alloc) {}
  ~Buffers() {
    for (void* p : owned_) {
      try {
        alloc_.free(p);
      } catch (...) {  // after a sticky CUDA error the free's event record fails; keep going
      }
    }
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  void* raw(size_t bytes) {
    void* p = alloc_.allocate(bytes);
    owned_.push_back(p);
    return p;
  }
  // n elements of `type` filled with NaN bytes.
  void* poisoned(size_t n, DType type) {
    void* p = raw(n * kernels::cuda::dtype_size(type));
    COHORT_CUDA_CHECK(cudaMemset(p, 0xFF, n * kernels::cuda::dtype_size(type)));
    return p;
  }
  float* poisoned_f32(size_t n) { return static_cast<float*>(poisoned(n, DType::kF32)); }
  // Host fp32 values stored as `type` (bf16 rounds to nearest even).
  void* upload(const std::vector<float>& host, DType type) {
    void* p = raw(host.size() * kernels::cuda::dtype_size(type));
    copy_in(p, host, type);
    return p;
  }
  template <typename T>
  T* upload_raw(const std::vector<T>& host) {
    void* p = raw(host.size() * sizeof(T));
    COHORT_CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return static_cast<T*>(p);
  }
  static void copy_in(void* dst, const std::vector<float>& host, DType type) {
    if (type == DType::kF32) {
      COHORT_CUDA_CHECK(cudaMemcpy(dst, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
      return;
    }
    std::vector<uint16_t> h(host.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = to_bf16(host[i]);
    COHORT_CUDA_CHECK(cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  }
  static std::vector<float> download(const void* src, size_t n, DType type) {
    COHORT_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> out(n);
    if (type == DType::kF32) {
      COHORT_CUDA_CHECK(cudaMemcpy(out.data(), src, n * 4, cudaMemcpyDeviceToHost));
      return out;
    }
    std::vector<uint16_t> h(n);
    COHORT_CUDA_CHECK(cudaMemcpy(h.data(), src, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) out[i] = from_bf16(h[i]);
    return out;
  }

 private:
  kernels::cuda::DeviceAllocator& alloc_;
  std::vector<void*> owned_;
};

// Relative L2 tolerances per storage type (and TF32 for the gemm).
inline double tol_for(DType t) { return t == DType::kF32 ? 1e-5 : 1e-2; }
constexpr double kTolTf32 = 1e-3;

// Inputs as the kernel sees them: bf16 storage rounds them first.
inline std::vector<float> as_stored(const std::vector<float>& v, DType t) {
  return t == DType::kF32 ? v : round_bf16(v);
}

struct Env {
  Context ctx;
  std::mt19937_64 rng;
  kernels::cuda::DeviceAllocator* alloc = nullptr;
};

void test_runtime(Env& env);
void test_allocator(Env& env);
void test_gemm(Env& env);
void test_elementwise(Env& env);
void test_layernorm(Env& env);
void test_cross_entropy(Env& env);
void test_adamw(Env& env);
void test_attention(Env& env);
void test_attention_cudnn(Env& env);
void test_embedding(Env& env);
void test_sum_rows(Env& env);

}  // namespace cohort::gpu_test
