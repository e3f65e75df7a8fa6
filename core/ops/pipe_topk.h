// What a top-k compressed pipeline edge (pipe_send_topk / pipe_recv_topk, collective.h) puts on
// the wire, as pure functions: the operators size their messages with them, so a planner that
// prices a compressed cut with them is exact. No communicator, graph or tensor needed.
//
// Forward message (one per micro-batch and edge): k int32 flat indices, ascending, then the k
// values in the activation's dtype (f32 or bf16), packed without padding:
//   bytes [0, 4k)                      int32 idx[k]
//   bytes [4k, 4k + k * dtype_size)    values[k]
// Backward message: the k values of the gradient at those indices, in the same dtype, no indices
// (both sides hold them from the forward pass).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor/dtype.h"

namespace cohort {

// k = max(1, ceil(keep * numel)), at most numel. A product within a relative 1e-12 of an integer
// counts as that integer (0.1 of 30 is 3, although 0.1 * 30 is 3.0000000000000004 in doubles).
// Throws kInvalidArgument unless keep is in (0, 1] and 1 <= numel <= INT32_MAX (the indices are
// int32).
int64_t topk_count(int64_t numel, double keep);

// Bytes of the forward message of an activation of numel elements of dtype: k * (4 +
// dtype_size(dtype)). Throws as topk_count, and kInvalidArgument for a dtype other than f32/bf16.
size_t topk_message_bytes(int64_t numel, double keep, DType dtype);

// Bytes of the backward message (the gradient's k values): k * dtype_size(dtype).
size_t topk_gradient_bytes(int64_t numel, double keep, DType dtype);

}  // namespace cohort
