// Moving a sharded parameter (Value::shard, a list of ShardCut) between its whole layout and the
// block one rank holds. The one thing to know: a cut keeps `groups` in order and takes block
// `index` of each, so a fused q|k|v weight cut 3 groups by T parts gives rank r the q, k and v
// rows of its heads, still laid out q|k|v — what attention over fewer heads expects.
#pragma once

#include <vector>

#include "core/graph/graph.h"
#include "core/tensor/tensor.h"

namespace cohort {

// The whole parameter's shape, given a block's shape and the cuts that made it.
Shape shard_whole_shape(const Shape& block, const std::vector<ShardCut>& cuts);

// The block of `whole` (host, contiguous, any dtype) that `cuts` select, as a new contiguous
// host tensor. Throws kShapeMismatch when an extent does not divide as the cuts say.
Tensor take_shard(const Tensor& whole, const std::vector<ShardCut>& cuts);

// Writes `block` (what take_shard would return for `cuts`) into its place in `whole` (host,
// contiguous, same dtype); the rest of `whole` is left as it was.
void put_shard(Tensor& whole, const Tensor& block, const std::vector<ShardCut>& cuts);

}  // namespace cohort
