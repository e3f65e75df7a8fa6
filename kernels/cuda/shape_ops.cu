// Data-movement kernels for transpose, concat and split. transpose merges the dimensions that stay
// adjacent (strided.cuh), so [B,T,H,D]->[B,H,T,D] gathers whole D-rows and a swap of the last two
// dimensions becomes a batched 2-D transpose through 32x32 shared-memory tiles (both the reads
// and the writes coalesced). concat and split copy in the widest word (16 down to 1 bytes) that
// every part's row and pointer allow, one thread per word, all parts in one launch.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/base/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/shape_ops.h"
#include "kernels/cuda/strided.cuh"

namespace cohort::kernels::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kTile = 32, kTileRows = 8;  // tile side; a (kTile x kTileRows) block walks one tile

void check_elem_size(size_t elem_size, const char* fn) {
  COHORT_CHECK(elem_size == 2 || elem_size == 4 || elem_size == 8, Status::kInvalidArgument, fn,
               ": element size ", elem_size, " (2, 4 or 8 bytes)");
}

// out[i] = x[offset of i]: one thread per output element, so the writes are coalesced.
template <typename E>
__global__ void gather_kernel(const E* x, E* out, int64_t n, detail::StridedDims<1> dims) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[1];
    detail::offsets_at(dims, i, off);
    out[i] = x[off[0]];
  }
}

// x [batch, R, C] -> out [batch, C, R], one 32x32 tile per block step: read along x's rows into
// shared memory, write along out's rows from it (the +1 column keeps the column reads apart in
// the banks).
template <typename E>
__global__ void transpose_tiles_kernel(const E* x, E* out, int64_t batch, int64_t R, int64_t C) {
  __shared__ E tile[kTile][kTile + 1];
  const int64_t tiles_r = (R + kTile - 1) / kTile, tiles_c = (C + kTile - 1) / kTile;
  const int64_t tiles = batch * tiles_r * tiles_c;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {  // the same t for the whole block
    const int64_t b = t / (tiles_r * tiles_c), rc = t - b * tiles_r * tiles_c;
    const int64_t r0 = rc / tiles_c * kTile, c0 = rc % tiles_c * kTile;
    const E* src = x + b * R * C;
    E* dst = out + b * R * C;
    for (int k = threadIdx.y; k < kTile; k += kTileRows) {
      const int64_t r = r0 + k, c = c0 + threadIdx.x;
      if (r < R && c < C) tile[k][threadIdx.x] = src[r * C + c];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < kTile; k += kTileRows) {
      const int64_t c = c0 + k, r = r0 + threadIdx.x;  // out row c, column r = x[r][c]
      if (c < C && r < R) dst[c * R + r] = tile[threadIdx.x][k];
    }
    __syncthreads();  // the tile is rewritten by the next step
  }
}

template <typename E>
void transpose_typed(const E* x, E* out, int64_t n, const detail::StridedDims<1>& d, cudaStream_t stream) {
  const int64_t* e = d.extent;
  const int64_t* s = d.stride[0];
  int64_t batch = 0, R = 0, C = 0;  // batched 2-D transpose x [batch, R, C] -> [batch, C, R]
  if (d.rank == 2 && s[0] == 1 && s[1] == e[0]) {
    batch = 1, R = e[1], C = e[0];
  } else if (d.rank == 3 && s[1] == 1 && s[2] == e[1] && s[0] == e[1] * e[2]) {
    batch = e[0], R = e[2], C = e[1];
  }
  if (batch > 0) {
    const int64_t tiles = batch * ((R + kTile - 1) / kTile) * ((C + kTile - 1) / kTile);
    transpose_tiles_kernel<E><<<detail::grid_for(tiles, 1, int64_t{1} << 20), dim3(kTile, kTileRows), 0, stream>>>(
        x, out, batch, R, C);
    COHORT_CUDA_CHECK_LAUNCH("transpose_tiles_kernel");
    return;
  }
  gather_kernel<E><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(x, out, n, d);
  COHORT_CUDA_CHECK_LAUNCH("gather_kernel");
}

// The parts of a concat or split, in words: part k covers words [start[k], start[k + 1]) of each
// output (concat) or input (split) row; ptr[k] is its buffer (null: zeros, concat only).
struct PartTable {
  void* ptr[kMaxShapeParts] = {};
  int64_t start[kMaxShapeParts + 1] = {};
};

// The part holding word c of a row (parts of no words are stepped over).
__device__ __forceinline__ int part_of(const PartTable& t, int64_t c) {
  int k = 0;
  while (c >= t.start[k + 1]) ++k;
  return k;
}

template <typename W>
__global__ void concat_kernel(PartTable t, int parts, int64_t outer, W* out) {
  const int64_t row = t.start[parts], n = outer * row, stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t w = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; w < n; w += stride) {
    const int64_t o = w / row, c = w - o * row;
    const int k = part_of(t, c);
    const W* src = static_cast<const W*>(t.ptr[k]);
    out[w] = src ? src[o * (t.start[k + 1] - t.start[k]) + (c - t.start[k])] : W{};
  }
}

template <typename W>
__global__ void split_kernel(const W* x, PartTable t, int parts, int64_t outer) {
  const int64_t row = t.start[parts], n = outer * row, stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t w = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; w < n; w += stride) {
    const int64_t o = w / row, c = w - o * row;
    const int k = part_of(t, c);
    static_cast<W*>(t.ptr[k])[o * (t.start[k + 1] - t.start[k]) + (c - t.start[k])] = x[w];
  }
}

// The table of a concat or split in words of `word` bytes, from the parts' row lengths in bytes.
PartTable part_table(const std::vector<void*>& ptrs, const std::vector<int64_t>& row_bytes, size_t word) {
  PartTable t;
  for (size_t k = 0; k < ptrs.size(); ++k) {
    t.ptr[k] = ptrs[k];
    t.start[k + 1] = t.start[k] + row_bytes[k] / static_cast<int64_t>(word);
  }
  return t;
}

// The widest word (16, 8, 4, 2 or 1 bytes) dividing every row length and every buffer's address.
size_t word_for(const std::vector<void*>& ptrs, const void* whole, const std::vector<int64_t>& row_bytes) {
  for (size_t w : {16, 8, 4, 2}) {
    bool ok = reinterpret_cast<uintptr_t>(whole) % w == 0;
    for (size_t k = 0; ok && k < ptrs.size(); ++k)
      ok = reinterpret_cast<uintptr_t>(ptrs[k]) % w == 0 && row_bytes[k] % static_cast<int64_t>(w) == 0;
    if (ok) return w;
  }
  return 1;
}

// Launches split (`whole` the source, the table's parts the destinations) or concat (the parts
// the sources, `whole` the destination) in words of W.
template <typename W>
void launch_parts(bool is_split, const PartTable& t, int parts, int64_t outer, void* whole, cudaStream_t stream) {
  const int64_t n = outer * t.start[parts];
  if (is_split) {
    split_kernel<W><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<const W*>(whole), t, parts,
                                                                            outer);
    COHORT_CUDA_CHECK_LAUNCH("split_kernel");
  } else {
    concat_kernel<W><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(t, parts, outer, static_cast<W*>(whole));
    COHORT_CUDA_CHECK_LAUNCH("concat_kernel");
  }
}

void copy_parts(const char* fn, bool is_split, const std::vector<void*>& ptrs, const std::vector<int64_t>& extents,
                int64_t outer, int64_t inner, size_t elem_size, void* whole, cudaStream_t stream) {
  check_elem_size(elem_size, fn);
  COHORT_CHECK(!ptrs.empty() && ptrs.size() <= static_cast<size_t>(kMaxShapeParts) && ptrs.size() == extents.size(),
               Status::kInvalidArgument, fn, ": ", ptrs.size(), " parts and ", extents.size(), " extents (1 to ",
               kMaxShapeParts, " parts)");
  COHORT_CHECK(outer >= 0 && inner >= 0, Status::kInvalidArgument, fn, ": outer = ", outer, ", inner = ", inner);
  std::vector<int64_t> row_bytes;
  int64_t row = 0;
  for (int64_t e : extents) {
    COHORT_CHECK(e >= 0, Status::kInvalidArgument, fn, ": extent ", e);
    row_bytes.push_back(e * inner * static_cast<int64_t>(elem_size));
    row += row_bytes.back();
  }
  if (outer == 0 || row == 0) return;
  COHORT_CHECK(whole != nullptr, Status::kInvalidArgument, fn, ": null ", is_split ? "input" : "output");
  for (size_t k = 0; k < ptrs.size(); ++k)
    COHORT_CHECK(ptrs[k] != nullptr || !is_split || row_bytes[k] == 0, Status::kInvalidArgument, fn,
                 ": null output ", k);
  const size_t word = word_for(ptrs, whole, row_bytes);
  const PartTable t = part_table(ptrs, row_bytes, word);
  const int parts = static_cast<int>(ptrs.size());
  switch (word) {
    case 16: launch_parts<uint4>(is_split, t, parts, outer, whole, stream); break;
    case 8: launch_parts<uint2>(is_split, t, parts, outer, whole, stream); break;
    case 4: launch_parts<uint32_t>(is_split, t, parts, outer, whole, stream); break;
    case 2: launch_parts<uint16_t>(is_split, t, parts, outer, whole, stream); break;
    default: launch_parts<uint8_t>(is_split, t, parts, outer, whole, stream); break;
  }
}

// copy_rows: one thread per 16-byte-aligned segment of a dst row (blockIdx.y walks the rows).
// The segment's source bytes start `off` bytes past an aligned address: two aligned loads and a
// funnel shift per 4-byte word. Loads are vectorised only where both lie inside the source row
// (the row's first and last segments may not: they go 2 bytes at a time, as do the row's ends
// outside whole segments).
__device__ __forceinline__ uint32_t word_of(const uint4& a, const uint4& b, int j) {
  uint32_t r = a.x;
  r = j == 1 ? a.y : r;
  r = j == 2 ? a.z : r;
  r = j == 3 ? a.w : r;
  r = j == 4 ? b.x : r;
  r = j == 5 ? b.y : r;
  r = j == 6 ? b.z : r;
  r = j == 7 ? b.w : r;
  return r;
}

__global__ void copy_rows_kernel(char* dst, size_t dst_pitch, const char* src, size_t src_pitch, size_t width,
                                 int64_t rows) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    char* d = dst + r * dst_pitch;
    const char* s = src + r * src_pitch;
    const uintptr_t d0 = reinterpret_cast<uintptr_t>(d), d_end = d0 + width;
    const uintptr_t body = (d0 + 15) & ~uintptr_t{15}, body_end = d_end & ~uintptr_t{15};
    const int64_t segments = body_end > body ? static_cast<int64_t>((body_end - body) / 16) : 0;
    const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x, step = int64_t{gridDim.x} * blockDim.x;
    if (first == 0) {  // the ends outside whole segments, 2 bytes at a time
      const uintptr_t head_end = segments > 0 ? body : d_end;
      for (uintptr_t a = d0; a < head_end; a += 2)
        *reinterpret_cast<uint16_t*>(a) = *reinterpret_cast<const uint16_t*>(s + (a - d0));
      if (segments > 0)
        for (uintptr_t a = body_end; a < d_end; a += 2)
          *reinterpret_cast<uint16_t*>(a) = *reinterpret_cast<const uint16_t*>(s + (a - d0));
    }
    for (int64_t k = first; k < segments; k += step) {
      const uintptr_t a = body + 16 * k;
      const char* from = s + (a - d0);
      const uintptr_t f = reinterpret_cast<uintptr_t>(from), off = f & 15, base = f - off;
      uint4 out;
      if (off == 0) {
        out = *reinterpret_cast<const uint4*>(from);
      } else if (base >= reinterpret_cast<uintptr_t>(s) && base + 32 <= reinterpret_cast<uintptr_t>(s) + width) {
        const uint4 v0 = *reinterpret_cast<const uint4*>(base), v1 = *reinterpret_cast<const uint4*>(base + 16);
        const int q = static_cast<int>(off >> 2), shift = static_cast<int>(off & 3) * 8;
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint32_t lo = word_of(v0, v1, q + i);
          w[i] = shift ? __funnelshift_r(lo, word_of(v0, v1, q + i + 1), shift) : lo;
        }
        out = make_uint4(w[0], w[1], w[2], w[3]);
      } else {
        uint16_t h[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) h[i] = reinterpret_cast<const uint16_t*>(from)[i];
        out = make_uint4(h[0] | uint32_t{h[1]} << 16, h[2] | uint32_t{h[3]} << 16, h[4] | uint32_t{h[5]} << 16,
                         h[6] | uint32_t{h[7]} << 16);
      }
      *reinterpret_cast<uint4*>(a) = out;
    }
  }
}

}  // namespace

void transpose(const void* x, const std::vector<int64_t>& in_shape, const std::vector<int64_t>& perm,
               size_t elem_size, void* out, cudaStream_t stream) {
  const char* fn = "cuda transpose";
  check_elem_size(elem_size, fn);
  const size_t rank = in_shape.size();
  std::vector<bool> seen(rank, false);
  bool ok = perm.size() == rank;
  for (size_t k = 0; ok && k < rank; ++k) {
    ok = perm[k] >= 0 && static_cast<size_t>(perm[k]) < rank && !seen[static_cast<size_t>(perm[k])];
    if (ok) seen[static_cast<size_t>(perm[k])] = true;
  }
  COHORT_CHECK(ok, Status::kInvalidArgument, fn, ": perm is not a permutation of the ", rank, " dimensions");
  const int64_t n = detail::numel_of(in_shape);
  if (n == 0) return;
  std::vector<int64_t> in_stride(rank, 1);
  for (size_t d = rank; d-- > 1;) in_stride[d - 1] = in_stride[d] * in_shape[d];
  std::vector<int64_t> extents(rank), strides[1] = {std::vector<int64_t>(rank)};
  for (size_t k = 0; k < rank; ++k) {
    extents[k] = in_shape[static_cast<size_t>(perm[k])];
    strides[0][k] = in_stride[static_cast<size_t>(perm[k])];
  }
  const detail::StridedDims<1> d = detail::merge_dims<1>(extents, strides, "transpose");
  if (d.rank == 0 || (d.rank == 1 && d.stride[0][0] == 1)) {  // the order is kept: a copy
    COHORT_CUDA_CHECK(cudaMemcpyAsync(out, x, static_cast<size_t>(n) * elem_size, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  if (elem_size == 2)
    transpose_typed(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(out), n, d, stream);
  else if (elem_size == 4)
    transpose_typed(static_cast<const uint32_t*>(x), static_cast<uint32_t*>(out), n, d, stream);
  else
    transpose_typed(static_cast<const uint64_t*>(x), static_cast<uint64_t*>(out), n, d, stream);
}

void concat(const std::vector<const void*>& parts, const std::vector<int64_t>& extents, int64_t outer,
            int64_t inner, size_t elem_size, void* out, cudaStream_t stream) {
  std::vector<void*> ptrs;
  for (const void* p : parts) ptrs.push_back(const_cast<void*>(p));  // only read
  copy_parts("cuda concat", false, ptrs, extents, outer, inner, elem_size, out, stream);
}

void split(const void* x, const std::vector<int64_t>& extents, int64_t outer, int64_t inner,
           size_t elem_size, const std::vector<void*>& parts, cudaStream_t stream) {
  copy_parts("cuda split", true, parts, extents, outer, inner, elem_size, const_cast<void*>(x), stream);  // x only read
}

void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, int64_t rows,
               cudaStream_t stream) {
  const auto odd = [](uintptr_t v) { return (v & 1) != 0; };
  COHORT_CHECK(!odd(reinterpret_cast<uintptr_t>(dst)) && !odd(reinterpret_cast<uintptr_t>(src)) && !odd(dst_pitch) &&
                   !odd(src_pitch) && !odd(width) && rows >= 0 && width <= dst_pitch && width <= src_pitch,
               Status::kInvalidArgument, "cuda copy_rows: addresses, pitches and width must be even and width <= "
               "each pitch (width ", width, ", pitches ", dst_pitch, " and ", src_pitch, ")");
  if (rows == 0 || width == 0) return;
  const int64_t segments = static_cast<int64_t>(width / 16) + 1;
  const unsigned gx = static_cast<unsigned>(std::min<int64_t>((segments + kThreads - 1) / kThreads, 65535));
  const unsigned gy = static_cast<unsigned>(std::min<int64_t>(rows, 65535));
  copy_rows_kernel<<<dim3(gx, gy), kThreads, 0, stream>>>(static_cast<char*>(dst), dst_pitch,
                                                            static_cast<const char*>(src), src_pitch, width, rows);
  COHORT_CUDA_CHECK_LAUNCH("copy_rows_kernel");
}

}  // namespace cohort::kernels::cuda
