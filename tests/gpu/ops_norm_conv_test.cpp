// The normalisation and convolution families on the GPU against the CPU, through the executor
// (tests/gpu/op_compare.h): forward outputs and input gradients, fp32 without TF32 unless a test
// says otherwise. Skips without a visible device.
#include <gtest/gtest.h>

#include "tests/gpu/op_compare.h"

namespace cohort {
namespace {

using gpu_test::expect_op_matches_cpu;
using gpu_test::OpCompare;
using gpu_test::random_tensor;

#define COHORT_NEEDS_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << device_unavailable_reason(Device::kCuda)

TEST(GpuOps, LayernormMatchesTheCpu) {
  COHORT_NEEDS_GPU();
  Attrs a;
  a.set("eps", 1e-5);
  OpCompare c;
  c.tol = 2e-5;
  // Rows of an odd width, so no vector path covers the whole row.
  expect_op_matches_cpu("layernorm", {random_tensor({6, 37}, 1), random_tensor({37}, 2, 0.5f, 1.5f),
                                      random_tensor({37}, 3)}, a, c);
}

}  // namespace
}  // namespace cohort
