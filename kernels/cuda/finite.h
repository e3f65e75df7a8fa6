// Finiteness of a device scalar acted on without a host round trip: a data-parallel rank folds
// its loss's finiteness into a gradient buffer it is about to reduce with the other ranks, so
// that every rank sees a NaN when any rank's loss was NaN or Inf (core/parallel, DDP over NCCL).
#pragma once

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

// Queued on `stream`: *dst (device memory) becomes NaN when the scalar at `value` (device memory,
// of dtype `type`) is NaN or Inf, and stays as it is otherwise.
void poison_if_not_finite(float* dst, const void* value, DType type, cudaStream_t stream);

}  // namespace cohort::kernels::cuda
