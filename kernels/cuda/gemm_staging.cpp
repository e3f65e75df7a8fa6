// kernels/cuda/gemm_staging.h: the choice of chunks for gemm's staging (host code, no CUDA).
#include "kernels/cuda/gemm_staging.h"

#include <tuple>

namespace cohort::kernels::cuda::staging {

int64_t padded_ld(int64_t cols, size_t element_bytes) {
  const int64_t q = static_cast<int64_t>(128 / element_bytes);
  return (cols + q - 1) / q * q;
}

size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t Operand::bytes(int64_t pn, int64_t qn, size_t element_bytes) const {
  return round_up_256(static_cast<size_t>(rows(pn, qn)) *
                      static_cast<size_t>(padded_ld(cols(pn, qn), element_bytes)) * element_bytes);
}

Plan plan(int64_t M, int64_t N, int64_t K, size_t es, const Operand ops[3], float beta, int64_t ldc, size_t budget) {
  const int64_t extent[3] = {M, N, K};
  const bool bf16 = es < 4;  // sums of K chunks need fp32 of their own
  const bool sum_in_f32 = bf16 && beta == 0.0f && !ops[2].staged && ldc == N && (N * 4) % 16 == 0;
  const size_t f32_bytes = round_up_256(static_cast<size_t>(M) * static_cast<size_t>(N) * 4);
  // Staging bytes when dim d is cut into chunks of `len`.
  auto need = [&](int d, int64_t len) {
    size_t total = 0;
    for (int i = 0; i < 3; ++i) {
      const Operand& o = ops[i];
      if (o.staged) total += o.bytes(o.dp == d ? len : extent[o.dp], o.dq == d ? len : extent[o.dq], es);
    }
    if (d == 2 && len < K && bf16) total += f32_bytes;
    return total;
  };
  const bool n_aligned = (static_cast<size_t>(N) * es) % 16 == 0;
  Plan best;
  bool best_busy = false, best_n = false;
  for (int d = 0; d < 3; ++d) {
    const int64_t e = extent[d];
    int64_t len = 0;
    if (need(d, e) <= budget) {
      len = e;
    } else if (e > 16 && need(d, 16) <= budget && !(d == 2 && bf16 && !sum_in_f32)) {
      int64_t lo = 1, hi = (e - 1) / 16;  // in units of 16, need(lo * 16) fits
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (need(d, mid * 16) <= budget) lo = mid;
        else hi = mid - 1;
      }
      len = lo * 16;
    }
    if (len == 0) continue;
    const int64_t chunks = (e + len - 1) / len;
    const bool busy = (d == 0 ? len : M) * (d == 1 ? len : N) >= (int64_t{1} << 21);
    const bool n_ok = n_aligned || (d == 1 && len < e);
    const auto key = [](bool n, bool b, int64_t c) { return std::make_tuple(!n, !b, c); };
    if (best.dim < 0 || key(n_ok, busy, chunks) < key(best_n, best_busy, best.chunks)) {
      best.dim = d;
      best.len = len;
      best.chunks = chunks;
      best_busy = busy;
      best_n = n_ok;
    }
  }
  if (best.dim < 0) return best;
  best.f32_sums = best.dim == 2 && best.chunks > 1 && bf16;
  size_t total = 0;
  for (int i = 0; i < 3; ++i) {
    const Operand& o = ops[i];
    if (!o.staged) continue;
    best.offset[i] = total;
    total += o.bytes(o.dp == best.dim ? best.len : extent[o.dp], o.dq == best.dim ? best.len : extent[o.dq], es);
  }
  best.f32_offset = total;
  if (best.f32_sums) total += f32_bytes;
  best.bytes = total;
  return best;
}

}  // namespace cohort::kernels::cuda::staging
