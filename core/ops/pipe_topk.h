// What a top-k compressed pipeline edge (pipe_send_topk / pipe_recv_topk, collective.h) puts on
// the wire, as pure functions: the operators size their messages with them, so a planner that
// prices a compressed cut with them is exact. No communicator, graph or tensor needed.
//
// Forward message (one per micro-batch and edge): which entries were kept, then the k values in
// the activation's dtype (f32 or bf16), in ascending index order, packed without padding:
//   bytes [0, I)                       the kept entries: k int32 flat indices, ascending (I = 4k),
//                                      or, when that is smaller, a bitmap of the n entries in
//                                      32-bit words, entry i at bit i % 32 of word i / 32
//                                      (I = 4 ceil(n / 32): kept fractions above 1/32)
//   bytes [I, I + k * dtype_size)      values[k]
// Both sides know n and k, so both know which form a message has. Backward message: the k values
// of the gradient at those indices, in the same dtype, no indices (both sides hold them from the
// forward pass).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor/dtype.h"

namespace cohort {

// k = max(1, ceil(keep * numel)), at most numel. A product within a relative 1e-12 of an integer
// counts as that integer (0.1 of 30 is 3, although 0.1 * 30 is 3.0000000000000004 in doubles).
// Throws kInvalidArgument unless keep is in (0, 1] and 1 <= numel <= INT32_MAX (the indices are
// int32).
int64_t topk_count(int64_t numel, double keep);

// Bytes of the kept entries' description in a forward message of k of numel entries: 4k, or
// the bitmap's 4 ceil(numel / 32) when smaller (topk_bitmap says which).
size_t topk_index_bytes(int64_t numel, int64_t k);
bool topk_bitmap(int64_t numel, int64_t k);

// The same per entry of an edge, for pricing a cut: 4 keep bytes, or 1/8 with the bitmap.
double topk_index_bytes_per_entry(double keep);

// Bytes of the forward message of an activation of numel elements of dtype: topk_index_bytes +
// k * dtype_size(dtype). Throws as topk_count, and kInvalidArgument for a dtype other than
// f32/bf16.
size_t topk_message_bytes(int64_t numel, double keep, DType dtype);

// Bytes of the backward message (the gradient's k values): k * dtype_size(dtype).
size_t topk_gradient_bytes(int64_t numel, double keep, DType dtype);

// Writes the forward message of x[numel] (elem_bytes 4 or 2) keeping its k entries of largest
// magnitude (NaN counting above every number) into message (topk_index_bytes + k elem_bytes),
// and their indices, ascending, into idx[k].
void topk_write_message(const void* x, size_t elem_bytes, int64_t numel, int64_t k, int32_t* idx, void* message);

// The kept entries' indices of a received message into idx[k]. Throws kCorrupt, naming `what`,
// when they are not k strictly ascending indices below numel (or the bitmap marks another count).
void topk_read_indices(const void* message, int64_t numel, int64_t k, int32_t* idx, const std::string& what);

}  // namespace cohort
