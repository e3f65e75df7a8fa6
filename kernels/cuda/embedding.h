// Embedding lookup and its gradient on the GPU, with the semantics of kernels/cpu/embedding.h:
// weight [V, C] and dweight [V, C] of one storage type (fp32 or bf16), ids int32 [n].
//
// The one thing to know: the gradient is deterministic and equals the CPU's bit for bit in fp32.
// Each vocabulary row sums its dy rows in ascending position, from 0, in fp32, as
// kernels/cpu/embedding.cpp does, and is rounded once to the storage type; no atomics, so two
// runs (and a run with or without data parallelism) give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace cohort::kernels::cuda {

// out[i, :] = weight[ids[i], :]; a row whose id is outside [0, V) is filled with NaN (instead of
// reading out of bounds), so a bad id shows up in the loss.
void embedding_forward(DType type, const void* weight, const int32_t* ids, void* out, int64_t n,
                       int64_t V, int64_t C, cudaStream_t stream);

// Bytes of device workspace embedding_backward needs for n ids of a vocabulary of V (the sorted
// ids and positions and the radix sort's own scratch). Host-only; throws kInvalidArgument for
// sizes the kernels do not take (n or V above 2^31 - 1, V < 1).
size_t embedding_backward_workspace(int64_t n, int64_t V);

// dweight[v, :] = sum over the positions i with ids[i] == v, ascending, of dy[i, :] (overwritten:
// rows no id names become 0; ids outside [0, V) are skipped). Stable radix sort of (id, position)
// pairs, then one warp per vocabulary row finds its run of the sorted ids by binary search and
// sums it. workspace: embedding_backward_workspace(n, V) bytes, 16-byte aligned.
void embedding_backward(DType type, const int32_t* ids, const void* dy, void* dweight, int64_t n,
                        int64_t V, int64_t C, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream);

}  // namespace cohort::kernels::cuda
