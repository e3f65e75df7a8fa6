// Placeholder until this family lands; registers nothing.
#include "core/ops/schema.h"

namespace cohort {
void register_embedding_ops(OpRegistry&) {}
}  // namespace cohort
