// A host emulation of the warp-level primitives of kernels/cuda/attention_mma.cuh, so that the
// tensor-core attention bodies (kernels/cuda/attention_flash.cuh) run and are checked on a
// machine without a GPU. Every thread of a block is a fiber (ucontext); a barrier, a shuffle, an
// mma or an ldmatrix switches fibers, in a seeded random order. The emulation is strict where
// the hardware is silent: shared-memory accesses outside the block's buffer or misaligned,
// global accesses outside the registered buffers, mma operands not rounded to TF32, a barrier
// some threads never reach (deadlock) all throw with the thread and the address. cp.async
// copies land either at once or at the wait that covers them (seeded), so reading a stage
// before its wait, or refilling a stage another warp still reads, changes the result.
// The fragment layouts follow the PTX ISA text, independently of the kernels' code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#define COHORT_WARP_FN inline
#define COHORT_UNROLL

namespace cohort::gpu_test::emu {

struct Launch {
  int grid_x = 1, grid_y = 1, threads = 128;
  size_t smem_bytes = 0;
  uint64_t seed = 1;  // fiber order and cp.async timing
};

// Runs body(block x, block y, thread, shared memory) for every block of the grid, the threads
// of a block as fibers. Throws std::runtime_error on the first violation.
void run(const Launch& launch,
         const std::function<void(int bx, int by, int tid, unsigned char* smem)>& body);

// Global memory the kernels may touch (everything else is out of bounds).
void register_global(const void* p, size_t bytes);
void clear_globals();

// Fibers switched in the last run (to report the emulation's cost).
uint64_t switches();

}  // namespace cohort::gpu_test::emu

namespace cohort::kernels::cuda::detail::mma {

void block_sync();
float bits_to_float(uint32_t x);
float quad_max(float v);
float quad_sum(float v);
float exp2_approx(float x);
uint32_t to_tf32(float x);
uint32_t pack_bf16(float lo, float hi);
void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
void ldmatrix_x4(uint32_t (&r)[4], const void* row);
void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row);
void cp_async16(void* dst, const void* src, bool valid);
void cp_async4(void* dst, const void* src, bool valid);
void cp_async_commit();
void cp_async_wait_n(int n);
template <int N>
inline void cp_async_wait() {
  cp_async_wait_n(N);
}
float4 lds128(const float* p);
float2 lds64(const float* p);
float ldg(const float* p);
void stg(float* p, float v);
void stg128(float* p, float4 v);
void stg32(__nv_bfloat16* p, uint32_t v);

}  // namespace cohort::kernels::cuda::detail::mma
