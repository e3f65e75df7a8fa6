// The backward block bodies of the tensor-core attention (see attention_flash.cuh for the
// design, the layouts and the occupancy table): dq_block (64 queries a block, a pass over the
// key tiles) and dkv_block (64 keys a block, a pass over the query tiles), FlashAttention-2's
// alg. 2 split in two so that every output element has one writer (no atomics, deterministic).
// Both recompute P from the forward's lse and take delta = rowsum(dO * O) from the caller.
#pragma once

#include "kernels/cuda/attention_flash.cuh"

namespace cohort::kernels::cuda::detail::flash {

// Backward, dQ: 64 queries a block, key tiles of kBc.
template <typename T, int D>
struct DqConfig {
  static constexpr int kBr = 64;
  static constexpr int kBc = 32;
  static constexpr int kStages = sizeof(T) == 4 && D == 128 ? 1 : 2;
  static constexpr int kPitch = Tile<T, D>::kPitch;
  static constexpr int kStage = 2 * kBc * kPitch;  // K rows, then V rows
  static constexpr int kSmemBytes =
      (2 * kBr * kPitch + kStages * kStage) * static_cast<int>(sizeof(T));
  static constexpr int kMinBlocks = D == 128 ? 2 : 3;
  static int tiles(int T_) { return (T_ + kBr - 1) / kBr; }
};

template <typename T, int D>
COHORT_WARP_FN void dq_block(const BackwardArgs& a, int bh, int tile, int tid, T* smem) {
  using Cfg = DqConfig<T, D>;
  constexpr int kBr = Cfg::kBr, kBc = Cfg::kBc, P = Cfg::kPitch;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int b = bh / a.H, h = bh - b * a.H;
  const int64_t ld = 3 * static_cast<int64_t>(a.C);
  const T* q = static_cast<const T*>(a.qkv) + static_cast<int64_t>(b) * a.T * ld +
               static_cast<int64_t>(h) * D;
  const T* k = q + a.C;
  const T* v = q + 2 * a.C;
  const T* dout = static_cast<const T*>(a.dout) + static_cast<int64_t>(b) * a.T * a.C +
                  static_cast<int64_t>(h) * D;
  const int i0 = tile * kBr;
  const int keys = a.causal ? imin(i0 + kBr, a.T) : a.T;
  const int n_tiles = (keys + kBc - 1) / kBc;
  T* sq = smem;
  T* sg = smem + kBr * P;
  T* stages = smem + 2 * kBr * P;

  load_tile<T, D, kBr>(sq, q, ld, i0, a.T, tid);
  load_tile<T, D, kBr>(sg, dout, a.C, i0, a.T, tid);
  wp::cp_async_commit();
  load_tile<T, D, kBc>(stages, k, ld, 0, a.T, tid);
  load_tile<T, D, kBc>(stages + kBc * P, v, ld, 0, a.T, tid);
  wp::cp_async_commit();

  const int row_lo = i0 + 16 * warp + g;
  float lse2[2], dl[2];  // the lane's two rows: lse in log2 units, delta
  COHORT_UNROLL
  for (int r = 0; r < 2; ++r) {
    const int row = row_lo + 8 * r;
    const int64_t at = static_cast<int64_t>(bh) * a.T + row;
    lse2[r] = row < a.T ? wp::ldg(a.lse + at) * kLog2e : 0.0f;
    dl[r] = row < a.T ? wp::ldg(a.delta + at) : 0.0f;
  }
  float dq[D / 8][4] = {};
  for (int j = 0; j < n_tiles; ++j) {
    if (Cfg::kStages == 2) {
      if (j + 1 < n_tiles) {
        T* next = stages + ((j + 1) & 1) * Cfg::kStage;
        load_tile<T, D, kBc>(next, k, ld, (j + 1) * kBc, a.T, tid);
        load_tile<T, D, kBc>(next + kBc * P, v, ld, (j + 1) * kBc, a.T, tid);
      }
      wp::cp_async_commit();
      wp::cp_async_wait<1>();
    } else {
      wp::cp_async_wait<0>();
    }
    wp::block_sync();
    const T* sk = stages + (Cfg::kStages == 2 ? (j & 1) * Cfg::kStage : 0);
    const int j0 = j * kBc;
    if (!a.causal || j0 <= i0 + 16 * warp + 15) {
      float s[kBc / 8][4] = {}, dp[kBc / 8][4] = {};
      gemm_abt<T, D, kBc>(s, sq, 16 * warp, sk, lane);
      gemm_abt<T, D, kBc>(dp, sg, 16 * warp, sk + kBc * P, lane);
      const bool mask = (a.causal && j0 + kBc - 1 > i0) || j0 + kBc > a.T;
      COHORT_UNROLL
      for (int n = 0; n < kBc / 8; ++n) {
        COHORT_UNROLL
        for (int c = 0; c < 4; ++c) {
          const int r = c >> 1;
          float p = wp::exp2_approx(s[n][c] * a.scale_log2 - lse2[r]);
          if (mask) {
            const int col = j0 + 8 * n + 2 * t + (c & 1), row = row_lo + 8 * r;
            if (col >= a.T || (a.causal && col > row)) p = 0.0f;
          }
          s[n][c] = p * (dp[n][c] - dl[r]);  // dS
        }
      }
      gemm_pb<D, kBc>(dq, s, sk, lane);
    }
    wp::block_sync();
    if (Cfg::kStages == 1 && j + 1 < n_tiles) {
      load_tile<T, D, kBc>(stages, k, ld, (j + 1) * kBc, a.T, tid);
      load_tile<T, D, kBc>(stages + kBc * P, v, ld, (j + 1) * kBc, a.T, tid);
      wp::cp_async_commit();
    }
  }
  T* dqkv = static_cast<T*>(a.dqkv) + static_cast<int64_t>(b) * a.T * ld;
  store_rows<D>(row_or_null(dqkv, ld, row_lo, a.T, h * D),
                row_or_null(dqkv, ld, row_lo + 8, a.T, h * D), dq, a.scale, a.scale, lane);
}

// ---------------------------------------------------------------------------------------------
// Backward, dK and dV: 64 keys a block, query tiles of kBr (with their lse and delta).
template <typename T, int D>
struct DkvConfig {
  static constexpr int kBc = 64;
  static constexpr int kBr = 32;
  static constexpr int kStages = sizeof(T) == 4 && D == 128 ? 1 : 2;
  static constexpr int kPitch = Tile<T, D>::kPitch;
  // A stage: Q rows, dO rows (kBr x kPitch of T each), then lse and delta (kBr floats each).
  static constexpr int kStageBytes = 2 * kBr * kPitch * static_cast<int>(sizeof(T)) + 8 * kBr;
  static constexpr int kSmemBytes =
      2 * kBc * kPitch * static_cast<int>(sizeof(T)) + kStages * kStageBytes;
  static constexpr int kMinBlocks = D == 128 ? 2 : 3;
  static_assert(2 * kBr <= kThreads, "one thread per lse / delta element");
  static int tiles(int T_) { return (T_ + kBc - 1) / kBc; }
};

// Issues the loads of query tile [q0, q0 + kBr) into a dkv stage.
template <typename T, int D>
COHORT_WARP_FN void load_query_stage(unsigned char* stage, const BackwardArgs& a, const T* q,
                                     const T* dout, int64_t ld, int bh, int q0, int tid) {
  using Cfg = DkvConfig<T, D>;
  constexpr int kBr = Cfg::kBr, P = Cfg::kPitch;
  T* sq = reinterpret_cast<T*>(stage);
  load_tile<T, D, kBr>(sq, q, ld, q0, a.T, tid);
  load_tile<T, D, kBr>(sq + kBr * P, dout, a.C, q0, a.T, tid);
  float* stats = reinterpret_cast<float*>(sq + 2 * kBr * P);  // lse [kBr], then delta [kBr]
  if (tid < 2 * kBr) {
    const int i = tid < kBr ? tid : tid - kBr;
    const float* src = (tid < kBr ? a.lse : a.delta) + static_cast<int64_t>(bh) * a.T;
    const bool valid = q0 + i < a.T;
    wp::cp_async4(stats + tid, src + (valid ? q0 + i : 0), valid);
  }
}

template <typename T, int D>
COHORT_WARP_FN void dkv_block(const BackwardArgs& a, int bh, int tile, int tid, T* smem) {
  using Cfg = DkvConfig<T, D>;
  constexpr int kBr = Cfg::kBr, kBc = Cfg::kBc, P = Cfg::kPitch;
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int b = bh / a.H, h = bh - b * a.H;
  const int64_t ld = 3 * static_cast<int64_t>(a.C);
  const T* q = static_cast<const T*>(a.qkv) + static_cast<int64_t>(b) * a.T * ld +
               static_cast<int64_t>(h) * D;
  const T* k = q + a.C;
  const T* v = q + 2 * a.C;
  const T* dout = static_cast<const T*>(a.dout) + static_cast<int64_t>(b) * a.T * a.C +
                  static_cast<int64_t>(h) * D;
  const int j0 = tile * kBc;
  const int q_first = a.causal ? j0 / kBr : 0;  // causal: queries before j0 see no key here
  const int n_tiles = (a.T + kBr - 1) / kBr - q_first;
  T* sk = smem;
  T* sv = smem + kBc * P;
  unsigned char* stages = reinterpret_cast<unsigned char*>(smem + 2 * kBc * P);

  load_tile<T, D, kBc>(sk, k, ld, j0, a.T, tid);
  load_tile<T, D, kBc>(sv, v, ld, j0, a.T, tid);
  wp::cp_async_commit();
  load_query_stage<T, D>(stages, a, q, dout, ld, bh, q_first * kBr, tid);
  wp::cp_async_commit();

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const int key_lo = j0 + 16 * warp + g;  // keys of accumulator rows g and g + 8
  for (int j = 0; j < n_tiles; ++j) {
    const int q0 = (q_first + j) * kBr;
    if (Cfg::kStages == 2) {
      if (j + 1 < n_tiles)
        load_query_stage<T, D>(stages + ((j + 1) & 1) * Cfg::kStageBytes, a, q, dout, ld, bh,
                               q0 + kBr, tid);
      wp::cp_async_commit();
      wp::cp_async_wait<1>();
    } else {
      wp::cp_async_wait<0>();
    }
    wp::block_sync();
    const T* sq =
        reinterpret_cast<const T*>(stages + (Cfg::kStages == 2 ? (j & 1) * Cfg::kStageBytes : 0));
    const T* sg = sq + kBr * P;
    const float* sl = reinterpret_cast<const float*>(sg + kBr * P);
    const float* sd = sl + kBr;
    if (!a.causal || q0 + kBr - 1 >= j0 + 16 * warp) {  // else every query is before every key
      float st[kBr / 8][4] = {}, dpt[kBr / 8][4] = {};  // S^T and dP^T: keys x queries
      gemm_abt<T, D, kBr>(st, sk, 16 * warp, sq, lane);
      gemm_abt<T, D, kBr>(dpt, sv, 16 * warp, sg, lane);
      const bool mask = (a.causal && q0 < j0 + kBc - 1) || q0 + kBr > a.T;
      COHORT_UNROLL
      for (int n = 0; n < kBr / 8; ++n) {
        const float2 lse = wp::lds64(sl + 8 * n + 2 * t), dl = wp::lds64(sd + 8 * n + 2 * t);
        COHORT_UNROLL
        for (int c = 0; c < 4; ++c) {
          const float lse_c = (c & 1) ? lse.y : lse.x, dl_c = (c & 1) ? dl.y : dl.x;
          float p = wp::exp2_approx(st[n][c] * a.scale_log2 - lse_c * kLog2e);
          if (mask) {
            const int col = q0 + 8 * n + 2 * t + (c & 1), row = key_lo + 8 * (c >> 1);
            if (col >= a.T || (a.causal && col < row)) p = 0.0f;
          }
          st[n][c] = p;
          dpt[n][c] = p * (dpt[n][c] - dl_c);  // dS^T
        }
      }
      gemm_pb<D, kBr>(dv, st, sg, lane);
      gemm_pb<D, kBr>(dk, dpt, sq, lane);
    }
    wp::block_sync();
    if (Cfg::kStages == 1 && j + 1 < n_tiles) {
      load_query_stage<T, D>(stages, a, q, dout, ld, bh, q0 + kBr, tid);
      wp::cp_async_commit();
    }
  }
  T* dqkv = static_cast<T*>(a.dqkv) + static_cast<int64_t>(b) * a.T * ld;
  store_rows<D>(row_or_null(dqkv, ld, key_lo, a.T, a.C + h * D),
                row_or_null(dqkv, ld, key_lo + 8, a.T, a.C + h * D), dk, a.scale, a.scale, lane);
  store_rows<D>(row_or_null(dqkv, ld, key_lo, a.T, 2 * a.C + h * D),
                row_or_null(dqkv, ld, key_lo + 8, a.T, 2 * a.C + h * D), dv, 1.0f, 1.0f, lane);
}

}  // namespace cohort::kernels::cuda::detail::flash
