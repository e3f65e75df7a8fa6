// Vocabulary-parallel loops: see vocab_parallel.h. The exponentials are softmax.cpp's
// (exp_approx, float sums per row), so a split run rounds like the whole one up to the order of
// its sums.
#include "kernels/cpu/vocab_parallel.h"

#include "kernels/cpu/vec_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace cohort::kernels::cpu {

namespace {
bool holds(int64_t id, int64_t v_local, int64_t offset) { return id >= offset && id < offset + v_local; }
}  // namespace

void vocab_embedding_forward(const float* w, const int32_t* ids, float* out, int64_t n, int64_t v_local,
                             int64_t offset, int64_t C) {
  const size_t row = static_cast<size_t>(C) * sizeof(float);
  for (int64_t i = 0; i < n; ++i) {
    float* dst = out + i * C;
    if (holds(ids[i], v_local, offset)) std::memcpy(dst, w + (ids[i] - offset) * C, row);
    else std::memset(dst, 0, row);
  }
}

void vocab_embedding_backward(const int32_t* ids, const float* dy, float* dw, int64_t n, int64_t v_local,
                              int64_t offset, int64_t C) {
  std::memset(dw, 0, static_cast<size_t>(v_local * C) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    if (!holds(ids[i], v_local, offset)) continue;
    float* dst = dw + (ids[i] - offset) * C;
    const float* src = dy + i * C;
    for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
  }
}

void vocab_cross_entropy_partials(const float* logits, const int32_t* labels, float* stats, int64_t rows,
                                  int64_t v_local, int64_t offset, int64_t ignore_index) {
  for (int64_t r = 0; r < rows; ++r) {
    float* s = stats + 3 * r;
    const float* x = logits + r * v_local;
    const float m = *std::max_element(x, x + v_local);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < v_local; ++v) sum += exp_approx(x[v] - m);
    s[0] = m;
    s[1] = sum;
    s[2] = labels[r] != ignore_index && holds(labels[r], v_local, offset) ? x[labels[r] - offset] : 0.0f;
  }
}

double vocab_cross_entropy_combine(const float* partials, const int32_t* labels, float* lse, int64_t parts,
                                   int64_t rows, int64_t ignore_index, int64_t* count) {
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    for (int64_t p = 0; p < parts; ++p) m = std::max(m, static_cast<double>(partials[(p * rows + r) * 3]));
    double sum = 0, target = 0;
    for (int64_t p = 0; p < parts; ++p) {
      const float* s = partials + (p * rows + r) * 3;
      sum += static_cast<double>(s[1]) * std::exp(static_cast<double>(s[0]) - m);
      target += s[2];  // one rank holds the label; the others add 0
    }
    lse[r] = static_cast<float>(m + std::log(sum));
    if (labels[r] == ignore_index) continue;
    total += static_cast<double>(lse[r] - static_cast<float>(target));
    ++counted;
  }
  *count = counted;
  return total;
}

void vocab_cross_entropy_backward(const float* logits, const int32_t* labels, const float* lse, float scale,
                                  float* dlogits, int64_t rows, int64_t v_local, int64_t offset,
                                  int64_t ignore_index) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dlogits + r * v_local;
    if (labels[r] == ignore_index) {
      std::fill(d, d + v_local, 0.0f);
      continue;
    }
    const float* x = logits + r * v_local;
    const float l = lse[r];
#pragma omp simd
    for (int64_t v = 0; v < v_local; ++v) d[v] = exp_approx(x[v] - l) * scale;
    if (holds(labels[r], v_local, offset)) d[labels[r] - offset] -= scale;
  }
}

}  // namespace cohort::kernels::cpu
