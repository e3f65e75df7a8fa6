// Harness cases for the norm family (placeholder until the family lands).
#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {
void add_norm_cases(std::vector<OpCase>&) {}
}  // namespace cohort::test
