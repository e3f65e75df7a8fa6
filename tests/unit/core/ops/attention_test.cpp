// Harness cases for the attention family (placeholder until the family lands).
#include "tests/unit/core/ops/op_harness.h"

namespace cohort::test {
void add_attention_cases(std::vector<OpCase>&) {}
}  // namespace cohort::test
