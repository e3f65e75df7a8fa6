// Data-movement loops for transpose, concat and split. transpose first merges input dimensions
// that stay adjacent under the permutation (so [B,T,H,D]->[B,H,T,D] becomes a copy of whole
// D-rows and a last-two-dims swap becomes a batched 2-D transpose), then picks a loop.
#include "kernels/cpu/shape_ops.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/threads.h"

namespace cohort::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements; below this threads cost more than they save
constexpr int64_t kTile = 32;              // 2-D transpose tile (32x32 fp32 = 4 KiB)

struct Reduced {
  std::vector<int64_t> shape;  // input extents after merging
  std::vector<int64_t> perm;
};

// Drops extent-1 dimensions and merges runs of input dims that stay consecutive in perm.
Reduced reduce_dims(const std::vector<int64_t>& in_shape, const std::vector<int64_t>& perm) {
  std::vector<int64_t> keep_index(in_shape.size(), -1);
  std::vector<int64_t> kept_shape;
  for (size_t d = 0; d < in_shape.size(); ++d)
    if (in_shape[d] != 1) {
      keep_index[d] = static_cast<int64_t>(kept_shape.size());
      kept_shape.push_back(in_shape[d]);
    }
  std::vector<int64_t> p;
  for (int64_t d : perm)
    if (keep_index[static_cast<size_t>(d)] >= 0) p.push_back(keep_index[static_cast<size_t>(d)]);
  // Group consecutive perm entries a, a+1, ... into one input dimension.
  std::vector<std::vector<int64_t>> groups;
  for (int64_t d : p) {
    if (!groups.empty() && groups.back().back() + 1 == d)
      groups.back().push_back(d);
    else
      groups.push_back({d});
  }
  std::vector<std::pair<int64_t, int64_t>> by_input;  // (first input dim, group index in output)
  for (size_t g = 0; g < groups.size(); ++g)
    by_input.push_back({groups[g][0], static_cast<int64_t>(g)});
  std::sort(by_input.begin(), by_input.end());
  Reduced r;
  r.perm.assign(groups.size(), 0);
  for (size_t k = 0; k < by_input.size(); ++k) {
    int64_t extent = 1;
    for (int64_t d : groups[static_cast<size_t>(by_input[k].second)])
      extent *= kept_shape[static_cast<size_t>(d)];
    r.shape.push_back(extent);
    r.perm[static_cast<size_t>(by_input[k].second)] = static_cast<int64_t>(k);
  }
  return r;
}

template <typename E>
void transpose_2d_batched(const E* x, int64_t batch, int64_t m, int64_t n, E* out) {
  // x [batch, m, n] -> out [batch, n, m], tile by tile so both sides stay in cache.
  const int64_t tiles_m = (m + kTile - 1) / kTile, tiles_n = (n + kTile - 1) / kTile;
  const int64_t jobs = batch * tiles_m * tiles_n;
  parallel_for(jobs, batch * m * n >= kParallelMin, [&](int64_t job) {
    const int64_t b = job / (tiles_m * tiles_n), t = job % (tiles_m * tiles_n);
    const int64_t i0 = (t / tiles_n) * kTile, j0 = (t % tiles_n) * kTile;
    const int64_t i1 = std::min(m, i0 + kTile), j1 = std::min(n, j0 + kTile);
    const E* src = x + b * m * n;
    E* dst = out + b * m * n;
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t i = i0; i < i1; ++i) dst[j * m + i] = src[i * n + j];
  });
}

// One output row (the last output dim) at a time; rows are independent.
template <typename E>
void transpose_rows(const E* x, const Reduced& r, E* out) {
  const size_t rank = r.shape.size();
  std::vector<int64_t> in_stride(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) in_stride[d] = in_stride[d + 1] * r.shape[d + 1];
  std::vector<int64_t> out_shape(rank), src_stride(rank);
  for (size_t k = 0; k < rank; ++k) {
    out_shape[k] = r.shape[static_cast<size_t>(r.perm[k])];
    src_stride[k] = in_stride[static_cast<size_t>(r.perm[k])];
  }
  const int64_t len = out_shape[rank - 1], step = src_stride[rank - 1];
  int64_t rows = 1;
  for (size_t k = 0; k + 1 < rank; ++k) rows *= out_shape[k];
  parallel_for(rows, rows * len >= kParallelMin, [&](int64_t row) {
    int64_t rem = row, src = 0;
    for (size_t k = rank - 1; k-- > 0;) {
      src += (rem % out_shape[k]) * src_stride[k];
      rem /= out_shape[k];
    }
    E* dst = out + row * len;
    if (step == 1) {
      std::memcpy(dst, x + src, static_cast<size_t>(len) * sizeof(E));
    } else {
      for (int64_t j = 0; j < len; ++j) dst[j] = x[src + j * step];
    }
  });
}

template <typename E>
void transpose_typed(const void* xv, const std::vector<int64_t>& in_shape,
                     const std::vector<int64_t>& perm, void* outv) {
  const E* x = static_cast<const E*>(xv);
  E* out = static_cast<E*>(outv);
  int64_t n = 1;
  for (int64_t d : in_shape) n *= d;
  if (n == 0) return;
  Reduced r = reduce_dims(in_shape, perm);
  const size_t rank = r.shape.size();
  if (rank <= 1) {
    std::memcpy(out, x, static_cast<size_t>(n) * sizeof(E));
  } else if (rank == 2 && r.perm[0] == 1) {
    transpose_2d_batched(x, 1, r.shape[0], r.shape[1], out);
  } else if (rank == 3 && r.perm == std::vector<int64_t>{0, 2, 1}) {
    transpose_2d_batched(x, r.shape[0], r.shape[1], r.shape[2], out);
  } else {
    transpose_rows(x, r, out);
  }
}

template <typename E>
void concat_typed(const std::vector<const void*>& parts, const std::vector<int64_t>& extents,
                  int64_t outer, int64_t inner, void* outv) {
  int64_t row = 0;
  for (int64_t e : extents) row += e * inner;
  E* out = static_cast<E*>(outv);
  parallel_for(outer, outer * row >= kParallelMin, [&](int64_t o) {
    E* dst = out + o * row;
    for (size_t i = 0; i < parts.size(); ++i) {
      const size_t len = static_cast<size_t>(extents[i] * inner);
      if (parts[i])
        std::memcpy(dst, static_cast<const E*>(parts[i]) + o * static_cast<int64_t>(len),
                    len * sizeof(E));
      else
        std::memset(dst, 0, len * sizeof(E));
      dst += len;
    }
  });
}

template <typename E>
void split_typed(const void* xv, const std::vector<int64_t>& extents, int64_t outer, int64_t inner,
                 const std::vector<void*>& parts) {
  int64_t row = 0;
  for (int64_t e : extents) row += e * inner;
  const E* x = static_cast<const E*>(xv);
  parallel_for(outer, outer * row >= kParallelMin, [&](int64_t o) {
    const E* src = x + o * row;
    for (size_t i = 0; i < parts.size(); ++i) {
      const size_t len = static_cast<size_t>(extents[i] * inner);
      std::memcpy(static_cast<E*>(parts[i]) + o * static_cast<int64_t>(len), src, len * sizeof(E));
      src += len;
    }
  });
}

// Calls f with a value of an unsigned type as wide as one element.
template <typename F>
void by_width(size_t elem_size, F&& f) {
  switch (elem_size) {
    case 1:
      f(uint8_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    default:
      f(uint64_t{});
      break;
  }
}
}  // namespace

void transpose(const void* x, const std::vector<int64_t>& in_shape,
               const std::vector<int64_t>& perm, size_t elem_size, void* out) {
  by_width(elem_size, [&](auto e) { transpose_typed<decltype(e)>(x, in_shape, perm, out); });
}

void concat(const std::vector<const void*>& parts, const std::vector<int64_t>& extents,
            int64_t outer, int64_t inner, size_t elem_size, void* out) {
  by_width(elem_size,
           [&](auto e) { concat_typed<decltype(e)>(parts, extents, outer, inner, out); });
}

void split(const void* x, const std::vector<int64_t>& extents, int64_t outer, int64_t inner,
           size_t elem_size, const std::vector<void*>& parts) {
  by_width(elem_size, [&](auto e) { split_typed<decltype(e)>(x, extents, outer, inner, parts); });
}

}  // namespace cohort::kernels::cpu
