// exp_approx and tanh_approx against libm over a dense sweep and at the edges (0, -0, huge,
// infinities, NaN), since the harness only feeds them moderate values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/vec_math.h"

namespace cohort::kernels::cpu {
namespace {

TEST(VecMath, TanhMatchesLibm) {
  double worst = 0;
  for (float x = -20.0f; x <= 20.0f; x += 0.001f) worst = std::max(worst, std::fabs(double(tanh_approx(x)) - std::tanh(double(x))));
  EXPECT_LT(worst, 2e-7);
}

TEST(VecMath, TanhEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(tanh_approx(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(tanh_approx(-0.0f)));
  EXPECT_EQ(tanh_approx(1e30f), 1.0f);
  EXPECT_EQ(tanh_approx(-1e30f), -1.0f);
  EXPECT_EQ(tanh_approx(inf), 1.0f);
  EXPECT_EQ(tanh_approx(-inf), -1.0f);
  EXPECT_TRUE(std::isnan(tanh_approx(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(tanh_approx(-std::numeric_limits<float>::quiet_NaN())));
}

TEST(VecMath, ExpMatchesLibmOnSoftmaxRange) {
  double worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 0.01f)
    worst = std::max(worst, std::fabs(double(exp_approx(x)) - std::exp(double(x))) / std::exp(double(x)));
  EXPECT_LT(worst, 5e-7);
  EXPECT_EQ(exp_approx(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(exp_approx(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace cohort::kernels::cpu
