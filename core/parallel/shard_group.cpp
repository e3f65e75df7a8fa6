// Shard groups of DataParallel (plan.shard_group = S > 1): ZeRO inside each replica of S ranks,
// local SGD / DiLoCo / co2 between the replicas on each rank's shard (data_parallel.h says how a
// step and a round run).
//
// The one thing to know: the outer rule needs nothing new. It is elementwise but for a few
// whole-model sums, so it runs unchanged with this rank's ZeRO shard standing for the flat model
// (read_outer / write_outer) and those sums taken over the replica (replica_, the role the model
// axis plays under tensor parallelism): the ranks of one position in every replica hold the same
// bucket layout, so their shards line up element for element and their average is the shard of
// the replicas' average. The clip's norm sums each rank's whole shard (padding included: it is
// zero), so norm_ranges_ is one range.
#include <algorithm>
#include <cstring>

#include "core/base/error.h"
#include "core/parallel/data_parallel.h"

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
  replica_ = comm_.get();
}

void DataParallel::init_outer_over_shard() {
  // The shard (build_shards laid it out) from the parameters rank 0 broadcast: every replica
  // starts at the same anchor, and its ranks' shards tile it.
  std::vector<Tensor>& params = trainer_->mutable_parameters();
  for (const Bucket& b : buckets_) copy_shard(b, params, shard_params_.data<float>() + b.shard_offset, false);
  outer_numel_ = static_cast<size_t>(shard_params_.numel());
  const float* shard = shard_params_.data<float>();
  anchor_.assign(shard, shard + outer_numel_);
  round_start_ = anchor_;
  fragments_.at(0).count = outer_numel_;  // one fragment: the whole shard
  norm_ranges_.assign(1, {0, outer_numel_});
  inflight_ = coll::CommBuffer(outer_comm_, outer_numel_);
  // co2's first guess reads the momentum.
  if (plan_.mode == SyncMode::kCo2) outer_.momentum().assign(outer_numel_, 0.0f);
}

}  // namespace cohort::parallel
