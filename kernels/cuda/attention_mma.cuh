// Warp-level primitives of the tensor-core attention kernels (attention_flash.cuh): mma.sync
// (m16n8k8 TF32, m16n8k16 bf16, fp32 accumulation), ldmatrix, cp.async with zero fill, quad
// shuffles, ex2.approx, and the shared-memory and global accesses the kernels make. The kernel
// bodies touch memory and other lanes only through these functions, so that
// tests/gpu/warp_emulator.h can give the same names a host implementation (fibers per thread,
// bounds-checked memory) and run the bodies without a GPU. The fragment layouts are those of
// the PTX ISA ("Matrix Fragments for mma.m16n8k8 / m16n8k16", "ldmatrix"): lane = 4 g + t.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#define COHORT_WARP_FN __device__ __forceinline__
#define COHORT_UNROLL _Pragma("unroll")

namespace cohort::kernels::cuda::detail::mma {

COHORT_WARP_FN void block_sync() { __syncthreads(); }

COHORT_WARP_FN float bits_to_float(uint32_t x) { return __uint_as_float(x); }

// Max and sum over the 4 lanes of a quad (the lanes holding one row of an accumulator).
COHORT_WARP_FN float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
COHORT_WARP_FN float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// 2^x with the special-function unit (max relative error ~2^-22; -inf gives +0).
COHORT_WARP_FN float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// fp32 -> TF32 operand: adds half a TF32 ulp to the bit pattern. The tensor cores read only the
// upper 19 bits of a .tf32 operand (CUTLASS's round-toward-zero tfloat32_t is a bare bit cast),
// so the operand they use is x rounded to nearest, ties away from zero: what cvt.rna.tf32.f32
// gives, in one integer add instead of its four instructions (a compare, a predicated add and
// a mask in SASS) — conversions outnumber the mmas 2 to 1 here. For finite x (inf becomes NaN,
// which the attention inputs never hold). The host emulation masks the low bits instead, so an
// operand that skipped this conversion is caught there.
COHORT_WARP_FN uint32_t to_tf32(float x) { return __float_as_uint(x) + 0x1000u; }

// Two floats as a bf16 pair rounded to nearest even: `lo` in the low half (the lower index).
COHORT_WARP_FN uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// d += A B for a 16x8 tile: A 16x8 TF32 (a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)),
// B 8x8 TF32 (b0 (t, g), b1 (t+4, g)), d (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
COHORT_WARP_FN void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += A B for a 16x8 tile: A 16x16 bf16 (a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..),
// a3 (g+8, 2t+8..)), B 16x8 bf16 (b0 (2t..2t+1, g), b1 (2t+8..2t+9, g)), d as mma_tf32.
COHORT_WARP_FN void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 matrices of 16-bit elements (8 rows of 16 bytes each; lanes 8m..8m+7 give the row
// addresses of matrix m): r[m] of lane 4g+t holds row g, bytes 4t..4t+3 of matrix m. With
// .trans, r[m] holds the elements (2t, g) and (2t+1, g) of matrix m, (2t, g) in the low half.
COHORT_WARP_FN void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
COHORT_WARP_FN void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// 16 bytes global -> shared without passing through registers; `valid` false writes zeros and
// reads nothing (src must still be a mapped address). Both addresses 16-byte aligned.
COHORT_WARP_FN void cp_async16(void* dst, const void* src, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
// 4 bytes, same contract (4-byte aligned).
COHORT_WARP_FN void cp_async4(void* dst, const void* src, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
COHORT_WARP_FN void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight (then a barrier
// makes every thread's copies visible to the block).
template <int N>
COHORT_WARP_FN void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Shared-memory and global accesses of the kernels (plain loads and stores on the device).
COHORT_WARP_FN float4 lds128(const float* p) { return *reinterpret_cast<const float4*>(p); }
COHORT_WARP_FN float2 lds64(const float* p) { return *reinterpret_cast<const float2*>(p); }
COHORT_WARP_FN float ldg(const float* p) { return *p; }
COHORT_WARP_FN void stg(float* p, float v) { *p = v; }
COHORT_WARP_FN void stg128(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
COHORT_WARP_FN void stg32(__nv_bfloat16* p, uint32_t v) { *reinterpret_cast<uint32_t*>(p) = v; }

}  // namespace cohort::kernels::cuda::detail::mma
