// Parameter initialisation from an Initializer (uniform, normal, constant, Xavier, Kaiming).
#pragma once

#include <string>

#include "core/graph/graph.h"

namespace cohort {

// Fills t (f32 or bf16, contiguous) per init. The random stream is seeded by init.seed, or when
// that is 0 by (run_seed, name), so every rank initialises a parameter identically.
void initialize_parameter(Tensor& t, const Initializer& init, uint64_t run_seed, const std::string& name);

}  // namespace cohort
