// Shard groups of DataParallel (plan.shard_group = S > 1): ZeRO inside each replica of S ranks,
// local SGD / DiLoCo / co2 between the replicas on each rank's shard (data_parallel.h says how a
// step and a round run).
//
// The one thing to know: the outer rule needs nothing new. It is elementwise but for a few
// whole-model sums, so it runs unchanged with this rank's ZeRO shard standing for the flat model
// (read_outer / write_outer) and those sums taken over the replica (sum_over_model, as over the
// model axis under tensor parallelism): the ranks of one position in every replica hold the same
// bucket layout, so their shards line up element for element and their average is the shard of
// the replicas' average. The clip's norm sums each rank's whole shard (padding included: it is
// zero), so norm_ranges_ covers it all: one range per fragment. Under tensor / pipeline axes the
// groups split each model position's data axis; the replica is then its positions times the model
// ranks, the sums run over both (sum_over_model) and norm_ranges_ keeps only the pieces of the
// parameters this rank counts (counts_in_norm).
//
// Streaming synchronisation (plan.outer_fragments = F > 1): a fragment is whole parameters
// (build_fragments' cut, the same as without groups), and its part of this rank's shard is the
// intersection — the pieces of its parameters inside this rank's block of each bucket, plus the
// bucket's padding where its last parameter is the fragment's. The outer state is laid out
// fragment after fragment, each its pieces in shard order (cut_shard_into_fragments), so a
// fragment is one contiguous slice [begin, begin + count) of the outer state, as unsharded:
// every round end, all-reduce over outer_comm_ (the same pieces at the same position of every
// replica), merge and norm runs on it unchanged. Per rank the outer state is still the shard's
// elements (outer_numel_), only reordered; each outer all-reduce carries ~1/(F S) of the model.
// A fragment may have no piece on a position (a small parameter inside another position's
// block): its ranks there send nothing, alike in every replica, and still take part in the
// replica's collectives (finiteness, norms). With F = 1 the one fragment is the whole shard, in
// its own order: the layout, and checkpoints, are as before.
#include <algorithm>
#include <cstring>

#include "core/base/error.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/flat.h"

namespace cohort::parallel {

namespace coll = transport::coll;

void DataParallel::split_shard_groups() {
  // Data rank d: replica d / S, position d % S — a replica's ranks consecutive, where a launcher
  // puts the ranks of one host (the fast link). Two splits of the group, collective over it.
  const int s = plan_.shard_group, d = group_comm_->rank();
  COHORT_CHECK(group_comm_->size() % s == 0, Status::kInvalidPlan, "plan: shard_group ", s,
               " does not divide the data-parallel degree ", group_comm_->size());
  comm_ = group_comm_->split(d / s, d % s, str_cat(group_comm_->name(), "/replica"));
  outer_comm_ = group_comm_->split(d % s, d / s, str_cat(group_comm_->name(), "/outer"));
}

void DataParallel::init_outer_over_shard() {
  // The shard (build_shards laid it out) from the parameters rank 0 broadcast: every replica
  // starts at the same anchor, and its ranks' shards tile it.
  std::vector<Tensor>& params = trainer_->mutable_parameters();
  for (const Bucket& b : buckets_) copy_shard(b, params, shard_params_.data<float>() + b.shard_offset, false);
  outer_numel_ = static_cast<size_t>(shard_params_.numel());
  cut_shard_into_fragments();
  anchor_.assign(outer_numel_, 0.0f);
  for (const Fragment& fr : fragments_) read_outer(fr, params, anchor_.data());
  round_start_ = anchor_;
  inflight_ = coll::CommBuffer(outer_comm_, outer_numel_);
  // co2's first guess reads the momentum.
  if (plan_.mode == SyncMode::kCo2) outer_.momentum().assign(outer_numel_, 0.0f);
}

void DataParallel::cut_shard_into_fragments() {
  const std::vector<Tensor>& params = trainer_->parameters();
  std::vector<size_t> fragment_of(params.size(), 0);  // parameter -> its fragment
  for (size_t f = 0; f < fragments_.size(); ++f)
    for (size_t i : fragments_[f].params) fragment_of[i] = f;
  auto add = [this](size_t f, size_t at, size_t n) {  // the shard's [at, at + n) to fragment f
    std::vector<std::pair<size_t, size_t>>& pieces = fragments_[f].pieces;
    if (!pieces.empty() && pieces.back().first + pieces.back().second == at) pieces.back().second += n;
    else pieces.emplace_back(at, n);
  };
  // The whole model's norms count every element of the shard (its padding is zero), but under
  // model axes only the parameters this rank counts (counts_in_norm: a replicated parameter on
  // one of its holders): intervals of the shard, sorted, then each fragment's pieces cut by them
  // into ranges of the outer state below (intervals, not an element map: a shard holds up to billions).
  std::vector<std::pair<size_t, size_t>> counted;  // [first, last) in the shard
  if (!model_) counted.emplace_back(0, outer_numel_);
  // This rank's block of bucket b is its elements [lo, lo + block), at b.shard_offset in the
  // shard: its parameters' pieces (for_each_block_piece), then the padding, after the bucket's
  // last parameter.
  const size_t position = static_cast<size_t>(comm_->rank());
  for (const Bucket& b : buckets_) {
    for_each_block_piece(b, position, params, [&](size_t j, size_t begin, size_t end, size_t lo) {
      const size_t at = b.shard_offset + (begin - lo);
      add(fragment_of[b.params[j]], at, end - begin);
      if (model_ && trainer_->counts_in_norm()[b.params[j]]) counted.emplace_back(at, at + (end - begin));
    });
    const size_t lo = position * b.block, hi = lo + b.block;
    const size_t padding = std::max(lo, b.numel);
    if (padding < hi) add(fragment_of[b.params.back()], b.shard_offset + (padding - lo), hi - padding);
  }
  std::sort(counted.begin(), counted.end());
  size_t begin = 0;
  norm_ranges_.clear();
  for (Fragment& fr : fragments_) {
    fr.begin = begin;
    fr.count = 0;
    for (const auto& [at, n] : fr.pieces) {
      // The counted intervals overlapping [at, at + n): from the last one starting at or before it.
      auto it = std::upper_bound(counted.begin(), counted.end(), std::make_pair(at, ~size_t{0}));
      if (it != counted.begin()) --it;
      for (; it != counted.end() && it->first < at + n; ++it) {
        const size_t a = std::max(at, it->first), z = std::min(at + n, it->second);
        if (a >= z) continue;
        const size_t o = fr.begin + fr.count + (a - at);  // its place in the outer state
        if (!norm_ranges_.empty() && norm_ranges_.back().first >= fr.begin &&
            norm_ranges_.back().first + norm_ranges_.back().second == o)
          norm_ranges_.back().second += z - a;
        else
          norm_ranges_.emplace_back(o, z - a);
      }
      fr.count += n;
    }
    begin += fr.count;
  }
  COHORT_ASSERT(begin == outer_numel_, "data parallel: the fragments hold ", begin, " of the shard's ", outer_numel_,
                " elements");
}

DataParallel::OuterLayout DataParallel::outer_layout() const {
  OuterLayout layout;
  if (!grouped()) return layout;
  const std::vector<Tensor>& params = trainer_->parameters();
  const std::vector<size_t> first = flat_offsets(params);  // each parameter's first flat index
  // The shard's elements (cut_shard_into_fragments' bucket coordinates) to flat indices.
  std::vector<int64_t> of_shard(outer_numel_, -1);
  for (const Bucket& b : buckets_)
    for_each_block_piece(b, static_cast<size_t>(comm_->rank()), params,
                         [&](size_t j, size_t begin, size_t end, size_t lo) {
                           for (size_t x = begin; x < end; ++x)
                             of_shard[b.shard_offset + (x - lo)] =
                                 static_cast<int64_t>(first[b.params[j]] + (x - b.offsets[j]));
                         });
  for (const Fragment& fr : fragments_) {
    layout.fragment_begin.push_back(fr.begin);
    for (const auto& [at, n] : fr.pieces)
      layout.flat.insert(layout.flat.end(), of_shard.begin() + static_cast<std::ptrdiff_t>(at),
                         of_shard.begin() + static_cast<std::ptrdiff_t>(at + n));
  }
  return layout;
}

}  // namespace cohort::parallel
