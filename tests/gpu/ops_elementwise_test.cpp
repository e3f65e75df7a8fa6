// The element-wise, reduction and shape operators on the GPU against the CPU, through the
// executor (tests/gpu/op_compare.h): forward outputs and input gradients. Skips without a
// visible device.
#include <gtest/gtest.h>

#include "tests/gpu/op_compare.h"

namespace cohort {
namespace {

using gpu_test::expect_op_matches_cpu;
using gpu_test::OpCompare;
using gpu_test::random_tensor;

#define COHORT_NEEDS_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << device_unavailable_reason(Device::kCuda)

TEST(GpuOps, ActivationsMatchTheCpu) {
  COHORT_NEEDS_GPU();
  for (const char* op : {"relu", "tanh", "gelu"}) {
    SCOPED_TRACE(op);
    expect_op_matches_cpu(op, {random_tensor({5, 33}, 4, -3.0f, 3.0f)}, Attrs(), OpCompare());
  }
}

TEST(GpuOps, AddAndMulWithABiasOperandMatchTheCpu) {
  COHORT_NEEDS_GPU();
  for (const char* op : {"add", "mul"}) {
    SCOPED_TRACE(op);
    expect_op_matches_cpu(op, {random_tensor({4, 3, 10}, 5), random_tensor({10}, 6)}, Attrs());
    expect_op_matches_cpu(op, {random_tensor({4, 3, 10}, 7), random_tensor({4, 3, 10}, 8)}, Attrs());
  }
}

}  // namespace
}  // namespace cohort
