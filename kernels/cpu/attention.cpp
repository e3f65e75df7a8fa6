// Causal / full multi-head self-attention on CPU, forward and backward.
//
// Layout. oneDNN runs its fast (brgemm) matmul kernels only on dense operands: a matrix read
// through a leading dimension, as the heads interleaved in a [T, 3C] qkv row are, falls back to
// a plain gemm at 0.5-0.8x the speed. So, one group of batch elements at a time (as many as fit
// in about half of L2), q, k, v (and in backward dO) are copied into head-major panels cut in
// blocks of kRows tokens: block i of a panel is a dense [pairs, m_i, D] array over the group's
// (element, head) pairs (m_i = kRows except for a shorter last block). Every product is then
// between dense blocks, batched over the pairs, and the group's panels stay in cache.
//
// Tiles. Query block i sees key blocks j <= i when causal (all j otherwise); the scores of the
// pair (i, j) are a dense tile [pairs, m_i, m_j]. Tiles above the diagonal are never computed, so a
// causal layer does (nb + 1) / (2 nb) of the full products for nb blocks; only the diagonal
// tile is masked inside. A row of scores is the concatenation of its tiles: the softmax runs
// over the segments. Workspace: the panels and one block row of tiles (H x kRows x T floats,
// two of them in backward), never B x H x T x T.
//
//   forward  (Vaswani et al. 2017, eq. 1): S = scale Q K^T, P = softmax(S) row-wise (keys j > i
//            masked when causal), O = P V; lse_i = log sum_j exp(S_ij) is saved.
//   backward (Dao et al. 2022, FlashAttention, Alg. 4): P = exp(S - lse) recomputed,
//            dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = scale dS K,
//            dK = scale dS^T Q.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include <omp.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/vec_math.h"

namespace cohort::kernels::cpu {

namespace {

// Tokens per block: tiles of 64 x 64 keep oneDNN's kernels efficient while skipping most of
// the masked triangle (3/8 of the products at T = 128, 15/32 at T = 1024).
constexpr int64_t kRows = 64;

// Block geometry of a group of G batch elements: their G x H (element, head) pairs are the
// batch of every product.
struct Blocks {
  const AttentionDims& d;
  int64_t G;
  int64_t pairs() const { return G * d.H; }
  int64_t count() const { return (d.T + kRows - 1) / kRows; }
  int64_t rows(int64_t i) const { return std::min(kRows, d.T - i * kRows); }
  // Key blocks query block i sees: [0, last(i)].
  int64_t last(int64_t i) const { return d.causal ? i : count() - 1; }
  // Offset of block i in a panel, and of pair (g, h)'s first row in it.
  int64_t block(int64_t i) const { return i * kRows * pairs() * d.D; }
  int64_t pair(int64_t i, int64_t g, int64_t h) const { return block(i) + (g * d.H + h) * rows(i) * d.D; }
  // Offset of tile (i, j) in a block row of scores (earlier key blocks are all full).
  int64_t tile(int64_t i, int64_t j) const { return j * pairs() * rows(i) * kRows; }
};

// Batch elements per group: as many as keep a group's panels and scores within about half of
// a core's L2 (kGroupFloats), at least one. Larger groups mean fewer, larger products but
// panels that spill to L3 (measured slower on this model: 64 x 64 tiles batched over 4 heads
// already run near the speed of a 32-pair batch).
constexpr int64_t kGroupFloats = int64_t{1} << 18;
int64_t group_size(const AttentionDims& d) {
  const int64_t per_element = std::max<int64_t>(1, 7 * d.T * d.H * d.D + 2 * d.H * std::min(kRows, d.T) * d.T);
  return std::clamp<int64_t>(kGroupFloats / per_element, 1, std::max<int64_t>(1, d.B));
}

// Uninitialised float workspace (std::vector would zero it on every call).
std::unique_ptr<float[]> workspace(int64_t n) {
  return std::unique_ptr<float[]>(new float[static_cast<size_t>(n)]);
}

// Between a group's T rows of stride ld per element (element g's rows start at
// rows + g * element) and its head-major block panels: part c (of `parts`, e.g. q, k, v)
// occupies columns [c C, (c + 1) C) of a row, head h columns [h D, (h + 1) D) of its part, and
// its panel starts at panels + c * panel. kPack copies rows into panels (PanelT = float,
// RowT = const float), else panels into rows; one pass over the rows either way.
template <bool kPack, typename PanelT, typename RowT>
void copy_panels(const Blocks& k, PanelT* panels, int64_t panel, int64_t parts, RowT* rows, int64_t element,
                 int64_t ld) {
  const AttentionDims& d = k.d;
  parallel_for(k.G * d.T, true, [&](int64_t gt) {
    const int64_t g = gt / d.T, t = gt % d.T, i = t / kRows, r = t % kRows;
    RowT* row = rows + g * element + t * ld;
    for (int64_t ch = 0; ch < parts * d.H; ++ch) {
      PanelT* at = panels + (ch / d.H) * panel + k.pair(i, g, ch % d.H) + r * d.D;
      if constexpr (kPack) {
#pragma omp simd
        for (int64_t c = 0; c < d.D; ++c) at[c] = row[ch * d.D + c];
      } else {
#pragma omp simd
        for (int64_t c = 0; c < d.D; ++c) row[ch * d.D + c] = at[c];
      }
    }
  });
}
void pack(const Blocks& k, const float* rows, int64_t element, int64_t ld, int64_t parts, float* panels,
          int64_t panel) {
  copy_panels<true>(k, panels, panel, parts, rows, element, ld);
}
void unpack(const Blocks& k, const float* panels, int64_t panel, int64_t parts, float* rows, int64_t element,
            int64_t ld) {
  copy_panels<false>(k, panels, panel, parts, rows, element, ld);
}

// One row of scores, r-th of (element, head) pair p in query block i, as its tiles' segments.
struct Row {
  const Blocks& g;
  float* s;  // the block row of tiles
  int64_t i, p, r;
  int64_t segments() const { return g.last(i) + 1; }
  float* seg(int64_t j) const { return s + g.tile(i, j) + (p * g.rows(i) + r) * g.rows(j); }
  // Sets the keys after the query in the diagonal segment (masked when causal) to `value`.
  void mask(float value) const {
    if (g.d.causal) std::fill(seg(i) + r + 1, seg(i) + g.rows(i), value);
  }
};

// Softmax of one row over its unmasked keys (masked ones become 0); returns the row's
// log-sum-exp. Masked keys are set to -inf first, so every loop runs over whole segments
// (exp_approx(-inf) is exactly 0). Subtracting the max keeps exp() in range.
COHORT_VECTOR_CLONES float softmax_row(const Row& row) {
  const int64_t ns = row.segments();
  row.mask(-std::numeric_limits<float>::infinity());
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < ns; ++j) {
    const float* x = row.seg(j);
    const int64_t n = row.g.rows(j);
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < n; ++c) mx = x[c] > mx ? x[c] : mx;  // vectorises, unlike std::max
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < ns; ++j) {
    float* x = row.seg(j);
    const int64_t n = row.g.rows(j);
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < n; ++c) {
      x[c] = exp_approx(x[c] - mx);  // vectorises, unlike std::exp
      sum += x[c];
    }
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < ns; ++j) {
    float* x = row.seg(j);
    const int64_t n = row.g.rows(j);
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) x[c] *= inv;
  }
  return mx + std::log(sum);
}

// P = exp(S - lse) and dS = P * (dP - delta) over one row of the p and dp tiles, in place;
// masked keys end as exact zeros in both. delta = sum_j P_ij dP_ij is formed here from the row,
// which is in cache: it equals dO_i . O_i (O = P V, dP = dO V^T), which FlashAttention reads from
// O because it never holds a whole row, but reading O's rows from memory cost more than this pass.
COHORT_VECTOR_CLONES void dscores_row(const Row& prow, const Row& drow, float lse) {
  prow.mask(-std::numeric_limits<float>::infinity());
  float delta = 0.0f;
  for (int64_t j = 0; j < prow.segments(); ++j) {
    float* p = prow.seg(j);
    const float* dp = drow.seg(j);
    const int64_t n = prow.g.rows(j);
#pragma omp simd reduction(+ : delta)
    for (int64_t c = 0; c < n; ++c) {
      p[c] = exp_approx(p[c] - lse);  // exactly 0 where masked
      delta += p[c] * dp[c];
    }
  }
  for (int64_t j = 0; j < prow.segments(); ++j) {
    const float* p = prow.seg(j);
    float* ds = drow.seg(j);
    const int64_t n = prow.g.rows(j);
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) ds[c] = p[c] * (ds[c] - delta);
  }
  drow.mask(0.0f);
}

// Tile (i, j) of every pair: s = alpha A_i B_j^T with A_i [pairs, m_i, D], B_j [pairs, m_j, D].
void tile_nt(const Blocks& g, int64_t i, int64_t j, float alpha, const float* a, const float* b, float* s) {
  const AttentionDims& d = g.d;
  const int64_t m = g.rows(i), n = g.rows(j);
  gemm_batched(false, true, g.pairs(), m, n, d.D, alpha, a + g.block(i), d.D, m * d.D, b + g.block(j), d.D, n * d.D,
               0.0f, s + g.tile(i, j), n, m * n);
}

// Threads. A group's products are batches of small tiles (64 x 64 x 64 over a few pairs): split
// across threads inside each product, every call pays a fork and join for a few microseconds of
// work, and the second core gained 1.02-1.07x in the GPT's step. So when there are at least two
// groups, each thread takes whole groups with its own workspace, and everything inside a group
// runs on that thread (the products and loops below see omp_in_parallel() and stay serial);
// groups shrink to ceil(B / threads) elements so every thread gets one. With a single group (one
// long sequence) the threads split each product and loop instead.
template <typename Fn>
void for_each_group(const AttentionDims& d, int64_t workspace_floats_per_element, Fn&& fn) {
  const int64_t threads = loop_threads();
  const int64_t G = std::min(group_size(d), (d.B + threads - 1) / threads);
  const int64_t groups = (d.B + G - 1) / G;
  const int64_t teams = std::min(threads, groups);
  auto group = [&](int64_t gi, float* ws) { fn(Blocks{d, std::min(G, d.B - gi * G)}, gi * G, G, ws); };
  if (teams <= 1) {  // no region at all: threads.h, forks
    auto ws = workspace(G * workspace_floats_per_element);
    for (int64_t gi = 0; gi < groups; ++gi) group(gi, ws.get());
    return;
  }
#pragma omp parallel num_threads(teams)
  {
    auto ws = workspace(G * workspace_floats_per_element);
#pragma omp for schedule(static)
    for (int64_t gi = 0; gi < groups; ++gi) group(gi, ws.get());
  }
}

void forward_group(const Blocks& g, int64_t b0, int64_t G, float* ws, const float* qkv, float* out, float* lse) {
  const AttentionDims& d = g.d;
  const int64_t C = d.H * d.D, ld = 3 * C, panel = G * d.T * C;
  float *q = ws, *k = q + panel, *v = k + panel, *o = v + panel, *s = o + panel;
  const float* rows = qkv + b0 * d.T * ld;
  pack(g, rows, d.T * ld, ld, 3, q, panel);  // q, k, v
  for (int64_t i = 0; i < g.count(); ++i) {
    const int64_t m = g.rows(i), np = g.pairs();
    for (int64_t j = 0; j <= g.last(i); ++j) tile_nt(g, i, j, d.scale, q, k, s);
    parallel_for(np * m, true, [&](int64_t pr) {
      const int64_t p = pr / m, r = pr % m;
      lse[(b0 * d.H + p) * d.T + i * kRows + r] = softmax_row(Row{g, s, i, p, r});
    });
    // O_i = sum_j P_ij V_j
    for (int64_t j = 0; j <= g.last(i); ++j) {
      const int64_t n = g.rows(j);
      gemm_batched(false, false, np, m, d.D, n, 1.0f, s + g.tile(i, j), n, m * n, v + g.block(j), d.D, n * d.D,
                   j == 0 ? 0.0f : 1.0f, o + g.block(i), d.D, m * d.D);
    }
  }
  unpack(g, o, panel, 1, out + b0 * d.T * C, d.T * C, C);
}

void backward_group(const Blocks& g, int64_t b0, int64_t G, float* ws, const float* qkv, const float* lse,
                    const float* dout, float* dqkv) {
  const AttentionDims& d = g.d;
  const int64_t C = d.H * d.D, ld = 3 * C, panel = G * d.T * C;
  const int64_t work = G * d.H * std::min(kRows, d.T) * d.T;
  float *q = ws, *k = q + panel, *v = k + panel, *dO = v + panel;
  float *dq = dO + panel, *dk = dq + panel, *dv = dk + panel, *p = dv + panel, *dp = p + work;
  const float* rows = qkv + b0 * d.T * ld;
  pack(g, rows, d.T * ld, ld, 3, q, panel);  // q, k, v
  pack(g, dout + b0 * d.T * C, d.T * C, C, 1, dO, panel);
  for (int64_t i = 0; i < g.count(); ++i) {
    const int64_t m = g.rows(i), np = g.pairs();
    for (int64_t j = 0; j <= g.last(i); ++j) {
      tile_nt(g, i, j, d.scale, q, k, p);  // S
      tile_nt(g, i, j, 1.0f, dO, v, dp);   // dP = dO V^T
    }
    parallel_for(np * m, true, [&](int64_t pr) {
      const int64_t pi = pr / m, r = pr % m, b = b0 + pi / d.H, h = pi % d.H, t = i * kRows + r;
      dscores_row(Row{g, p, i, pi, r}, Row{g, dp, i, pi, r}, lse[(b * d.H + h) * d.T + t]);
    });
    // dQ_i = scale sum_j dS_ij K_j; dK_j += scale dS_ij^T Q_i; dV_j += P_ij^T dO_i. Key block j
    // is first reached from query block j (causal) or 0: there its sums start.
    for (int64_t j = 0; j <= g.last(i); ++j) {
      const int64_t n = g.rows(j), mn = m * n;
      const float first = i == (d.causal ? j : 0) ? 0.0f : 1.0f;
      gemm_batched(false, false, np, m, d.D, n, d.scale, dp + g.tile(i, j), n, mn, k + g.block(j), d.D, n * d.D,
                   j == 0 ? 0.0f : 1.0f, dq + g.block(i), d.D, m * d.D);
      gemm_batched(true, false, np, n, d.D, m, d.scale, dp + g.tile(i, j), n, mn, q + g.block(i), d.D, m * d.D,
                   first, dk + g.block(j), d.D, n * d.D);
      gemm_batched(true, false, np, n, d.D, m, 1.0f, p + g.tile(i, j), n, mn, dO + g.block(i), d.D, m * d.D,
                   first, dv + g.block(j), d.D, n * d.D);
    }
  }
  unpack(g, dq, panel, 3, dqkv + b0 * d.T * ld, d.T * ld, ld);  // dq, dk, dv
}

}  // namespace

void attention_forward(const AttentionDims& d, const float* qkv, float* out, float* lse) {
  // Per element of a group: the q, k, v, o panels and its pairs' block row of scores.
  const int64_t per_element = 4 * d.T * d.H * d.D + d.H * std::min(kRows, d.T) * d.T;
  for_each_group(d, per_element, [&](const Blocks& g, int64_t b0, int64_t G, float* ws) {
    forward_group(g, b0, G, ws, qkv, out, lse);
  });
}

void attention_backward(const AttentionDims& d, const float* qkv, const float* lse, const float* dout,
                        float* dqkv) {
  // Per element: seven panels (q, k, v, dO, dq, dk, dv) and two block rows (P, dP).
  const int64_t per_element = 7 * d.T * d.H * d.D + 2 * d.H * std::min(kRows, d.T) * d.T;
  for_each_group(d, per_element, [&](const Blocks& g, int64_t b0, int64_t G, float* ws) {
    backward_group(g, b0, G, ws, qkv, lse, dout, dqkv);
  });
}

}  // namespace cohort::kernels::cpu
