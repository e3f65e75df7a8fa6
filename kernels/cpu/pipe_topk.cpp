// Top-k selection, gather and scatter (pipe_topk.h). Magnitudes are compared as the elements' bits
// with the sign cleared: for IEEE floats (f32 and bf16 alike) those unsigned integers are ordered
// as the magnitudes, +0 equals -0, and NaN sorts above infinity — so nth_element sees a strict
// weak order whatever the data (a float comparison with NaN would not be one).
#include "kernels/cpu/pipe_topk.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace cohort::kernels::cpu {

namespace {

template <typename Bits>
uint32_t magnitude(Bits b) {
  constexpr uint32_t kNoSign = sizeof(Bits) == 4 ? 0x7fffffffu : 0x7fffu;
  return static_cast<uint32_t>(b) & kNoSign;
}

template <typename Bits>
void select(const Bits* x, int64_t n, int64_t k, int32_t* idx, Bits* values) {
  if (k >= n) {  // everything: no selection (keep = 1 sends x as it is)
    for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
    std::memcpy(values, x, static_cast<size_t>(n) * sizeof(Bits));
    return;
  }
  // The magnitudes in a buffer kept per thread: it grows to the largest activation once.
  thread_local std::vector<uint32_t> scratch;
  if (scratch.size() < static_cast<size_t>(n)) scratch.resize(static_cast<size_t>(n));
  uint32_t* keys = scratch.data();
  for (int64_t i = 0; i < n; ++i) keys[i] = magnitude(x[i]);
  // threshold: the k-th largest magnitude. Of the k - 1 above position n - k, those strictly
  // larger are taken wherever they are; the rest of the k are ties at the threshold, taken in
  // index order.
  std::nth_element(keys, keys + (n - k), keys + n);
  const uint32_t threshold = keys[n - k];
  int64_t above = 0;
  for (int64_t j = n - k + 1; j < n; ++j) above += keys[j] > threshold;
  int64_t ties = k - above;
  int64_t out = 0;
  for (int64_t i = 0; i < n && out < k; ++i) {
    const uint32_t m = magnitude(x[i]);
    if (m < threshold) continue;
    if (m == threshold) {
      if (ties == 0) continue;
      --ties;
    }
    idx[out] = static_cast<int32_t>(i);
    values[out] = x[i];
    ++out;
  }
}

template <typename Bits>
void gather(const Bits* src, const int32_t* idx, int64_t k, Bits* dst) {
  for (int64_t j = 0; j < k; ++j) dst[j] = src[idx[j]];
}

template <typename Bits>
void scatter(const Bits* values, const int32_t* idx, int64_t k, Bits* dense, int64_t n) {
  std::memset(dense, 0, static_cast<size_t>(n) * sizeof(Bits));
  for (int64_t j = 0; j < k; ++j) dense[idx[j]] = values[j];
}

template <typename Bits>
void scatter_tail(Bits* dense, const int32_t* idx, int64_t k, int64_t n) {
  const int64_t tail = n - k;
  for (int64_t j = 0; j < k; ++j) dense[idx[j]] = dense[tail + j];  // idx[j] <= tail + j (pipe_topk.h)
  // Zeros between the chosen positions (and over the tail's values already moved).
  int64_t from = 0;
  for (int64_t j = 0; j <= k; ++j) {
    const int64_t to = j < k ? idx[j] : n;
    std::fill(dense + from, dense + to, Bits{0});
    from = to + 1;
  }
}

}  // namespace

void topk_select(const void* x, size_t elem_bytes, int64_t n, int64_t k, int32_t* idx, void* values) {
  if (elem_bytes == 4)
    select(static_cast<const uint32_t*>(x), n, k, idx, static_cast<uint32_t*>(values));
  else
    select(static_cast<const uint16_t*>(x), n, k, idx, static_cast<uint16_t*>(values));
}

void gather_at(const void* src, size_t elem_bytes, const int32_t* idx, int64_t k, void* dst) {
  if (elem_bytes == 4)
    gather(static_cast<const uint32_t*>(src), idx, k, static_cast<uint32_t*>(dst));
  else
    gather(static_cast<const uint16_t*>(src), idx, k, static_cast<uint16_t*>(dst));
}

void scatter_at(const void* values, size_t elem_bytes, const int32_t* idx, int64_t k, void* dense, int64_t n) {
  if (elem_bytes == 4)
    scatter(static_cast<const uint32_t*>(values), idx, k, static_cast<uint32_t*>(dense), n);
  else
    scatter(static_cast<const uint16_t*>(values), idx, k, static_cast<uint16_t*>(dense), n);
}

void scatter_from_tail(void* dense, size_t elem_bytes, const int32_t* idx, int64_t k, int64_t n) {
  if (elem_bytes == 4)
    scatter_tail(static_cast<uint32_t*>(dense), idx, k, n);
  else
    scatter_tail(static_cast<uint16_t*>(dense), idx, k, n);
}

void indices_to_bitmap(const int32_t* idx, int64_t k, int64_t n, uint32_t* words) {
  std::memset(words, 0, static_cast<size_t>((n + 31) / 32) * sizeof(uint32_t));
  for (int64_t j = 0; j < k; ++j) words[idx[j] / 32] |= uint32_t{1} << (idx[j] % 32);
}

int64_t bitmap_to_indices(const uint32_t* words, int64_t n, int32_t* idx, int64_t k) {
  const int64_t count_words = (n + 31) / 32;
  if (n % 32 != 0 && (words[count_words - 1] >> (n % 32)) != 0) return -1;
  int64_t marked = 0;
  for (int64_t w = 0; w < count_words; ++w) {
    uint32_t bits = words[w];
    while (bits != 0) {
      const int b = __builtin_ctz(bits);
      bits &= bits - 1;
      if (marked < k) idx[marked] = static_cast<int32_t>(w * 32 + b);
      ++marked;
    }
  }
  return marked;
}

int64_t first_bad_index(const int32_t* idx, int64_t k, int64_t n) {
  int64_t previous = -1;
  for (int64_t j = 0; j < k; ++j) {
    if (idx[j] <= previous || idx[j] >= n) return j;
    previous = idx[j];
  }
  return -1;
}

}  // namespace cohort::kernels::cpu
