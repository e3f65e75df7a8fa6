// Harness cases for the softmax family (placeholder until the family lands).
#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {
void add_softmax_cases(std::vector<OpCase>&) {}
}  // namespace cohort::test
