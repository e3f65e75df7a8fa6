// reduce_to_shape's bias-gradient path (sum over leading rows) against a plain double loop, for
// row counts on both sides of its four-row blocking and widths off the vector length.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/elementwise.h"

namespace cohort::kernels::cpu {
namespace {

TEST(ReduceToShape, SumsLeadingRowsOfAnyCount) {
  for (int64_t rows : {1, 3, 4, 5, 8, 11}) {
    for (int64_t m : {1, 7, 16, 37}) {
      std::vector<float> x(static_cast<size_t>(rows * m));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
      std::vector<float> out(static_cast<size_t>(m), 123.0f);  // overwritten, not accumulated into
      reduce_to_shape(x.data(), {rows, m}, out.data(), {m});
      for (int64_t j = 0; j < m; ++j) {
        double want = 0;
        for (int64_t r = 0; r < rows; ++r) want += x[static_cast<size_t>(r * m + j)];
        EXPECT_NEAR(out[static_cast<size_t>(j)], want, 1e-5) << "rows " << rows << " m " << m << " col " << j;
      }
    }
  }
  // Leading dims of 1 in the target and a rank-3 input reduce the same way.
  std::vector<float> x(2 * 3 * 4, 1.5f), out(4, 0.0f);
  reduce_to_shape(x.data(), {2, 3, 4}, out.data(), {1, 4});
  for (float v : out) EXPECT_FLOAT_EQ(v, 9.0f);
}

}  // namespace
}  // namespace cohort::kernels::cpu
