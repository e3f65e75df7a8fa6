// Embedding gather and its deterministic gradient. Gather: one warp per looked-up row, lanes
// striding over C (coalesced row copies). Gradient: the (id, position) pairs are radix-sorted by
// id with CUB (stable, so each id's positions stay ascending), then one warp per vocabulary row
// sums its run of dy rows in that order — the CPU's order, without atomics.
#include <cub/device/device_radix_sort.cuh>

#include <climits>

#include "core/base/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.h"

namespace cohort::kernels::cuda {

namespace {
using detail::bf16;
constexpr int kWarpsPerBlock = 8;
constexpr size_t kAlign = 256;  // every workspace piece starts on a 256-byte boundary

template <typename T>
__global__ void embedding_forward_kernel(const T* weight, const int32_t* ids, T* out, int64_t n,
                                         int64_t V, int64_t C) {
  const int64_t i = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  if (i >= n) return;
  const int64_t id = ids[i];
  const bool bad = id < 0 || id >= V;
  T* o = out + i * C;
  for (int64_t c = threadIdx.x & 31; c < C; c += 32)
    o[c] = bad ? detail::from_float<T>(NAN) : weight[id * C + c];
}

// keys[i] = ids[i] (V for an id outside [0, V): sorted past every row, never summed), pos[i] = i.
__global__ void embedding_sort_keys(const int32_t* ids, uint32_t* keys, int32_t* pos, int64_t n,
                                    int64_t V) {
  COHORT_GRID_STRIDE(i, n) {
    const int64_t id = ids[i];
    keys[i] = static_cast<uint32_t>(id >= 0 && id < V ? id : V);
    pos[i] = static_cast<int32_t>(i);
  }
}

// First index j in [0, n) with keys[j] >= key (n when none).
__device__ __forceinline__ int64_t lower_bound(const uint32_t* keys, int64_t n, uint32_t key) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {  // at most 32 halvings: n < 2^31
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// One warp per vocabulary row v: dweight[v, :] = sum of dy[pos[j], :] over the run of sorted
// keys equal to v, in run order (ascending positions), from 0.
template <typename T>
__global__ void embedding_backward_rows(const uint32_t* keys, const int32_t* pos, const T* dy,
                                        T* dweight, int64_t n, int64_t V, int64_t C) {
  const int64_t v = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  if (v >= V) return;
  const int64_t lo = lower_bound(keys, n, static_cast<uint32_t>(v));
  const int64_t hi = lower_bound(keys, n, static_cast<uint32_t>(v + 1));
  T* d = dweight + v * C;
  for (int64_t c = threadIdx.x & 31; c < C; c += 32) {
    float acc = 0.0f;
    for (int64_t j = lo; j < hi; ++j) acc += detail::to_float(dy[int64_t{pos[j]} * C + c]);
    d[c] = detail::from_float<T>(acc);
  }
}

unsigned blocks_for(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

void check_args(const char* fn, int64_t n, int64_t V, int64_t C) {
  COHORT_CHECK(n >= 0 && n <= INT32_MAX && V > 0 && V < INT32_MAX && C > 0, Status::kInvalidArgument, fn,
               ": n = ", n, ", V = ", V, ", C = ", C, " (n and V below 2^31 - 1, V and C positive)");
}

// Bits the radix sort must look at: keys are in [0, V].
int key_bits(int64_t V) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= V) ++bits;
  return bits;
}

size_t cub_sort_bytes(int64_t n, int64_t V) {
  size_t bytes = 0;
  COHORT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                                    static_cast<uint32_t*>(nullptr),
                                                    static_cast<const int32_t*>(nullptr),
                                                    static_cast<int32_t*>(nullptr), static_cast<int>(n), 0,
                                                    key_bits(V)));
  return bytes;
}
}  // namespace

void embedding_forward(DType type, const void* weight, const int32_t* ids, void* out, int64_t n,
                       int64_t V, int64_t C, cudaStream_t stream) {
  check_args("cuda embedding_forward", n, V, C);
  if (n == 0) return;
  if (type == DType::kF32) {
    embedding_forward_kernel<float><<<blocks_for(n), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<const float*>(weight), ids, static_cast<float*>(out), n, V, C);
  } else {
    embedding_forward_kernel<bf16><<<blocks_for(n), kWarpsPerBlock * 32, 0, stream>>>(
        static_cast<const bf16*>(weight), ids, static_cast<bf16*>(out), n, V, C);
  }
  COHORT_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

size_t embedding_backward_workspace(int64_t n, int64_t V) {
  check_args("cuda embedding_backward_workspace", n, V, 1);
  if (n == 0) return 0;
  const size_t pairs = aligned(static_cast<size_t>(n) * 4);
  return 4 * pairs + aligned(cub_sort_bytes(n, V));
}

void embedding_backward(DType type, const int32_t* ids, const void* dy, void* dweight, int64_t n,
                        int64_t V, int64_t C, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) {
  check_args("cuda embedding_backward", n, V, C);
  const size_t need = embedding_backward_workspace(n, V);
  COHORT_CHECK(workspace_bytes >= need && (need == 0 || workspace != nullptr), Status::kInvalidArgument,
               "cuda embedding_backward: workspace of ", workspace_bytes, " bytes, ", need, " needed");
  uint32_t* keys_sorted = nullptr;
  int32_t* pos_sorted = nullptr;
  if (n > 0) {
    char* w = static_cast<char*>(workspace);
    const size_t pairs = aligned(static_cast<size_t>(n) * 4);
    auto* keys = reinterpret_cast<uint32_t*>(w);
    keys_sorted = reinterpret_cast<uint32_t*>(w + pairs);
    auto* pos = reinterpret_cast<int32_t*>(w + 2 * pairs);
    pos_sorted = reinterpret_cast<int32_t*>(w + 3 * pairs);
    embedding_sort_keys<<<detail::grid_for(n, 256), 256, 0, stream>>>(ids, keys, pos, n, V);
    COHORT_CUDA_CHECK_LAUNCH("embedding_sort_keys");
    size_t sort_bytes = need - 4 * pairs;
    COHORT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w + 4 * pairs, sort_bytes, keys, keys_sorted, pos,
                                                      pos_sorted, static_cast<int>(n), 0, key_bits(V), stream));
  }
  if (type == DType::kF32) {
    embedding_backward_rows<float><<<blocks_for(V), kWarpsPerBlock * 32, 0, stream>>>(
        keys_sorted, pos_sorted, static_cast<const float*>(dy), static_cast<float*>(dweight), n, V, C);
  } else {
    embedding_backward_rows<bf16><<<blocks_for(V), kWarpsPerBlock * 32, 0, stream>>>(
        keys_sorted, pos_sorted, static_cast<const bf16*>(dy), static_cast<bf16*>(dweight), n, V, C);
  }
  COHORT_CUDA_CHECK_LAUNCH("embedding_backward_rows");
}

}  // namespace cohort::kernels::cuda
