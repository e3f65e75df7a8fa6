// Placeholder until this family lands; registers nothing.
#include "core/ops/schema.h"

namespace cohort {
void register_norm_ops(OpRegistry&) {}
}  // namespace cohort
