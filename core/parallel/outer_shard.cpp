// ZeRO 1 of the outer state for local SGD and CO2 (Rajbhandari et al., SC'20, section 5.1,
// applied to the outer optimizer): rank r keeps block r of the anchor, of the outer momentum
// and (co2) of the previous anchor — the flat model padded with zeros to a multiple of the
// world W, outer_block_ elements each — so the outer optimizer's memory per rank is 1/W.
//
// The one thing to know: the outer step is elementwise, so stepping each block with its own
// momentum block is the whole step, except for two whole-model scalars — the momentum's norm
// (clipping) and, in co2, the penalty's gap and pseudo-gradient norms. Those are sums of the
// blocks' squared norms: one small all-reduce each. Padding stays zero throughout.
//
// co2 keeps its one-round staleness and nearly all its overlap: the all-reduce of round k's
// pseudo-gradient becomes a reduce-scatter launched at the round end, the scalar all-reduces
// and the block's outer step in the middle of round k+1 (tau / 2 inner steps in), and an
// all-gather of the new anchor that lands by its end: each half of the traffic gets half a
// round to travel. The points are fixed by the inner-step count, never by which collective
// happens to have finished, so every rank issues the same collectives in the same order
// (a barrier or evaluation by the caller stays matched). With tau = 1 both happen at the round
// end and only the reduce-scatter overlaps.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/base/error.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/flat.h"
#include "kernels/cpu/optim.h"

namespace cohort::parallel {

namespace coll = transport::coll;

void DataParallel::init_outer_shard(const std::vector<float>& flat) {
  const size_t world = static_cast<size_t>(comm_->size()), rank = static_cast<size_t>(comm_->rank());
  outer_block_ = (flat.size() + world - 1) / world;
  inflight_ = coll::CommBuffer(comm_, outer_block_ * world);
  result_ = coll::CommBuffer(comm_, outer_block_);
  anchor_.assign(outer_block_, 0.0f);  // this rank's block; the padding stays zero
  const size_t lo = std::min(flat.size(), rank * outer_block_);
  const size_t hi = std::min(flat.size(), lo + outer_block_);
  std::copy(flat.begin() + static_cast<std::ptrdiff_t>(lo), flat.begin() + static_cast<std::ptrdiff_t>(hi),
            anchor_.begin());
  if (plan_.mode == SyncMode::kCo2) {
    prev_anchor_ = anchor_;  // x_{-1} = x_0: no gap before the first step
    round_start_ = flat;
    next_anchor_.assign(outer_block_ * world, 0.0f);  // x_1 = x_0: round 0 has no average to apply
    std::copy(flat.begin(), flat.end(), next_anchor_.begin());
  }
}

void DataParallel::end_round_sharded(std::vector<Tensor>& params) {
  // Local SGD: the same outer step on this rank's block b of the model, blocking:
  //     avg_b = (1/W) sum_i x^{(i)}_b   (reduce-scatter of the padded flat parameters)
  //     d_b   = anchor_b - avg_b        (= the block of the averaged pseudo-gradient)
  // then the outer step on anchor_b with momentum_b (clipping by the whole model's norm: one
  // scalar all-reduce), and every rank's new anchor block all-gathered into the parameters.
  flatten(params, inflight_.data());  // the padding past numel_ stays zero
  Clock::time_point start = Clock::now();
  comm_->reduce_scatter(inflight_.data(), result_.data(), outer_block_, coll::DataType::kF32, coll::ReduceOp::kAvg)
      ->wait();
  for (size_t i = 0; i < outer_block_; ++i) result_[i] = anchor_[i] - result_[i];
  auto sum_scalar = [this](double local) {
    float v = static_cast<float>(local);
    return sum_over_ranks(&v, 1);
  };
  // A rank's NaN parameters reach the average here (ranks reduce parameters, not differences):
  // every rank then skips the step alike and restarts from the unchanged anchor.
  if (outer_finite(result_.data(), outer_block_))
    stats_.last_momentum_norm = outer_.step(anchor_, result_.data(), 1.0, sum_scalar);
  comm_->all_gather(anchor_.data(), inflight_.data(), outer_block_, coll::DataType::kF32)->wait();
  note_blocking(start);
  unflatten(inflight_.data(), params);
  ++stats_.rounds;
}

void DataParallel::launch_outer(coll::WorkPtr work) {
  inflight_work_ = std::move(work);
  inflight_launched_ = Clock::now();
  outer_done_seen_ = false;
}

void DataParallel::wait_outer() {
  if (!outer_done_seen_ && !inflight_work_->test()) {  // test() throws the collective's failure
    Clock::time_point start = Clock::now();
    inflight_work_->wait();
    outer_done_at_ = note_wait(start);
  } else if (!outer_done_seen_) {
    outer_done_at_ = Clock::now();
  }
  stats_.comm_seconds += seconds(outer_done_at_ - inflight_launched_);
  inflight_work_.reset();
}

void DataParallel::poll_outer() {
  // Only notes when the collective in flight finished (for the statistics): whether a rank
  // launches its next collective must never depend on timing, or the ranks' orders differ.
  if (inflight_work_ && !outer_done_seen_ && inflight_work_->test()) {
    outer_done_seen_ = true;
    outer_done_at_ = Clock::now();
  }
}

double DataParallel::sum_over_ranks(float* values, size_t n) {
  // Reduced in a member buffer, not the caller's (often a local): a failed reduction may leave
  // a send to a frozen rank holding it (work.h), and the destructor keeps members alive then.
  if (scalars_.size() < n) scalars_.resize(n);
  std::copy(values, values + n, scalars_.begin());
  Clock::time_point start = Clock::now();
  comm_->all_reduce(scalars_.data(), n, coll::DataType::kF32, coll::ReduceOp::kSum)->wait();
  note_blocking(start);
  std::copy(scalars_.begin(), scalars_.begin() + static_cast<std::ptrdiff_t>(n), values);
  return values[0];
}

void DataParallel::outer_step_block() {
  // Notation as end_round_co2, k the round now running: the anchor block is x_k, prev_anchor_
  // x_{k-1}, and result_ the block of e_{k-1} once the reduce-scatter launched when round k-1
  // ended has landed.
  wait_outer();
  if (!outer_finite(result_.data(), outer_block_)) {  // skipped on every rank: x_{k+1} = x_k
    prev_anchor_ = anchor_;
    launch_outer(comm_->all_gather(anchor_.data(), next_anchor_.data(), outer_block_, coll::DataType::kF32));
    phase_ = OuterPhase::kGathering;
    return;
  }
  double scale = 1.0;
  if (plan_.outer.staleness_penalty) {
    // s_k from ||x_k - x_{k-1}||^2 and ||e_{k-1}||^2, each summed over the blocks.
    double gap = 0;
    for (size_t i = 0; i < outer_block_; ++i) {
      double g = static_cast<double>(anchor_[i]) - prev_anchor_[i];
      gap += g * g;
    }
    float sums[2] = {static_cast<float>(gap), static_cast<float>(kernels::cpu::sum_of_squares(result_.data(), static_cast<int64_t>(outer_block_)))};
    sum_over_ranks(sums, 2);
    scale = outer_.staleness_scale_from(sums[0], sums[1]);
  }
  // m_k = beta m_{k-1} + s_k e_{k-1} on the block, ||m_k|| over the blocks, then the step
  // x_{k+1} = x_k - alpha u_k on the block (outer.cpp), and every block all-gathered.
  float m_sq = static_cast<float>(outer_.accumulate(result_.data(), outer_block_, scale));
  const double m_norm = std::sqrt(sum_over_ranks(&m_sq, 1));
  stats_.last_staleness_scale = scale;
  stats_.last_momentum_norm = m_norm;
  prev_anchor_ = anchor_;
  outer_.apply(anchor_, result_.data(), scale, m_norm);
  launch_outer(comm_->all_gather(anchor_.data(), next_anchor_.data(), outer_block_, coll::DataType::kF32));
  phase_ = OuterPhase::kGathering;
}

void DataParallel::advance_outer_shard(bool to_end) {
  // The schedule is fixed by the inner-step count alone, the same on every rank: the outer
  // step at the middle of the round (tau / 2 steps in), the gathered anchor at its end.
  const int64_t pos = inner_steps_ % plan_.tau;
  if (phase_ == OuterPhase::kReducing && (to_end || (plan_.tau >= 2 && pos == plan_.tau / 2))) outer_step_block();
  if (phase_ == OuterPhase::kGathering && to_end) {
    wait_outer();
    phase_ = OuterPhase::kReady;  // next_anchor_ = x_{k+1}, whole
  }
  poll_outer();
}

void DataParallel::end_round_co2_sharded(std::vector<Tensor>& params) {
  // 1. Round k-1's average applied: next_anchor_ = x_{k+1} (after round 0: x_1 = x_0).
  advance_outer_shard(true);
  // 2. e^{(i)}_k = (this rank's round start) - (its parameters now).
  flatten(params, inflight_.data());
  for (size_t i = 0; i < numel_; ++i) inflight_[i] = round_start_[i] - inflight_[i];
  drop_if_not_finite(inflight_.data(), numel_, "the round's pseudo-gradient");
  // 3. Round k+1 starts from x_{k+1} - e^{(i)}_k, as in end_round_co2.
  for (size_t i = 0; i < numel_; ++i) round_start_[i] = next_anchor_[i] - inflight_[i];
  unflatten(round_start_.data(), params);
  // 4. e_k's blocks averaged in the background; nothing touches inflight_ until it is reduced.
  launch_outer(comm_->reduce_scatter(inflight_.data(), result_.data(), outer_block_, coll::DataType::kF32,
                                     coll::ReduceOp::kAvg));
  phase_ = OuterPhase::kReducing;
  ++stats_.rounds;
}

void DataParallel::save_outer_shard(checkpoint::CheckpointExtra& extra) {
  // co2: the step in flight is finished first (it depends only on state fixed at the last
  // round end), so the file holds x_{k+1} and a resumed run needs no collective to catch up.
  if (plan_.mode == SyncMode::kCo2) advance_outer_shard(true);
  auto tensor = [&](const std::vector<float>& v, size_t n) {
    Tensor t = Tensor::zeros({static_cast<int64_t>(n)}, DType::kF32);
    if (!v.empty()) std::memcpy(t.raw(), v.data(), n * sizeof(float));
    return t;
  };
  extra.tensors["parallel.zero.anchor"] = tensor(anchor_, outer_block_);
  extra.tensors["parallel.zero.outer_momentum"] = tensor(outer_.momentum(), outer_block_);  // zeros before round 1
  if (plan_.mode == SyncMode::kCo2) {
    extra.tensors["parallel.zero.prev_anchor"] = tensor(prev_anchor_, outer_block_);
    extra.tensors["parallel.round_start"] = tensor(round_start_, numel_);
    extra.tensors["parallel.next_anchor"] = tensor(next_anchor_, numel_);
    extra.ints["parallel.outer_phase"] = static_cast<int64_t>(phase_);
  }
  extra.ints["parallel.zero.world"] = comm_->size();
  extra.ints["parallel.zero.rank"] = comm_->rank();
  extra.ints["parallel.mode"] = static_cast<int64_t>(plan_.mode);
  extra.ints["parallel.inner_steps"] = inner_steps_;
  extra.ints["parallel.rounds"] = stats_.rounds;
}

void DataParallel::load_outer_shard(const checkpoint::CheckpointExtra& extra) {
  COHORT_CHECK(!inflight_work_, Status::kInvalidState, "data parallel: cannot load while a reduction is in flight");
  auto ints = [&](const std::string& name) {
    auto it = extra.ints.find(name);
    COHORT_CHECK(it != extra.ints.end(), Status::kInvalidArgument, "data parallel: the checkpoint has no '", name,
                 "' (saved without ZeRO 1 of the outer state?)");
    return it->second;
  };
  auto tensor = [&](const std::string& name, size_t n) -> const Tensor& {
    auto it = extra.tensors.find(name);
    COHORT_CHECK(it != extra.tensors.end(), Status::kInvalidArgument, "data parallel: the checkpoint has no '", name,
                 "' (saved without ZeRO 1 of the outer state?)");
    COHORT_CHECK(it->second.dtype() == DType::kF32 && static_cast<size_t>(it->second.numel()) == n,
                 Status::kInvalidArgument, "data parallel: '", name, "' has ", it->second.numel(),
                 " elements, this rank expects ", n, " (another model or world?)");
    return it->second;
  };
  COHORT_CHECK(ints("parallel.zero.world") == comm_->size() && ints("parallel.zero.rank") == comm_->rank(),
               Status::kInvalidArgument, "data parallel: the checkpoint holds the outer-state block of rank ",
               ints("parallel.zero.rank"), " of ", ints("parallel.zero.world"), ", this is rank ", comm_->rank(),
               " of ", comm_->size());
  COHORT_CHECK(ints("parallel.mode") == static_cast<int64_t>(plan_.mode), Status::kInvalidArgument,
               "data parallel: the checkpoint was saved in mode ", ints("parallel.mode"), ", the plan is ",
               mode_name(plan_.mode));
  const bool co2 = plan_.mode == SyncMode::kCo2;
  const Tensor &a = tensor("parallel.zero.anchor", outer_block_), &m = tensor("parallel.zero.outer_momentum", outer_block_);
  const Tensor* co2_state[3] = {nullptr, nullptr, nullptr};
  int64_t phase = 0;
  if (co2) {
    co2_state[0] = &tensor("parallel.zero.prev_anchor", outer_block_);
    co2_state[1] = &tensor("parallel.round_start", numel_);
    co2_state[2] = &tensor("parallel.next_anchor", numel_);
    phase = ints("parallel.outer_phase");
    COHORT_CHECK(phase == static_cast<int64_t>(OuterPhase::kIdle) || phase == static_cast<int64_t>(OuterPhase::kReady),
                 Status::kInvalidArgument, "data parallel: outer phase ", phase, " in the checkpoint is not a resting one");
  }
  const int64_t steps = ints("parallel.inner_steps"), rounds = ints("parallel.rounds");
  // Everything verified: now change state.
  auto load = [](const Tensor& t, std::vector<float>& v) {
    v.resize(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), t.raw(), v.size() * sizeof(float));
  };
  load(a, anchor_);
  load(m, outer_.momentum());
  if (co2) {
    load(*co2_state[0], prev_anchor_);
    load(*co2_state[1], round_start_);
    std::memcpy(next_anchor_.data(), co2_state[2]->raw(), numel_ * sizeof(float));  // the padding stays zero
    phase_ = static_cast<OuterPhase>(phase);
  }
  inner_steps_ = steps;
  stats_.rounds = rounds;
}

}  // namespace cohort::parallel
