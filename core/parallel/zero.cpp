// ZeRO stages 1-3 of DataParallel (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
// Training Trillion Parameter Models", SC'20, sections 5.1-5.3), and the model-state memory
// figures of every mode.
//
// The one thing to know: the shard is per bucket, not one slice of the whole flattened model.
// Each DDP bucket is padded with zeros to a multiple of the world W and split into W equal
// blocks; rank r owns block r of every bucket (as FSDP shards each flat parameter). This keeps
// the stage-2 reduce-scatter bucketed and overlapped with backward — a single global slice
// would need uneven per-bucket pieces, which reduce_scatter does not take — while every rank
// still owns 1/W of the elements (up to W - 1 padding elements per bucket).
//
// The update is DDP's, element for element: g = (1/W) sum_i g_i; the clip factor uses the
// global norm ||g|| = sqrt(sum_r ||g_shard_r||^2) (one scalar all-reduce); SGD momentum, AdamW
// moments and weight decay are elementwise, so stepping each block with its own state is the
// same as stepping the whole. Padding stays zero: zero gradient, zero parameter, zero update.
//
// Stage 3 keeps the same shards and adds one thing: between steps no rank holds whole
// parameters. Each parameter's Storage gives its memory back (Storage::release); when a node is
// about to read one of a bucket's parameters the bucket is all-gathered straight from the
// shards into one buffer, and each parameter's Storage borrows its slice of it (no copy);
// after the last reader of the span the buffer goes again. The span list (build_uses) comes from the
// trainer's node sequence, so every rank launches the same gathers in the same order, and the
// next span's gather is launched when one begins: it travels while the current layers compute.
//
// Stage 3 over the data axis of a tensor grid (issue #27). Each tensor position's buckets hold
// its own blocks of the weights, and comm_ is the data axis: the ranks holding the same blocks.
// Why its gathers (on comm_, launched and waited in before_node) and the tensor axes'
// collectives (DAG nodes on the x / y / z communicators, launched by their node and waited by
// their result's first reader, or right away without overlap) can neither mis-match nor
// deadlock:
//   1. Matching. A communicator matches its collectives by the order its ranks launch them. The
//      ranks of one data group have the same tensor position, hence the same rank graph, the
//      same node order and the same bucket layout: build_uses gives each the same spans, and
//      every collective on comm_ (gathers in before_node, gradient reduce-scatters as backward
//      produces a bucket — a deterministic point in the node order, not a race) is launched at
//      the same position in the same order. The ranks of one tensor axis run rewrites of one
//      model whose nodes come in the same order at every position, so they launch their axis
//      collectives at the same positions too. No communicator is shared between the two.
//   2. Progress. Launching never blocks; the communicators' progress thread moves every
//      operation in flight, whichever the training thread is waiting on; so a collective that
//      every member has launched completes.
//   3. No cycle. Order a rank's waits by (position, where in the node: before_node's gathers in
//      span order, then the node's own result). Take the blocked rank R with the least such
//      point p over all blocked ranks, waiting on collective C. R launched C at a point before
//      p; by 1 every other member of C's communicator launches C at that same point, and each
//      of them is finished, running, or blocked at a point >= p (p is least) — past C's launch.
//      So all launched C, and by 2 it completes: R is not blocked. Hence no rank blocks forever.
//
// Stage 3 under micro-batches and pipeline stages (issue #28). The trainer then runs several
// executor orders a step: one per schedule slot (a chunk's forward or backward on one micro-
// batch), in the schedule's order. Trainer::parameter_reads lays them end to end into one
// position sequence for the step, and step_segments marks where each slot begins: a bucket's
// spans are cut per slot (as the one-order step cuts them into forward and backward), so a bucket
// is gathered for each slot that reads it and released after that slot's last reader: it is
// whole from its span's prefetch to the span's end, as without micro-batches, never for the
// whole step — at the price of up to 2 x micro-batches gathers of a bucket a step (one per
// forward and backward slot that reads it; fewer where its spans meet with no other bucket in
// between, as the last layers' forward and backward in 1F1B). The gradients are unchanged: the
// trainer accumulates every micro-batch's into whole buffers and hands each to on_gradient once,
// as the slot bringing its last contribution produces it (a tied parameter's, and the step's
// last bucket, which waits for the loss, after the schedule), so the bucket's reduce-scatter runs
// once a step (as stages 1-2 reduce theirs), launched at the same point of the step sequence on
// every rank of the group. The derivation above extends over the slots; the pipe axis adds
// point-to-point sends (never waited for inside a slot: Trainer::finish_sends) and receives (a
// pipe_recv node waits for the previous or next stage of the same data index), and after the
// schedule the loss broadcast and the tied gradients' all-reduces:
//   1'. Matching. The ranks of one data group hold the same stage(s), so they have the same
//      chunk executors, the same schedule (pipeline_schedule depends on the stage index, not the
//      data index) and the same bucket layout: the same step sequence and the same spans; every
//      gather and gradient reduce-scatter on comm_ is launched at the same point of that
//      sequence, in the same order. Sends and receives pair up on the pipe communicator in
//      program order as without ZeRO, which neither adds nor moves any.
//   3'. No cycle. Without ZeRO the step is deadlock-free: its happens-before graph — each rank's
//      program order, an edge from each send to its receive, and each collective (the tensor
//      axes', the loss broadcast, the tied all-reduce) one node after every member's previous
//      event and before every member's next — is acyclic. The data indices run copies of one
//      such graph; a gather (or reduce-scatter) adds a node joining the copies of one point (1').
//      Mapping every copy onto the first and each such node onto the point it precedes takes
//      every edge to an edge or a point of the same program order, so a cycle would map onto a
//      cycle of the acyclic graph: the graph with the gathers is acyclic too. Every wait is one of its edges (a receive on
//      its send, a collective on each member's launch), and launches and sends never block (2.):
//      the blocked wait of least depth in the graph waits for an event of lesser depth, which
//      has therefore happened, so it completes (2.). Hence no wait blocks forever.
// One thing stage 3 adds to the graph's reads: a collective node reading a parameter (the
// all-gather of a weight's Z blocks) still reads it while in flight, so Trainer::parameter_reads
// counts its read until the executor waits for it, and the bucket outlives the send.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/base/error.h"
#include "core/parallel/data_parallel.h"
#include "kernels/cpu/optim.h"

namespace cohort::parallel {

namespace coll = transport::coll;

void DataParallel::build_shards(const optim::Optimizer& inner) {
  const size_t world = static_cast<size_t>(comm_->size());
  size_t shard = 0;
  for (Bucket& b : buckets_) {
    b.padded = (b.numel + world - 1) / world * world;
    b.block = b.padded / world;
    b.shard_offset = shard;
    shard += b.block;
    // Stage 2 allocates the bucket buffer for each step's reduction only (on_gradient); stage
    // 1 keeps it, in registered memory where the communicator has some.
    if (plan_.zero_stage >= 2) b.buf.reset();
    else b.buf = coll::CommBuffer(comm_, b.padded);
  }
  shard_params_ = Tensor::zeros({static_cast<int64_t>(shard)}, DType::kF32);
  shard_grads_ = Tensor::zeros({static_cast<int64_t>(shard)}, DType::kF32);
  // The trainer's optimizer's hyper-parameters and position in the schedule (a trainer may have
  // stepped before attach); its state now covers the shard only.
  shard_optimizer_ = std::make_unique<optim::Optimizer>(inner.config());
  shard_optimizer_->set_step_count(inner.step_count());
}

void DataParallel::launch_reduction(Bucket& b) {
  b.launched = Clock::now();
  if (b.dev.defined()) {  // on the device communicator, after the copies queued into it
    b.work = device_comm_->all_reduce(b.dev.raw(), b.numel, coll::DataType::kF32, coll::ReduceOp::kAvg);
    return;
  }
  if (b.topk) {  // this rank's message of its gradient plus residual, gathered from every rank
    b.topk->encode(b.buf.data(), b.message.data());
    b.work = comm_->all_gather(b.message.data(), b.messages.data(), b.message.size(), coll::DataType::kU8);
    return;
  }
  // The padding must reduce to zero: a step that failed half-way may have left results there.
  std::fill(b.buf.begin() + static_cast<std::ptrdiff_t>(b.numel), b.buf.end(), 0.0f);
  if (plan_.zero_stage >= 2) {
    // Rank r receives the average of block r in place: buf[r * block, (r + 1) * block).
    float* mine = b.buf.data() + static_cast<size_t>(comm_->rank()) * b.block;
    b.work = comm_->reduce_scatter(b.buf.data(), mine, b.block, coll::DataType::kF32, coll::ReduceOp::kAvg);
  } else {
    b.work = comm_->all_reduce(b.buf.data(), b.buf.size(), coll::DataType::kF32, coll::ReduceOp::kAvg);
  }
}

void DataParallel::take_gradient_shard(Bucket& b, const float* averaged) {
  const float* mine = (averaged ? averaged : b.buf.data()) + static_cast<size_t>(comm_->rank()) * b.block;
  std::memcpy(shard_grads_.data<float>() + b.shard_offset, mine, b.block * sizeof(float));
  if (!averaged && plan_.zero_stage >= 2) b.buf.reset();  // only the shard is kept
}

void DataParallel::copy_shard(const Bucket& b, std::vector<Tensor>& params, float* shard, bool to_params) const {
  // This rank's block covers bucket elements [lo, hi); parameter j of the bucket covers
  // [offsets[j], offsets[j] + numel). Copy their intersections; padding (>= b.numel) is zero.
  if (!to_params) std::fill(shard, shard + b.block, 0.0f);
  for_each_block_piece(b, static_cast<size_t>(comm_->rank()), params,
                       [&](size_t j, size_t begin, size_t end, size_t lo) {
                         float* in_param = params[b.params[j]].data<float>() + (begin - b.offsets[j]);
                         float* in_shard = shard + (begin - lo);
                         if (to_params) std::memcpy(in_param, in_shard, (end - begin) * sizeof(float));
                         else std::memcpy(in_shard, in_param, (end - begin) * sizeof(float));
                       });
}

double DataParallel::global_grad_norm() {
  // ||g||^2 = sum over ranks of the shard sums of squares (the shards are disjoint).
  if (!model_) {
    float sum = static_cast<float>(kernels::cpu::sum_of_squares(shard_grads_.data<float>(), shard_grads_.numel()));
    return std::sqrt(sum_over_ranks(&sum, 1));
  }
  // Under tensor parallelism the whole model's: in this rank's shard, the elements of the
  // parameters it counts (a block, or a replicated parameter on one tensor rank: counts_in_norm),
  // summed over the data ranks' shards and then over the tensor ranks.
  double local = 0;
  for (const Bucket& b : buckets_)
    for_each_block_piece(b, static_cast<size_t>(comm_->rank()), trainer_->parameters(),
                         [&](size_t j, size_t begin, size_t end, size_t lo) {
                           if (!trainer_->counts_in_norm()[b.params[j]]) return;
                           local += kernels::cpu::sum_of_squares(
                               shard_grads_.data<float>() + b.shard_offset + (begin - lo), static_cast<int64_t>(end - begin));
                         });
  float sum = static_cast<float>(local);
  sum = static_cast<float>(sum_over_ranks(&sum, 1));
  return std::sqrt(sum_over_model_axis(&sum, 1));
}

bool DataParallel::apply_update(std::vector<Tensor>& params, std::vector<Tensor>&) {
  if (!replica_sync() || plan_.zero_stage == 0) return false;
  // The shard's parameters from the (identical on every rank) full parameters: a caller that
  // set the parameters between steps (a restored checkpoint) is honoured. (Stage 3 took them
  // in begin_step, before releasing the parameters.)
  if (plan_.zero_stage < 3)
    for (const Bucket& b : buckets_) copy_shard(b, params, shard_params_.data<float>() + b.shard_offset, false);
  // A NaN or Inf in any rank's gradients (or loss: DDP marks a bucket for it) makes the global
  // norm non-finite on every rank alike: every rank skips its shard's update and the gather.
  const double norm = global_grad_norm();
  std::vector<Tensor> p{shard_params_}, g{shard_grads_};
  const bool applied = shard_optimizer_->step(p, g, norm);
  if (applied && plan_.zero_stage < 3) gather_parameters(params);  // stage 3: the next step gathers them
  in_step_ = false;
  return true;
}

void DataParallel::gather_parameters(std::vector<Tensor>& params) {
  // Every rank's updated block into place, then each bucket's blocks gathered in place.
  const size_t rank = static_cast<size_t>(comm_->rank());
  Clock::time_point start = Clock::now();
  for (Bucket& b : buckets_) {
    if (b.buf.size() != b.padded) b.buf = coll::CommBuffer(nullptr, b.padded);  // ZeRO 2
    float* mine = b.buf.data() + rank * b.block;
    std::memcpy(mine, shard_params_.data<float>() + b.shard_offset, b.block * sizeof(float));
    b.work = comm_->all_gather(mine, b.buf.data(), b.block, coll::DataType::kF32);
  }
  for (Bucket& b : buckets_) {
    b.work->wait();
    b.work.reset();
    for (size_t j = 0; j < b.params.size(); ++j)
      std::memcpy(params[b.params[j]].raw(), b.buf.data() + b.offsets[j], params[b.params[j]].nbytes());
    if (plan_.zero_stage >= 2) b.buf.reset();
  }
  // Blocking: the next forward needs every parameter (stage 3 would gather per layer).
  note_blocking(start);
}

void DataParallel::build_uses(const Trainer& trainer) {
  const std::vector<std::vector<size_t>> reads = trainer.parameter_reads();
  // One span per bucket and segment of the step that reads it (forward and backward; under
  // micro-batches each schedule slot): from its first read there to its last.
  const std::vector<size_t> segments = trainer.step_segments();
  auto segment_of = [&](size_t pos) {
    return static_cast<size_t>(std::upper_bound(segments.begin(), segments.end(), pos) - segments.begin());
  };
  size_t positions = 0;
  std::vector<Use> spans;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    std::vector<size_t> pos;
    for (size_t j : buckets_[bi].params) pos.insert(pos.end(), reads[j].begin(), reads[j].end());
    std::sort(pos.begin(), pos.end());
    for (size_t k = 0; k < pos.size(); ++k) {
      if (k == 0 || segment_of(pos[k]) != segment_of(pos[k - 1])) spans.push_back(Use{bi, pos[k], pos[k]});
      spans.back().last = pos[k];
    }
    if (!pos.empty()) positions = std::max(positions, pos.back() + 1);
  }
  std::sort(spans.begin(), spans.end(),
            [](const Use& a, const Use& b) { return a.first != b.first ? a.first < b.first : a.bucket < b.bucket; });
  // A bucket needed again right after its own span (the last layers end forward and begin
  // backward) stays whole in between instead of being released and gathered again.
  uses_.clear();
  for (const Use& u : spans) {
    if (!uses_.empty() && uses_.back().bucket == u.bucket) uses_.back().last = std::max(uses_.back().last, u.last);
    else uses_.push_back(u);
  }
  starting_.assign(positions, {});
  ending_.assign(positions, {});
  for (size_t k = 0; k < uses_.size(); ++k) {
    starting_[uses_[k].first].push_back(k);
    ending_[uses_[k].last].push_back(k);
  }
}

void DataParallel::note_gathered_bytes(int64_t delta) {
  gathered_bytes_ += delta;
  if (in_step_) stats_.peak_parameter_bytes = std::max(stats_.peak_parameter_bytes, gathered_bytes_);
}

void DataParallel::launch_gather(Bucket& b, bool prefetch) {
  if (b.resident || b.gather) return;
  b.gathered.assign(b.padded, 0.0f);
  b.held_bytes = static_cast<int64_t>(b.padded * sizeof(float));
  note_gathered_bytes(b.held_bytes);
  b.gather_launched = Clock::now();
  // The shard is only written by the optimizer, after every gather of the step has landed.
  b.gather = comm_->all_gather(shard_params_.data<float>() + b.shard_offset, b.gathered.data(), b.block,
                               coll::DataType::kF32);
  ++stats_.parameter_gathers;
  if (prefetch) ++stats_.parameter_gathers_prefetched;
}

void DataParallel::finish_gather(Bucket& b, std::vector<Tensor>& params) {
  if (b.resident) return;
  if (!b.gather) launch_gather(b, false);
  if (!b.gather->test()) {
    Clock::time_point start = Clock::now();
    b.gather->wait();
    note_wait(start);
  }
  stats_.comm_seconds += seconds(Clock::now() - b.gather_launched);
  b.gather.reset();
  // `gathered` is neither resized nor freed until release_bucket has released every borrower.
  for (size_t j = 0; j < b.params.size(); ++j) params[b.params[j]].storage()->borrow(b.gathered.data() + b.offsets[j]);
  b.resident = true;
}

void DataParallel::release_bucket(Bucket& b, std::vector<Tensor>& params) {
  if (!b.resident) return;
  for (size_t j : b.params) params[j].storage()->release();
  std::vector<float>().swap(b.gathered);
  b.resident = false;
  b.readers = 0;
  note_gathered_bytes(-b.held_bytes);
  b.held_bytes = 0;
}

void DataParallel::begin_step_sharded() {
  std::vector<Tensor>& params = trainer_->mutable_parameters();
  // Gathers a failed step left in flight land before their buffers go (errors surface on the
  // communicator's next collective).
  for (Bucket& b : buckets_) {
    if (b.gather) {
      settle(b.gather);
      note_gathered_bytes(-b.held_bytes);
      b.held_bytes = 0;
      std::vector<float>().swap(b.gathered);
    }
  }
  // Whole parameters (at attach, or after a gather for evaluate or a checkpoint, or a restore)
  // are the truth: the shard is taken from them, as stages 1-2 do before their update.
  if (whole_)
    for (const Bucket& b : buckets_) copy_shard(b, params, shard_params_.data<float>() + b.shard_offset, false);
  for (Bucket& b : buckets_) release_bucket(b, params);
  whole_ = false;
  in_step_ = true;
  next_gather_ = 0;
}

void DataParallel::before_node(size_t position) {
  if (position >= starting_.size() || starting_[position].empty()) return;
  std::vector<Tensor>& params = trainer_->mutable_parameters();
  for (size_t k : starting_[position]) {
    // This span's bucket, and the next span's launched now so it travels while this one computes.
    for (; next_gather_ < uses_.size() && next_gather_ <= k + 1; ++next_gather_)
      launch_gather(buckets_[uses_[next_gather_].bucket], next_gather_ > k);
    Bucket& b = buckets_[uses_[k].bucket];
    finish_gather(b, params);
    ++b.readers;
  }
}

void DataParallel::after_node(size_t position) {
  if (position >= ending_.size() || ending_[position].empty()) return;
  std::vector<Tensor>& params = trainer_->mutable_parameters();
  for (size_t k : ending_[position]) {
    Bucket& b = buckets_[uses_[k].bucket];
    if (--b.readers <= 0) release_bucket(b, params);
  }
}

void DataParallel::materialize_parameters(std::vector<Tensor>& params, bool keep_values) {
  if (plan_.zero_stage < 3 || whole_) return;
  in_step_ = false;  // never called inside a step: the step's peak is not this
  if (keep_values) {
    for (Bucket& b : buckets_) launch_gather(b, false);
    for (Bucket& b : buckets_) finish_gather(b, params);
  } else {
    for (Bucket& b : buckets_) {
      if (b.resident) continue;
      for (size_t j : b.params) params[j].storage()->reacquire();
      b.resident = true;
      b.held_bytes = static_cast<int64_t>(b.numel * sizeof(float));
      note_gathered_bytes(b.held_bytes);
    }
  }
  whole_ = true;
}

void DataParallel::fill_memory_stats(ParallelStats& s) const {
  const int64_t f32 = static_cast<int64_t>(sizeof(float));
  s.parameter_bytes = static_cast<int64_t>(numel_) * f32;
  if (plan_.zero_stage >= 3) {
    s.parameter_bytes = gathered_bytes_;  // whole buckets held (none between steps)
  } else {
    s.peak_parameter_bytes = s.parameter_bytes;
  }
  s.gradient_bytes = 0;
  for (const Bucket& b : buckets_)
    s.gradient_bytes += static_cast<int64_t>(b.buf.size()) * f32 + (b.dev.defined() ? static_cast<int64_t>(b.dev.nbytes()) : 0);
  if (shard_optimizer_) {
    s.parameter_bytes += static_cast<int64_t>(shard_params_.nbytes());
    s.gradient_bytes += static_cast<int64_t>(shard_grads_.nbytes());
    s.optimizer_state_bytes = static_cast<int64_t>(shard_optimizer_->state_bytes());
  } else {
    s.optimizer_state_bytes = trainer_ ? static_cast<int64_t>(trainer_->optimizer().state_bytes()) : 0;
  }
  // Local SGD and CO2: the outer optimizer's state (anchors, round start or co2's guess,
  // momentum) and its pseudo-gradient buffers; under ZeRO 1 the anchor, momentum and result
  // are one block each.
  s.optimizer_state_bytes += static_cast<int64_t>(anchor_.size() + round_start_.size() +
                                                  outer_.momentum().size()) * f32;
  s.gradient_bytes += static_cast<int64_t>(inflight_.size() + result_.size()) * f32;
  // Top-k compression: the residuals (optimizer-like state, a whole model's worth) and the messages.
  for (const Bucket& b : buckets_)
    if (b.topk) {
      s.optimizer_state_bytes += static_cast<int64_t>(b.topk->residual().size()) * f32;
      s.gradient_bytes += static_cast<int64_t>(b.message.size() + b.messages.size());
    }
}

}  // namespace cohort::parallel

namespace cohort::parallel {

void DataParallel::save_shard_state(checkpoint::CheckpointExtra& extra) {
  // The shard's optimizer state (copies) and step count; zeros before the first step.
  if (!shard_optimizer_->has_state()) shard_optimizer_->init_state({shard_params_});
  for (const auto& [name, t] : shard_optimizer_->state(0)) {
    Tensor copy = Tensor::empty(t.shape(), t.dtype());
    copy.copy_from(t);
    extra.tensors["parallel.zero." + name] = copy;
  }
  extra.ints["parallel.zero.stage"] = plan_.zero_stage;
  extra.ints["parallel.zero.world"] = comm_->size();
  extra.ints["parallel.zero.rank"] = comm_->rank();
  extra.ints["parallel.zero.step_count"] = shard_optimizer_->step_count();
}

std::function<void()> DataParallel::load_shard_state(const checkpoint::CheckpointExtra& extra) {
  auto ints = [&](const std::string& name) { return saved_int(extra, name, " (saved without ZeRO?)"); };
  // Stages 1 and 2 shard alike, so either loads into either; the layout must be this rank's.
  COHORT_CHECK(ints("parallel.zero.world") == comm_->size() && ints("parallel.zero.rank") == comm_->rank(),
               Status::kInvalidArgument, "data parallel: the checkpoint holds the ZeRO shard of rank ",
               ints("parallel.zero.rank"), " of ", ints("parallel.zero.world"), ", this is rank ", comm_->rank(),
               " of ", comm_->size());
  const int64_t count = ints("parallel.zero.step_count");
  if (!shard_optimizer_->has_state()) shard_optimizer_->init_state({shard_params_});
  std::vector<std::pair<std::string, Tensor>> state = shard_optimizer_->state(0);
  for (const auto& [name, t] : state) {
    auto it = extra.tensors.find("parallel.zero." + name);
    COHORT_CHECK(it != extra.tensors.end(), Status::kInvalidArgument, "data parallel: the checkpoint has no '",
                 "parallel.zero." + name, "' (saved with another optimizer?)");
    COHORT_CHECK(it->second.dtype() == DType::kF32 && it->second.numel() == t.numel(), Status::kInvalidArgument,
                 "data parallel: '", it->first, "' has ", it->second.numel(), " elements, this rank's shard has ",
                 t.numel(), " (another model or bucket size?)");
  }
  // Everything verified: what changes state.
  return [this, &extra, state, count] {
    for (const auto& [name, t] : state) {
      Tensor into = t;  // shares the optimizer's storage
      into.copy_from(extra.tensors.at("parallel.zero." + name));
    }
    shard_optimizer_->set_step_count(count);
  };
}

}  // namespace cohort::parallel
