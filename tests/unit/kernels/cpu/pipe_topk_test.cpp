// The top-k loops (kernels/cpu/pipe_topk.h) against plain references: selection on data full of
// ties, for every k and both element widths; NaN and signed zeros; the in-place scatter against
// the ordinary one for random index sets; the index check.
#include "kernels/cpu/pipe_topk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace cohort::kernels::cpu {
namespace {

// bf16 bits of a float that bf16 holds exactly (the halves used here).
uint16_t bf16_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// Positions by magnitude, largest first (NaN first of all), ties to the lower index; the first k,
// ascending.
std::vector<int32_t> reference(const std::vector<float>& x, int64_t k) {
  auto mag = [](float v) { return std::isnan(v) ? std::numeric_limits<float>::infinity() * 2 : std::fabs(v); };
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const bool na = std::isnan(x[a]), nb = std::isnan(x[b]);
    if (na != nb) return na;
    return !na && mag(x[a]) > mag(x[b]);
  });
  order.resize(static_cast<size_t>(k));
  std::sort(order.begin(), order.end());
  return order;
}

TEST(PipeTopkKernels, SelectionMatchesTheReferenceForEveryKAndBothWidths) {
  std::mt19937 rng(7);
  for (int64_t n : {1, 2, 9, 64, 301}) {
    std::vector<float> x(static_cast<size_t>(n));
    // Few distinct magnitudes, both signs: ties everywhere, and +0 / -0.
    for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.5f;
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16_bits(x[i]);
    for (int64_t k = 1; k <= n; ++k) {
      const std::vector<int32_t> want = reference(x, k);
      std::vector<int32_t> idx(static_cast<size_t>(k), -1);
      std::vector<float> values(static_cast<size_t>(k));
      topk_select(x.data(), 4, n, k, idx.data(), values.data());
      ASSERT_EQ(idx, want) << "f32 n " << n << " k " << k;
      for (int64_t j = 0; j < k; ++j)
        ASSERT_EQ(values[static_cast<size_t>(j)], x[static_cast<size_t>(idx[static_cast<size_t>(j)])]);
      std::vector<uint16_t> vb(static_cast<size_t>(k));
      topk_select(xb.data(), 2, n, k, idx.data(), vb.data());
      ASSERT_EQ(idx, want) << "bf16 n " << n << " k " << k;
      for (int64_t j = 0; j < k; ++j)
        ASSERT_EQ(vb[static_cast<size_t>(j)], xb[static_cast<size_t>(idx[static_cast<size_t>(j)])]);
    }
  }
}

TEST(PipeTopkKernels, NaNIsChosenFirstAndInfinityBeforeNumbers) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1.0f, -inf, 3.0f, nan, -2.0f, -0.0f};
  std::vector<int32_t> idx(3);
  std::vector<float> values(3);
  topk_select(x.data(), 4, 6, 3, idx.data(), values.data());
  EXPECT_EQ(idx, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(std::isnan(values[2]));
  EXPECT_EQ(values[0], -inf);
}

TEST(PipeTopkKernels, GatherAndBothScattersAgree) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 40);
    const int64_t k = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(n));
    std::vector<int32_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> idx(all.begin(), all.begin() + k);
    std::sort(idx.begin(), idx.end());
    std::vector<float> src(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) src[static_cast<size_t>(i)] = static_cast<float>(i + 1);
    std::vector<float> values(static_cast<size_t>(k));
    gather_at(src.data(), 4, idx.data(), k, values.data());
    std::vector<float> want(static_cast<size_t>(n), 0.0f);
    for (int32_t i : idx) want[static_cast<size_t>(i)] = static_cast<float>(i + 1);
    std::vector<float> dense(static_cast<size_t>(n), -1.0f);
    scatter_at(values.data(), 4, idx.data(), k, dense.data(), n);
    ASSERT_EQ(dense, want) << "scatter_at, trial " << trial;
    std::vector<float> in_place(static_cast<size_t>(n), -1.0f);
    std::copy(values.begin(), values.end(), in_place.end() - k);
    scatter_from_tail(in_place.data(), 4, idx.data(), k, n);
    ASSERT_EQ(in_place, want) << "scatter_from_tail, trial " << trial << " n " << n << " k " << k;
    std::vector<uint16_t> narrow(static_cast<size_t>(n), 0xffff);
    for (int64_t j = 0; j < k; ++j)
      narrow[static_cast<size_t>(n - k + j)] = static_cast<uint16_t>(idx[static_cast<size_t>(j)] + 1);
    scatter_from_tail(narrow.data(), 2, idx.data(), k, n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(narrow[static_cast<size_t>(i)], static_cast<uint16_t>(want[static_cast<size_t>(i)]));
  }
}

TEST(PipeTopkKernels, FirstBadIndexFindsDisorderAndRange) {
  const std::vector<int32_t> good = {0, 3, 7};
  EXPECT_EQ(first_bad_index(good.data(), 3, 8), -1);
  EXPECT_EQ(first_bad_index(good.data(), 3, 7), 2);
  const std::vector<int32_t> repeated = {1, 1, 2};
  EXPECT_EQ(first_bad_index(repeated.data(), 3, 8), 1);
  const std::vector<int32_t> negative = {-1, 2};
  EXPECT_EQ(first_bad_index(negative.data(), 2, 8), 0);
}

// The bitmap form of the kept entries: random sets at sizes around word boundaries go to the
// bitmap and back unchanged; a bit past the last entry or a count other than k is reported.
TEST(PipeTopkKernels, BitmapsRoundTripAndReportStrayBits) {
  std::mt19937 rng(7);
  for (int64_t n : {1, 31, 32, 33, 64, 65, 1000}) {
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<int32_t> all(static_cast<size_t>(n));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      const int64_t k = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(n));
      std::vector<int32_t> idx(all.begin(), all.begin() + k);
      std::sort(idx.begin(), idx.end());
      std::vector<uint32_t> words(static_cast<size_t>((n + 31) / 32), 0xdeadbeef);
      indices_to_bitmap(idx.data(), k, n, words.data());
      std::vector<int32_t> back(static_cast<size_t>(k), -1);
      ASSERT_EQ(bitmap_to_indices(words.data(), n, back.data(), k), k) << "n " << n;
      ASSERT_EQ(back, idx) << "n " << n << " k " << k;
      // One fewer slot than marked: the count still says k, the first k - 1 written.
      if (k > 1) {
        EXPECT_EQ(bitmap_to_indices(words.data(), n, back.data(), k - 1), k);
      }
      if (n % 32 != 0) {
        words.back() |= uint32_t{1} << 31;  // past the last entry
        EXPECT_EQ(bitmap_to_indices(words.data(), n, back.data(), k), -1) << "n " << n;
      }
    }
  }
}

}  // namespace
}  // namespace cohort::kernels::cpu
