// How kernels/cuda/gemm.h stages a product's misaligned operands: which dimension to cut, into
// chunks of what length, and where each staged block sits in the staging buffer. Host C++ only
// (no CUDA), so the choice is tested without a device (tests/unit/kernels/gemm_staging_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::kernels::cuda::staging {

// A staged block's leading dimension: its columns rounded up to 128 bytes.
int64_t padded_ld(int64_t cols, size_t element_bytes);
size_t round_up_256(size_t bytes);

// One operand of C[M, N] = op(A)[M, K] op(B)[K, N]: op(X) is [p, q] over the dims dp, dq (0 = M,
// 1 = N, 2 = K), stored transposed when `trans` (rows q, cols p); `staged` when it is copied.
struct Operand {
  bool trans = false, staged = false;
  int dp = 0, dq = 0;
  // Stored rows and columns of a block op(X)[.., ..] of pn x qn.
  int64_t rows(int64_t pn, int64_t qn) const { return trans ? qn : pn; }
  int64_t cols(int64_t pn, int64_t qn) const { return trans ? pn : qn; }
  // Bytes of that block staged (padded rows, rounded to 256).
  size_t bytes(int64_t pn, int64_t qn, size_t element_bytes) const;
};

// The operands of a product in the order A, B, C.
inline void make_operands(bool trans_a, bool trans_b, bool stage_a, bool stage_b, bool stage_c, Operand ops[3]) {
  ops[0] = {trans_a, stage_a, 0, 2};
  ops[1] = {trans_b, stage_b, 2, 1};
  ops[2] = {false, stage_c, 0, 1};
}

struct Plan {
  int dim = -1;         // 0 = M, 1 = N, 2 = K; -1: nothing fits the budget (run unstaged)
  int64_t len = 0;      // chunk length along dim (the last chunk may be shorter)
  int64_t chunks = 0;
  bool f32_sums = false;  // bf16 chunks along K add up in an fp32 [M, N] buffer (C rounded once)
  size_t offset[3] = {0, 0, 0};  // of each staged operand's region
  size_t f32_offset = 0;
  size_t bytes = 0;     // the staging buffer needed
};

// Chooses within `budget` bytes: first a dim that leaves every chunk's N a multiple of 16 bytes
// but the last (cutting N itself when N is not: an output row length off 16 bytes keeps cuBLAS on
// slow kernels even at an aligned ldc), then one whose chunks still make products of at least
// 2^21 outputs (a wave of 128 x 128 tiles on a large GPU), then the fewest chunks; chunks are
// multiples of 16 so the unstaged operands' sub-blocks stay 16-byte aligned; ties go to M, then
// N, then K. Products narrower than fp32 (bf16) cut along K add up in fp32, which takes a C
// written whole (beta 0, ldc == N, unstaged, N * 4 a multiple of 16); otherwise K is cut only when
// it goes whole.
Plan plan(int64_t M, int64_t N, int64_t K, size_t element_bytes, const Operand ops[3], float beta, int64_t ldc,
          size_t budget);

}  // namespace cohort::kernels::cuda::staging
