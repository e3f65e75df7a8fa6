// Harness cases for the conv family (placeholder until the family lands).
#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {
void add_conv_cases(std::vector<OpCase>&) {}
}  // namespace cohort::test
