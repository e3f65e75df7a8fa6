// ZeRO 1 of the outer state for local SGD (Rajbhandari et al., SC'20, section 5.1,
// applied to the outer optimizer): rank r keeps block r of the anchor and of the outer momentum
// — the flat model padded with zeros to a multiple of the world W, outer_block_ elements each —
// so the outer optimizer's memory per rank is 1/W.
//
// The one thing to know: the outer step is elementwise, so stepping each block with its own
// momentum block is the whole step, except for one whole-model scalar — the momentum's norm
// (clipping), a sum of the blocks' squared norms: one small all-reduce. Padding stays zero
// throughout.
//
// co2 takes no stage (plan.cpp): every rank's guess needs the whole anchor and momentum.
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
  ++stats_.outer_syncs;
}

double DataParallel::sum_over(coll::Communicator& comm, std::vector<float>& buffer, float* values, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  std::copy(values, values + n, buffer.begin());
  Clock::time_point start = Clock::now();
  comm.all_reduce(buffer.data(), n, coll::DataType::kF32, coll::ReduceOp::kSum)->wait();
  note_blocking(start);
  std::copy(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(n), values);
  return values[0];
}

void DataParallel::save_outer_shard(checkpoint::CheckpointExtra& extra) {
  auto tensor = [&](const std::vector<float>& v, size_t n) {
    Tensor t = Tensor::zeros({static_cast<int64_t>(n)}, DType::kF32);
    if (!v.empty()) std::memcpy(t.raw(), v.data(), n * sizeof(float));
    return t;
  };
  extra.tensors["parallel.zero.anchor"] = tensor(anchor_, outer_block_);
  extra.tensors["parallel.zero.outer_momentum"] = tensor(outer_.momentum(), outer_block_);  // zeros before round 1
  extra.ints["parallel.zero.world"] = comm_->size();
  extra.ints["parallel.zero.rank"] = comm_->rank();
  extra.ints["parallel.mode"] = static_cast<int64_t>(plan_.mode);
  extra.ints["parallel.inner_steps"] = inner_steps_;
  extra.ints["parallel.rounds"] = stats_.rounds;
}

void DataParallel::load_outer_shard(const checkpoint::CheckpointExtra& extra) {
  COHORT_CHECK(!any_in_flight(), Status::kInvalidState, "data parallel: cannot load while a reduction is in flight");
  auto ints = [&](const std::string& name) {
    return saved_int(extra, name, " (saved without ZeRO 1 of the outer state?)");
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
  const Tensor &a = tensor("parallel.zero.anchor", outer_block_), &m = tensor("parallel.zero.outer_momentum", outer_block_);
  const int64_t steps = ints("parallel.inner_steps"), rounds = ints("parallel.rounds");
  // Everything verified: now change state.
  auto load = [](const Tensor& t, std::vector<float>& v) {
    v.resize(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), t.raw(), v.size() * sizeof(float));
  };
  load(a, anchor_);
  load(m, outer_.momentum());
  inner_steps_ = steps;
  stats_.rounds = rounds;
}

}  // namespace cohort::parallel
