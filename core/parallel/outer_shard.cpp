// ZeRO 1 of the outer state for local SGD (Rajbhandari et al., SC'20, section 5.1,
// applied to the outer optimizer): rank r keeps block r of the anchor and of the outer momentum
// — of each fragment of the outer synchronisation (the whole model with one), padded with zeros
// to a multiple of the world W; outer_block_ elements in all — so the outer optimizer's memory
// per rank is 1/W. A fragment's round end reduce-scatters, steps and all-gathers its elements
// alone (with none on this rank — another pipeline stage's — it skips those, as its data group
// does, and still takes part in the checks and the clip's norm).
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

void DataParallel::init_outer_shard(const std::vector<float>& outer) {
  const size_t world = static_cast<size_t>(comm_->size()), rank = static_cast<size_t>(comm_->rank());
  size_t padded = 0;
  outer_block_ = 0;
  for (Fragment& fr : fragments_) {
    fr.block = (fr.count + world - 1) / world;
    fr.shard_begin = outer_block_;
    fr.padded_begin = padded;
    outer_block_ += fr.block;
    padded += fr.block * world;
  }
  inflight_ = coll::CommBuffer(comm_, padded);
  result_ = coll::CommBuffer(comm_, outer_block_);
  anchor_.assign(outer_block_, 0.0f);  // this rank's blocks; the padding stays zero
  for (const Fragment& fr : fragments_) {
    const size_t lo = std::min(fr.count, rank * fr.block), hi = std::min(fr.count, lo + fr.block);
    std::copy(outer.begin() + static_cast<std::ptrdiff_t>(fr.begin + lo),
              outer.begin() + static_cast<std::ptrdiff_t>(fr.begin + hi),
              anchor_.begin() + static_cast<std::ptrdiff_t>(fr.shard_begin));
  }
}

void DataParallel::end_round_sharded(const Fragment& fr, std::vector<Tensor>& params) {
  // Local SGD: the same outer step on this rank's block b of fragment fr (of the model with one
  // fragment), blocking:
  //     avg_b = (1/W) sum_i x^{(i)}_b   (reduce-scatter of the fragment's padded parameters)
  //     d_b   = anchor_b - avg_b        (= the block of the averaged pseudo-gradient)
  // then the outer step on anchor_b with momentum_b (clipping by the norm of the whole momentum,
  // every fragment's blocks: one scalar all-reduce), and every rank's new anchor block
  // all-gathered into the fragment's parameters.
  const size_t b = fr.shard_begin, e = fr.shard_begin + fr.block;
  float* padded = inflight_.data() + fr.padded_begin;  // the padding past fr.count stays zero
  float* at = inflight_.data() + (fr.padded_begin - fr.begin);  // parameter i at at + outer_at_[i]
  flatten_some(params, fr.params, outer_at_, at);
  Clock::time_point start = Clock::now();
  if (fr.block > 0)  // none where the fragment holds none of this rank's parameters: its data group alike
    comm_->reduce_scatter(padded, result_.data() + b, fr.block, coll::DataType::kF32, coll::ReduceOp::kAvg)->wait();
  for (size_t i = b; i < e; ++i) result_[i] = anchor_[i] - result_[i];
  // The clip's norm: the blocks' squares summed over the data axis; under model axes each rank's
  // blocks are of its part of the model, so only what it counts (norm_ranges_) and summed over the
  // replica too.
  auto sum_scalar = [this](double local) {
    float v = static_cast<float>(model_ ? counted_block_sum_of_squares() : local);
    sum_over_ranks(&v, 1);
    return model_ ? sum_over_model_axis(&v, 1) : static_cast<double>(v);
  };
  // A rank's NaN parameters reach the average here (ranks reduce parameters, not differences):
  // every rank then skips the step alike and restarts from the unchanged anchor.
  if (outer_finite(result_.data() + b, fr.block))
    stats_.last_momentum_norm = outer_.step(anchor_, result_.data(), 1.0, sum_scalar, b, fr.block);
  if (fr.block > 0) comm_->all_gather(anchor_.data() + b, padded, fr.block, coll::DataType::kF32)->wait();
  note_blocking(start);
  unflatten_some(at, outer_at_, params, fr.params);
  if (fr.offset == 0) ++stats_.rounds;
  if (fr.block > 0) ++stats_.outer_syncs;
}

double DataParallel::counted_block_sum_of_squares() {
  const size_t rank = static_cast<size_t>(comm_->rank());
  const std::vector<float>& m = outer_.momentum();
  double sum = 0;
  for (const Fragment& fr : fragments_) {
    // This rank's block: the outer state's elements [start, start + block) clipped to the fragment's.
    const size_t start = fr.begin + rank * fr.block, end = fr.begin + fr.count;
    for (const auto& [offset, count] : norm_ranges_) {
      const size_t a = std::max(start, offset), z = std::min({start + fr.block, offset + count, end});
      if (a < z) sum += kernels::cpu::sum_of_squares(m.data() + fr.shard_begin + (a - start), static_cast<int64_t>(z - a));
    }
  }
  return sum;
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
  extra.ints["parallel.fragments"] = static_cast<int64_t>(fragments_.size());  // the blocks are per fragment
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
  // Written before streaming synchronisation: one fragment.
  const int64_t fragments = extra.ints.count("parallel.fragments") ? ints("parallel.fragments") : 1;
  COHORT_CHECK(fragments == static_cast<int64_t>(fragments_.size()), Status::kInvalidArgument,
               "data parallel: the checkpoint's outer-state blocks are cut into ", fragments, " fragment(s), the "
               "plan's outer_fragments = ", fragments_.size());
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
