// Tensor-core attention (FlashAttention-2 style: Dao 2023, alg. 1 forward, alg. 2 backward
// without atomics), the block bodies of three kernels over the fused qkv buffer of
// kernels/cuda/attention.h. Never materialises a T x T matrix: scores live in registers.
//   forward_block: 64 queries per block, 4 warps of 16 rows; K/V tiles of kBc keys stream
//     through two shared-memory stages (cp.async, the next tile loads while this one computes);
//     S = Q K^T and O += P V on mma.sync, online softmax in the accumulators' registers.
//   dq_block (attention_flash_backward.cuh, as dkv_block): 64 queries per block; per key tile
//     S, dP = dO V^T, dS = P (dP - delta), dQ += dS K. dkv_block: 64 keys per block; per query
//     tile S^T, dP^T, dV += P^T dO, dK += dS^T Q. One writer per output element, so the
//     backward is deterministic (the price: S and dP are computed by both kernels, 7 products
//     instead of FlashAttention-2's 5).
// Storage fp32 -> TF32 products (mma m16n8k8: inputs rounded to nearest with a 10-bit mantissa,
// see to_tf32; fp32 accumulation), the same precision as the fp32 training step's cuBLAS GEMMs
// when TF32 is allowed (the caller decides: attention.cu uses this path for fp32 only then).
// Storage bf16 -> mma m16n8k16 bf16 (P and dS rounded to bf16 for the second products). Layout
// tricks, both free of shuffles:
// - P (an accumulator, lane 4g+t holding columns 2t, 2t+1) feeds the next mma as its A operand.
//   bf16: two accumulator tiles are exactly one A fragment. TF32: the k index of the second
//   product is permuted (k = t <-> column 2t, k = t+4 <-> column 2t+1), and the B operand reads
//   rows 2t and 2t+1 of the V/K/Q/dO tile to match.
// - That B operand (rows 2t, 2t+1; TF32) is read as float4 over 4 output n-tiles, so output
//   column d of n-tile 4q+r, lane column n, is 32q + 4n + r (store_rows undoes it; each lane
//   then owns 8 consecutive floats of a row).
// Shared-memory rows are padded by 16 bytes (pitch = D*size + 16), which makes every ldmatrix
// (8 rows of 16 bytes) and every float4 read of rows 2t, 2t+1 free of bank conflicts.
// Occupancy on an H100 (227 KB of shared memory and 64K registers an SM, 128 threads a block);
// registers from ptxas for sm_90 (-Xptxas -v, no spills anywhere), capped by __launch_bounds__
// at kMinBlocks; blocks an SM = min(by shared memory, by registers):
//   kernel   type  D    tiles           smem KB  regs  blocks/SM
//   forward  fp32  64   Br 64, Bc 64    68       228   2  (3 would spill)
//   forward  fp32  128  Br 64, Bc 32    66       252   2
//   forward  bf16  64   Br 64, Bc 64    36       167   3
//   forward  bf16  128  Br 64, Bc 64    68       245   2
//   dq       fp32  64   Br 64, Bc 32    68       144   3
//   dq       fp32  128  Br 64, Bc 32 x1 99       206   2
//   dq       bf16  64   Br 64, Bc 32    36       144   3
//   dq       bf16  128  Br 64, Bc 32    68       216   2
//   dkv      fp32  64   Bc 64, Br 32    68.5     166   3
//   dkv      fp32  128  Bc 64, Br 32 x1 99.3     254   2
//   dkv      bf16  64   Bc 64, Br 32    36.5     168   3
//   dkv      bf16  128  Bc 64, Br 32    68.5     253   2
// (x1: one shared-memory stage, the next tile loads after the barrier; else two.) With 8-12
// warps an SM, latency is covered by independent work inside a warp (8-16 accumulator tiles,
// each its own mma chain, per k step) and by the other blocks while one waits at a barrier.
// Shared memory: an ldmatrix.x4 (or two LDS.128), 512 bytes a warp, feeds two mmas, and every
// access pattern is conflict-free, so the 128 B a clock of an SM bound ~0.5 mma (1024 TF32
// flops) a clock: ~230 TFLOP/s on 132 SMs at 1.75 GHz, above what mma.sync TF32 reaches.
// The kernels need 16-byte aligned tensors, D 64 or 128, and at least one key per row (always
// true: key 0 is visible to every query).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#ifndef COHORT_WARP_FN
#error "include kernels/cuda/attention_mma.cuh (or the host emulation) before attention_flash.cuh"
#endif

namespace cohort::kernels::cuda::detail::flash {

namespace wp = cohort::kernels::cuda::detail::mma;
using bf16_t = __nv_bfloat16;

constexpr int kThreads = 128;  // 4 warps; each warp owns 16 rows of the block's tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct ForwardArgs {
  const void* qkv;  // [B, T, 3C]
  void* out;        // [B, T, C]
  float* lse;       // [B, H, T], natural log
  int T, H, C;
  float scale_log2;  // scale * log2(e)
  bool causal;
};

struct BackwardArgs {
  const void* qkv;     // [B, T, 3C]
  const void* dout;    // [B, T, C]
  const float* lse;    // [B, H, T] from the forward
  const float* delta;  // [B, H, T] = rowsum(dO * O)
  void* dqkv;          // [B, T, 3C]; dq_block writes the q third, dkv_block the k and v thirds
  int T, H, C;
  float scale, scale_log2;
  bool causal;
};

COHORT_WARP_FN int imin(int a, int b) { return a < b ? a : b; }

// Per storage type: the mma shape and the conversion of raw fragment registers.
template <typename T>
struct Mma;
template <>
struct Mma<float> {
  static constexpr int kK = 8;    // reduction length of one mma (m16n8k8 TF32)
  static constexpr int kVec = 4;  // elements in 16 bytes (half of kK)
  static COHORT_WARP_FN void fix(uint32_t (&r)[4]) {
    COHORT_UNROLL
    for (int i = 0; i < 4; ++i) r[i] = wp::to_tf32(wp::bits_to_float(r[i]));
  }
  static COHORT_WARP_FN void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    wp::mma_tf32(d, a, b0, b1);
  }
};
template <>
struct Mma<bf16_t> {
  static constexpr int kK = 16;  // m16n8k16 bf16
  static constexpr int kVec = 8;
  static COHORT_WARP_FN void fix(uint32_t (&)[4]) {}
  static COHORT_WARP_FN void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    wp::mma_bf16(d, a, b0, b1);
  }
};

// A shared-memory tile of rows of D elements, each row padded by 16 bytes.
template <typename T, int D>
struct Tile {
  static_assert(D == 64 || D == 128, "tensor-core attention: head size 64 or 128");
  static constexpr int kPitch = D + 16 / static_cast<int>(sizeof(T));
  static constexpr int kChunks = D * static_cast<int>(sizeof(T)) / 16;  // 16-byte chunks a row
};

// Issues cp.async of rows [row0, row0 + R) of one head into `tile` (R x kPitch); `src` is the
// head's row 0, `ld` elements apart; rows >= rows_total become zeros.
template <typename T, int D, int R>
COHORT_WARP_FN void load_tile(T* tile, const T* src, int64_t ld, int row0, int rows_total,
                              int tid) {
  using G = Tile<T, D>;
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));
  static_assert((R * G::kChunks) % kThreads == 0, "a tile's chunks must divide over the block");
  COHORT_UNROLL
  for (int i = 0; i < R * G::kChunks / kThreads; ++i) {
    const int idx = tid + i * kThreads, r = idx / G::kChunks, c = idx - r * G::kChunks;
    const bool valid = row0 + r < rows_total;
    const T* from = src + (valid ? static_cast<int64_t>(row0 + r) * ld : 0) + c * kPer;
    wp::cp_async16(tile + r * G::kPitch + c * kPer, from, valid);
  }
}

// A fragment of rows [row0, row0 + 16), columns [k0, k0 + kK) of a tile.
template <typename T, int D>
COHORT_WARP_FN void load_a(uint32_t (&a)[4], const T* tile, int row0, int k0, int lane) {
  wp::ldmatrix_x4(
      a, tile + (row0 + (lane & 15)) * Tile<T, D>::kPitch + k0 + (lane >> 4) * Mma<T>::kVec);
  Mma<T>::fix(a);
}

// B fragments of B(k, n) = tile[n][k] for n-tiles [n0, n0 + 8) (b[0], b[1]) and
// [n0 + 8, n0 + 16) (b[2], b[3]), columns [k0, k0 + kK).
template <typename T, int D>
COHORT_WARP_FN void load_b_rows(uint32_t (&b)[4], const T* tile, int n0, int k0, int lane) {
  wp::ldmatrix_x4(b, tile + (n0 + (lane & 7) + ((lane >> 4) << 3)) * Tile<T, D>::kPitch + k0 +
                         ((lane >> 3) & 1) * Mma<T>::kVec);
  Mma<T>::fix(b);
}

// acc (16 x N) += A B^T: A rows [a_row0, a_row0 + 16) of a_tile, B rows [0, N) of b_tile,
// both D wide. acc[n] is the n-th 8-column tile; lane 4g+t holds columns 8n + 2t, 8n + 2t + 1.
template <typename T, int D, int N>
COHORT_WARP_FN void gemm_abt(float (&acc)[N / 8][4], const T* a_tile, int a_row0, const T* b_tile,
                             int lane) {
  COHORT_UNROLL
  for (int k0 = 0; k0 < D; k0 += Mma<T>::kK) {
    uint32_t a[4];
    load_a<T, D>(a, a_tile, a_row0, k0, lane);
    COHORT_UNROLL
    for (int n = 0; n < N / 16; ++n) {
      uint32_t b[4];
      load_b_rows<T, D>(b, b_tile, 16 * n, k0, lane);
      Mma<T>::run(acc[2 * n], a, b[0], b[1]);
      Mma<T>::run(acc[2 * n + 1], a, b[2], b[3]);
    }
  }
}

// The same with A already in registers (the forward's Q, one fragment per k step).
template <typename T, int D, int N>
COHORT_WARP_FN void gemm_abt(float (&acc)[N / 8][4], const uint32_t (&a)[D / Mma<T>::kK][4],
                             const T* b_tile, int lane) {
  COHORT_UNROLL
  for (int s = 0; s < D / Mma<T>::kK; ++s) {
    COHORT_UNROLL
    for (int n = 0; n < N / 16; ++n) {
      uint32_t b[4];
      load_b_rows<T, D>(b, b_tile, 16 * n, s * Mma<T>::kK, lane);
      Mma<T>::run(acc[2 * n], a[s], b[0], b[1]);
      Mma<T>::run(acc[2 * n + 1], a[s], b[2], b[3]);
    }
  }
}

// acc (16 x D) += P B: P (16 x N) in accumulator layout (as gemm_abt leaves it), B rows [0, N)
// of a tile D wide. TF32: acc column mapping as in the header (n-tile 4q+r, lane column n ->
// d = 32q + 4n + r).
template <int D, int N>
COHORT_WARP_FN void gemm_pb(float (&acc)[D / 8][4], const float (&p)[N / 8][4], const float* tile,
                            int lane) {
  constexpr int P = Tile<float, D>::kPitch;
  const int g = lane >> 2, t = lane & 3;
  COHORT_UNROLL
  for (int kk = 0; kk < N / 8; ++kk) {
    const uint32_t a[4] = {wp::to_tf32(p[kk][0]), wp::to_tf32(p[kk][2]), wp::to_tf32(p[kk][1]),
                           wp::to_tf32(p[kk][3])};
    const float* row = tile + (8 * kk + 2 * t) * P + 4 * g;
    COHORT_UNROLL
    for (int q = 0; q < D / 32; ++q) {
      const float4 v0 = wp::lds128(row + 32 * q), v1 = wp::lds128(row + P + 32 * q);
      Mma<float>::run(acc[4 * q + 0], a, wp::to_tf32(v0.x), wp::to_tf32(v1.x));
      Mma<float>::run(acc[4 * q + 1], a, wp::to_tf32(v0.y), wp::to_tf32(v1.y));
      Mma<float>::run(acc[4 * q + 2], a, wp::to_tf32(v0.z), wp::to_tf32(v1.z));
      Mma<float>::run(acc[4 * q + 3], a, wp::to_tf32(v0.w), wp::to_tf32(v1.w));
    }
  }
}
// bf16: two accumulator tiles form one A fragment; B through ldmatrix.trans (natural columns).
template <int D, int N>
COHORT_WARP_FN void gemm_pb(float (&acc)[D / 8][4], const float (&p)[N / 8][4], const bf16_t* tile,
                            int lane) {
  constexpr int P = Tile<bf16_t, D>::kPitch;
  COHORT_UNROLL
  for (int kk = 0; kk < N / 16; ++kk) {
    const uint32_t a[4] = {wp::pack_bf16(p[2 * kk][0], p[2 * kk][1]),
                           wp::pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                           wp::pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                           wp::pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
    const bf16_t* rows =
        tile + (16 * kk + (lane & 7) + (((lane >> 3) & 1) << 3)) * P + ((lane >> 4) << 3);
    COHORT_UNROLL
    for (int n = 0; n < D / 16; ++n) {
      uint32_t b[4];
      wp::ldmatrix_x4_trans(b, rows + 16 * n);
      Mma<bf16_t>::run(acc[2 * n], a, b[0], b[1]);
      Mma<bf16_t>::run(acc[2 * n + 1], a, b[2], b[3]);
    }
  }
}

// Writes a warp's 16 x D accumulator (gemm_pb layout) times mul_lo / mul_hi to the rows lo
// (accumulator row g) and hi (row g + 8); a null row is skipped (past T).
template <int D>
COHORT_WARP_FN void store_rows(float* lo, float* hi, const float (&acc)[D / 8][4], float mul_lo,
                               float mul_hi, int lane) {
  const int t = lane & 3;
  COHORT_UNROLL
  for (int q = 0; q < D / 32; ++q) {
    const float(&x0)[4] = acc[4 * q];
    const float(&x1)[4] = acc[4 * q + 1];
    const float(&x2)[4] = acc[4 * q + 2];
    const float(&x3)[4] = acc[4 * q + 3];
    if (lo) {
      wp::stg128(lo + 32 * q + 8 * t,
                 float4{x0[0] * mul_lo, x1[0] * mul_lo, x2[0] * mul_lo, x3[0] * mul_lo});
      wp::stg128(lo + 32 * q + 8 * t + 4,
                 float4{x0[1] * mul_lo, x1[1] * mul_lo, x2[1] * mul_lo, x3[1] * mul_lo});
    }
    if (hi) {
      wp::stg128(hi + 32 * q + 8 * t,
                 float4{x0[2] * mul_hi, x1[2] * mul_hi, x2[2] * mul_hi, x3[2] * mul_hi});
      wp::stg128(hi + 32 * q + 8 * t + 4,
                 float4{x0[3] * mul_hi, x1[3] * mul_hi, x2[3] * mul_hi, x3[3] * mul_hi});
    }
  }
}
template <int D>
COHORT_WARP_FN void store_rows(bf16_t* lo, bf16_t* hi, const float (&acc)[D / 8][4], float mul_lo,
                               float mul_hi, int lane) {
  const int t = lane & 3;
  COHORT_UNROLL
  for (int n = 0; n < D / 8; ++n) {
    if (lo) wp::stg32(lo + 8 * n + 2 * t, wp::pack_bf16(acc[n][0] * mul_lo, acc[n][1] * mul_lo));
    if (hi) wp::stg32(hi + 8 * n + 2 * t, wp::pack_bf16(acc[n][2] * mul_hi, acc[n][3] * mul_hi));
  }
}

// Row r of a [rows, ld] tensor at column offset col, or null past `rows`.
template <typename T>
COHORT_WARP_FN T* row_or_null(T* base, int64_t ld, int r, int rows, int col) {
  return r < rows ? base + static_cast<int64_t>(r) * ld + col : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Forward.
template <typename T, int D>
struct ForwardConfig {
  static constexpr int kBr = 64;                                    // queries a block
  static constexpr int kBc = sizeof(T) == 4 && D == 128 ? 32 : 64;  // keys a tile
  static constexpr int kPitch = Tile<T, D>::kPitch;
  static constexpr int kStage = 2 * kBc * kPitch;  // K rows, then V rows
  static constexpr int kSmemBytes = 2 * kStage * static_cast<int>(sizeof(T));
  // For __launch_bounds__: fp32 D64 needs ~230 registers without spilling (2 blocks an SM).
  static constexpr int kMinBlocks = D == 128 || sizeof(T) == 4 ? 2 : 3;
  static_assert(kBr <= 2 * kBc, "the Q tile borrows stage 1");
  static int tiles(int T_) { return (T_ + kBr - 1) / kBr; }
};

// Online softmax over one tile of scores s (scaled here by scale_log2 into log2 units), for the
// lane's two rows (row_lo and row_lo + 8): running max m, lane-partial sums l, output rows o
// rescaled; on return s holds the unnormalised probabilities 2^(x - m). Masked scores (key past
// T, or after the row with `causal`) count as -inf; col0 is the key of s[0][0].
template <int N, int D>
COHORT_WARP_FN void softmax_update(float (&s)[N / 8][4], float (&m)[2], float (&l)[2],
                                   float (&o)[D / 8][4], float scale_log2, bool mask, int row_lo,
                                   int col0, int T, bool causal) {
  float mx[2] = {-INFINITY, -INFINITY};
  COHORT_UNROLL
  for (int n = 0; n < N / 8; ++n) {
    COHORT_UNROLL
    for (int c = 0; c < 4; ++c) {
      float x = s[n][c] * scale_log2;
      if (mask) {
        const int col = col0 + 8 * n + (c & 1), row = row_lo + 8 * (c >> 1);
        if (col >= T || (causal && col > row)) x = -INFINITY;
      }
      s[n][c] = x;
      mx[c >> 1] = fmaxf(mx[c >> 1], x);
    }
  }
  COHORT_UNROLL
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(m[r], wp::quad_max(mx[r]));
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet stays at 0
    const float corr = wp::exp2_approx(m[r] - base);
    m[r] = m_new;
    mx[r] = base;
    l[r] *= corr;
    COHORT_UNROLL
    for (int n = 0; n < D / 8; ++n) {
      o[n][2 * r] *= corr;
      o[n][2 * r + 1] *= corr;
    }
  }
  COHORT_UNROLL
  for (int n = 0; n < N / 8; ++n) {
    COHORT_UNROLL
    for (int c = 0; c < 4; ++c) {
      const float p = wp::exp2_approx(s[n][c] - mx[c >> 1]);
      s[n][c] = p;
      l[c >> 1] += p;
    }
  }
}

// One block: queries [tile * 64, tile * 64 + 64) of head bh = b * H + h.
template <typename T, int D>
COHORT_WARP_FN void forward_block(const ForwardArgs& a, int bh, int tile, int tid, T* smem) {
  using Cfg = ForwardConfig<T, D>;
  using M = Mma<T>;
  constexpr int kBr = Cfg::kBr, kBc = Cfg::kBc, P = Cfg::kPitch;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int b = bh / a.H, h = bh - b * a.H;
  const int64_t ld = 3 * static_cast<int64_t>(a.C);
  const T* q = static_cast<const T*>(a.qkv) + static_cast<int64_t>(b) * a.T * ld +
               static_cast<int64_t>(h) * D;
  const T* k = q + a.C;
  const T* v = q + 2 * a.C;
  const int i0 = tile * kBr;
  const int keys = a.causal ? imin(i0 + kBr, a.T) : a.T;  // keys [0, keys) matter to the block
  const int n_tiles = (keys + kBc - 1) / kBc;

  // Q waits in stage 1 (free until tile 1) and goes to registers; tile 0 into stage 0.
  load_tile<T, D, kBr>(smem + Cfg::kStage, q, ld, i0, a.T, tid);
  wp::cp_async_commit();
  load_tile<T, D, kBc>(smem, k, ld, 0, a.T, tid);
  load_tile<T, D, kBc>(smem + kBc * P, v, ld, 0, a.T, tid);
  wp::cp_async_commit();
  wp::cp_async_wait<1>();
  wp::block_sync();
  uint32_t qa[D / M::kK][4];
  COHORT_UNROLL
  for (int s = 0; s < D / M::kK; ++s)
    load_a<T, D>(qa[s], smem + Cfg::kStage, 16 * warp, s * M::kK, lane);
  wp::block_sync();

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int row_lo = i0 + 16 * warp + g;
  for (int j = 0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) {  // stage (j+1)&1 was last read in iteration j-1, before its barrier
      T* next = smem + ((j + 1) & 1) * Cfg::kStage;
      load_tile<T, D, kBc>(next, k, ld, (j + 1) * kBc, a.T, tid);
      load_tile<T, D, kBc>(next + kBc * P, v, ld, (j + 1) * kBc, a.T, tid);
    }
    wp::cp_async_commit();  // possibly empty: keeps one group per iteration
    wp::cp_async_wait<1>();
    wp::block_sync();
    const T* sk = smem + (j & 1) * Cfg::kStage;
    const int j0 = j * kBc;
    if (!a.causal || j0 <= i0 + 16 * warp + 15) {  // else every key of the tile is after every row
      float s[kBc / 8][4] = {};
      gemm_abt<T, D, kBc>(s, qa, sk, lane);
      const bool mask = (a.causal && j0 + kBc - 1 > i0) || j0 + kBc > a.T;
      softmax_update<kBc, D>(s, m, l, o, a.scale_log2, mask, row_lo, j0 + 2 * t, a.T, a.causal);
      gemm_pb<D, kBc>(o, s, sk + kBc * P, lane);
    }
    wp::block_sync();
  }

  float inv[2];
  COHORT_UNROLL
  for (int r = 0; r < 2; ++r) {
    const float sum = wp::quad_sum(l[r]);  // > 0: key 0 is in every row's first tile
    inv[r] = 1.0f / sum;
    const int row = row_lo + 8 * r;
    if (t == 0 && row < a.T)
      wp::stg(a.lse + static_cast<int64_t>(bh) * a.T + row, (m[r] + log2f(sum)) * kLn2);
  }
  T* out = static_cast<T*>(a.out) + static_cast<int64_t>(b) * a.T * a.C;
  store_rows<D>(row_or_null(out, a.C, row_lo, a.T, h * D),
                row_or_null(out, a.C, row_lo + 8, a.T, h * D), o, inv[0], inv[1], lane);
}

}  // namespace cohort::kernels::cuda::detail::flash
