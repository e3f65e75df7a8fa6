// Tests of kernels/cuda/runtime: the error wrappers throw cohort::Error naming the call, streams
// and events order work, and the caching allocator reuses blocks and keeps its statistics.
#include <cublas_v2.h>

#include <cstring>
#include <string>

#include "core/base/error.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "tests/gpu/harness.h"

namespace cohort::gpu_test {

namespace kc = kernels::cuda;

namespace {
// Runs f, expecting cohort::Error with `status` and a message containing `text`.
template <typename F>
bool throws(F&& f, Status status, const char* text) {
  try {
    f();
  } catch (const Error& e) {
    return e.status() == status && std::strstr(e.what(), text) != nullptr;
  }
  return false;
}
}  // namespace

void test_runtime(Env& env) {
  Context& c = env.ctx;
  expect_true(
      c, "cudaSetDevice(9999) -> kInternal naming the call",
      throws([] { COHORT_CUDA_CHECK(cudaSetDevice(9999)); }, Status::kInternal, "cudaSetDevice"));
  void* p = nullptr;
  expect_true(c, "cudaMalloc(1 PiB) -> kOutOfMemory",
              throws([&] { COHORT_CUDA_CHECK(cudaMalloc(&p, size_t{1} << 50)); },
                     Status::kOutOfMemory, "cudaMalloc"));
  expect_true(c, "cuBLAS status -> Error with its name",
              throws([] { COHORT_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE); }, Status::kInternal,
                     "CUBLAS_STATUS_INVALID_VALUE"));
  expect_true(c, "runtime usable after the errors", cudaDeviceSynchronize() == cudaSuccess);
  kc::Blas blas;
  expect_true(c, "gemm with lda < K -> kInvalidArgument",
              throws(
                  [&] {
                    blas.gemm(DType::kF32, false, false, 4, 4, 8, 1.0f, nullptr, 4, nullptr, 4,
                              0.0f, nullptr, 4);
                  },
                  Status::kInvalidArgument, "lda"));

  // Compute -> comm ordering: gelu on the compute stream, then a copy on the comm stream.
  const size_t n = size_t{1} << 22;
  Buffers buf(*env.alloc);
  const auto x = random_vector(env.rng, n);
  void* dx = buf.upload(x, DType::kF32);
  float* dy = buf.poisoned_f32(n);
  float* dz = buf.poisoned_f32(n);
  // Uploads and poisoning ran on the legacy stream, which the non-blocking streams do not wait for.
  COHORT_CUDA_CHECK(cudaDeviceSynchronize());
  kc::StreamPair streams;
  kc::Event start(true), stop(true);
  start.record(streams.compute.get());
  kc::gelu_forward(DType::kF32, dx, nullptr, dy, static_cast<int64_t>(n), 1, streams.compute.get());
  stop.record(streams.compute.get());
  streams.comm_after_compute();
  COHORT_CUDA_CHECK(cudaMemcpyAsync(dz, dy, n * 4, cudaMemcpyDeviceToDevice, streams.comm.get()));
  streams.comm.synchronize();
  const auto y = Buffers::download(dy, n, DType::kF32), z = Buffers::download(dz, n, DType::kF32);
  expect_true(c, "comm stream saw the compute stream's output",
              std::memcmp(y.data(), z.data(), n * 4) == 0);
  expect_true(c, "event timing is positive", stop.elapsed_ms(start) > 0.0f);
  expect_true(c, "event query after sync", stop.query());
}

void test_allocator(Env& env) {
  Context& c = env.ctx;
  kc::DeviceAllocator a;
  expect_true(c, "size classes",
              kc::DeviceAllocator::size_class(1) == 512 &&
                  kc::DeviceAllocator::size_class(1000) == 1024 &&
                  kc::DeviceAllocator::size_class(3 << 20) == (4 << 20));
  void* p = a.allocate(1000);
  a.free(p);
  void* q = a.allocate(700);
  expect_true(c, "same-stream block reused at once", p == q && a.stats().reuses == 1);
  void* big = a.allocate(3 << 20);
  auto s = a.stats();
  expect_true(c, "in_use / peak count class sizes",
              s.in_use == 1024 + (4 << 20) && s.peak == s.in_use);
  a.free(big);
  s = a.stats();
  expect_true(c, "freed block is cached", s.cached == (4 << 20) && s.in_use == 1024);
  kc::Stream other;
  COHORT_CUDA_CHECK(cudaDeviceSynchronize());
  void* big2 = a.allocate(4 << 20, other.get());
  expect_true(c, "other stream reuses after the free completed", big2 == big);
  a.free(big2);
  a.free(q);
  a.release_all();
  s = a.stats();
  expect_true(c, "release_all empties the cache",
              s.cached == 0 && s.reserved == 0 && s.in_use == 0);
  bool threw = false;
  try {
    a.free(reinterpret_cast<void*>(0x1000));
  } catch (const Error& e) {
    threw = e.status() == Status::kInvalidArgument;
  }
  expect_true(c, "free of a foreign pointer -> kInvalidArgument", threw);
  bool oom = false;
  try {
    (void)a.allocate(size_t{1} << 50);
  } catch (const Error& e) {
    oom = e.status() == Status::kOutOfMemory &&
          std::string(e.what()).find("cudaMalloc") != std::string::npos;
  }
  expect_true(c, "1 PiB allocation -> kOutOfMemory", oom);
}

}  // namespace cohort::gpu_test
