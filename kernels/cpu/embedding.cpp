// Embedding loops. The gradient is a scatter-add; instead of atomics (whose float sums depend
// on thread timing) a counting sort groups positions by id, and each vocabulary row then sums
// its positions in increasing order, so the result is bit-identical for any thread count.
#include "kernels/cpu/embedding.h"

#include <cstring>
#include <vector>

#include "kernels/cpu/threads.h"

namespace cohort::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which threads cost more than they save
}  // namespace

int64_t find_bad_id(const int32_t* ids, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= V) return i;
  return -1;
}

void embedding_forward(const float* weight, const int32_t* ids, float* out, int64_t n, int64_t C) {
  parallel_for(n, n * C > kParallelMin, [&](int64_t i) {
    std::memcpy(out + i * C, weight + static_cast<int64_t>(ids[i]) * C, static_cast<size_t>(C) * sizeof(float));
  });
}

void embedding_backward(const int32_t* ids, const float* dy, float* dweight, int64_t n, int64_t V, int64_t C) {
  // start[v] .. start[v + 1]: positions holding id v, ascending.
  std::vector<int64_t> start(static_cast<size_t>(V) + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++start[static_cast<size_t>(ids[i]) + 1];
  for (int64_t v = 0; v < V; ++v) start[static_cast<size_t>(v) + 1] += start[static_cast<size_t>(v)];
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(fill[static_cast<size_t>(ids[i])]++)] = i;

  auto row = [&](int64_t v) {
    float* d = dweight + v * C;
    for (int64_t c = 0; c < C; ++c) d[c] = 0.0f;
    for (int64_t k = start[static_cast<size_t>(v)]; k < start[static_cast<size_t>(v) + 1]; ++k) {
      const float* g = dy + order[static_cast<size_t>(k)] * C;
      for (int64_t c = 0; c < C; ++c) d[c] += g[c];
    }
  };
  if (forks(V * C > kParallelMin)) {
    // Dynamic: a row's work is its id's count in the batch.
#pragma omp parallel for schedule(dynamic, 64)
    for (int64_t v = 0; v < V; ++v) row(v);
  } else {
    for (int64_t v = 0; v < V; ++v) row(v);
  }
}

}  // namespace cohort::kernels::cpu
