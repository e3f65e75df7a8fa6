// DataParallel: DDP buckets, blocking local-SGD rounds, CO2 rounds with one reduction in flight.
#include "core/parallel/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "core/base/error.h"
#include "core/base/log.h"
#include "core/device/device.h"
#include "core/ops/collective.h"
#include "core/parallel/device_comm.h"
#include "core/parallel/flat.h"
#include "kernels/cpu/optim.h"

namespace cohort::parallel {

namespace coll = transport::coll;

std::shared_ptr<DataParallel> DataParallel::attach(Trainer& trainer, const PlanConfig& plan,
                                                   std::shared_ptr<coll::Communicator> comm,
                                                   std::shared_ptr<coll::Communicator> device_comm) {
  COHORT_CHECK(comm != nullptr, Status::kInvalidArgument, "data parallel: no communicator");
  validate_for_world(plan, comm->size());
  COHORT_CHECK(comm->memory() == coll::BufferMemory::kHost, Status::kInvalidArgument, "data parallel: the ",
               coll::backend_name(comm->backend()), " communicator '", comm->name(),
               "' takes device buffers; pass a host communicator (and this one as the device communicator)");
  const bool on_device = trainer.device() != Device::kCpu;
  if (device_comm) {
    COHORT_CHECK(device_comm->memory() == coll::BufferMemory::kCuda && device_comm->size() == comm->size() &&
                     device_comm->rank() == comm->rank(),
                 Status::kInvalidArgument, "data parallel: the device communicator '", device_comm->name(),
                 "' must take CUDA buffers and have the ranks of '", comm->name(), "' (rank ", device_comm->rank(),
                 " of ", device_comm->size(), " against ", comm->rank(), " of ", comm->size(), ")");
    COHORT_CHECK(on_device, Status::kInvalidArgument,
                 "data parallel: a device communicator was given but the trainer runs on cpu");
  }
  COHORT_CHECK(!on_device || plan.mode != SyncMode::kSync || plan.zero_stage == 0, Status::kUnsupported,
               "data parallel: ZeRO stage ", plan.zero_stage, " of DDP runs on host parameters only yet; the "
               "trainer runs on ", device_name(trainer.device()), " (stage 0, or local SGD / co2, run there)");
  std::vector<Tensor>& params = trainer.mutable_parameters();
  for (size_t i = 0; i < params.size(); ++i)
    COHORT_CHECK(params[i].dtype() == DType::kF32 && params[i].is_contiguous(), Status::kUnsupported,
                 "data parallel: parameter '", trainer.parameter_names()[i], "' is ", dtype_name(params[i].dtype()),
                 "; only contiguous f32 parameters are supported yet");
  auto dp = std::make_shared<DataParallel>(plan, comm);
  if (plan.mode == SyncMode::kSync) dp->device_comm_ = std::move(device_comm);
  // Identical initial weights on every rank: rank 0's parameters, whatever the others' seeds.
  dp->numel_ = total_numel(params);
  std::vector<float> flat(dp->numel_);
  flatten(params, flat.data());
  comm->broadcast(flat.data(), flat.size(), coll::DataType::kF32, 0)->wait();
  unflatten(flat.data(), params);
  dp->trainer_ = &trainer;
  if (trainer.axes() && trainer.axes()->size("tensor") > 1) {
    dp->axes_ = trainer.axes();
    dp->tensor_ = trainer.axes()->find("tensor");
    size_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const size_t n = static_cast<size_t>(params[i].numel());
      if (trainer.counts_in_norm()[i]) dp->norm_ranges_.emplace_back(offset, n);
      offset += n;
    }
  }
  if (plan.mode == SyncMode::kSync) {
    dp->build_buckets(params);
    if (plan.zero_stage > 0) dp->build_shards(trainer.optimizer());
    if (plan.zero_stage >= 3) {
      dp->build_uses(trainer);
      for (Bucket& b : dp->buckets_) {  // whole, in their own memory, until the first step
        b.held_bytes = static_cast<int64_t>(b.numel * sizeof(float));
        dp->gathered_bytes_ += b.held_bytes;
      }
    }
  } else if (dp->outer_sharded()) {
    dp->init_outer_shard(flat);
  } else {
    dp->anchor_ = flat;
    dp->prev_anchor_ = flat;
    dp->round_start_ = flat;
    dp->inflight_ = coll::CommBuffer(comm, flat.size());
    dp->result_ = coll::CommBuffer(comm, flat.size());
  }
  // Local steps normalised for the group's averaged gradient (plan.h); the trainer's optimizer
  // keeps the setting for its life, as the trainer keeps this hook.
  if (plan.inner_noise_scaling) trainer.optimizer().set_noise_ranks(comm->size());
  dp->last_mark_ = Clock::now();
  trainer.set_step_hook(dp);
  return dp;
}

DataParallel::DataParallel(const PlanConfig& plan, std::shared_ptr<coll::Communicator> comm)
    : plan_(plan), comm_(std::move(comm)), outer_(plan.outer) {}

DataParallel::~DataParallel() {
  // A reduction still in flight reads inflight_: let it end before the buffer goes (its
  // failure is reported by the communicator's status, not here; its deadline bounds the wait).
  try {
    if (inflight_work_) inflight_work_->wait();
    for (Bucket& b : buckets_) {
      if (b.work) b.work->wait();
      if (b.gather) b.gather->wait();
    }
  } catch (const Error&) {
  }
  if (comm_ && comm_->status() != Status::kOk) {
    // A failed collective may still hold a send to a frozen rank that UCX cannot cancel
    // (work.h): every buffer a collective touched stays alive until the communicator lets go.
    struct Buffers {
      std::vector<Bucket> buckets;
      std::vector<float> anchor, prev_anchor, round_start, next_anchor, scalars;
      coll::CommBuffer inflight, result;
      Tensor shard_params, shard_grads;
    };
    auto kept = std::make_shared<Buffers>();
    kept->buckets = std::move(buckets_);
    kept->anchor = std::move(anchor_);
    kept->prev_anchor = std::move(prev_anchor_);
    kept->round_start = std::move(round_start_);
    kept->inflight = std::move(inflight_);
    kept->result = std::move(result_);
    kept->next_anchor = std::move(next_anchor_);
    kept->scalars = std::move(scalars_);
    kept->shard_params = shard_params_;
    kept->shard_grads = shard_grads_;
    comm_->keep_alive(std::move(kept));
  }
}

void DataParallel::build_buckets(const std::vector<Tensor>& params) {
  // Backward produces the last layers' gradients first: fill buckets in reverse order.
  bucket_of_.assign(params.size(), 0);
  offset_of_.assign(params.size(), 0);
  for (size_t k = params.size(); k-- > 0;) {
    if (buckets_.empty() || buckets_.back().numel * sizeof(float) >= plan_.bucket_bytes) buckets_.emplace_back();
    Bucket& b = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    offset_of_[k] = b.numel;
    b.params.push_back(k);
    b.offsets.push_back(b.numel);
    b.numel += static_cast<size_t>(params[k].numel());
  }
  for (Bucket& b : buckets_) {
    b.remaining = b.params.size();
    b.padded = b.numel;
    if (device_comm_)  // reduced where the gradients are: no host copy of the bucket
      b.dev = Tensor::empty({static_cast<int64_t>(b.numel)}, DType::kF32, device_allocator(params[0].device()));
    else if (plan_.zero_stage == 0)  // ZeRO pads it (build_shards)
      b.buf = coll::CommBuffer(comm_, b.numel);
  }
  stats_.buckets = static_cast<int64_t>(buckets_.size());
}

void DataParallel::poll() {
  Clock::time_point now = Clock::now();
  for (Bucket& b : buckets_)
    if (b.work && !b.finished && b.work->test()) {
      b.finished = true;
      b.done = now;
    }
  if (inflight_work_ && !have_result_ && inflight_work_->test()) {
    stats_.comm_seconds += seconds(now - inflight_launched_);
    have_result_ = true;
    inflight_work_.reset();
  }
}

DataParallel::Clock::time_point DataParallel::note_wait(Clock::time_point start) {
  Clock::time_point now = Clock::now();
  step_wait_ += seconds(now - start);
  stats_.wait_seconds += seconds(now - start);
  return now;
}

void DataParallel::settle(coll::WorkPtr& work) {
  if (!work) return;
  try {
    work->wait();
  } catch (const Error&) {
  }
  work.reset();
}

void DataParallel::begin_step() {
  // Buckets left half-done by a step that failed (an error in backward or in a collective):
  // let their reductions end before their buffers are reused. A failed collective leaves the
  // communicator's sticky error, which the next collective reports.
  for (Bucket& b : buckets_) {
    settle(b.work);
    b.finished = false;
    b.remaining = b.params.size();
  }
  step_wait_ = 0;
  loss_ = Tensor();
  loss_marked_ = false;
  if (plan_.zero_stage >= 3) begin_step_sharded();
}

void DataParallel::on_loss(const Tensor& loss) {
  if (plan_.mode == SyncMode::kSync) loss_ = loss;
}

void DataParallel::mark_if_loss_not_finite(Bucket& b) {
  // Forward made the loss before backward made any gradient, so it is here for every bucket but
  // those whose parameters the loss does not reach (reduced before the step runs).
  if (loss_marked_ || !loss_.defined()) return;
  loss_marked_ = true;
  if (b.dev.defined()) return mark_bucket_if_not_finite(b.dev.data<float>(), loss_);  // on the stream
  // A host bucket: the loss is read where it is (a device loss costs one small copy; this path
  // copies every gradient to the host anyway).
  const Tensor l = to_device(loss_, Device::kCpu);
  const float v = l.dtype() == DType::kBF16 ? bf16_to_f32(l.data<uint16_t>()[0]) : l.data<float>()[0];
  if (!std::isfinite(v)) b.buf[0] = std::numeric_limits<float>::quiet_NaN();
}

bool DataParallel::outer_finite(const float* d, size_t n) {
  float bad = std::isfinite(kernels::cpu::sum_of_squares(d, static_cast<int64_t>(n))) ? 0.0f : 1.0f;
  if (outer_sharded()) sum_over_ranks(&bad, 1);
  bad = any_over_tensor(bad != 0.0f) ? 1.0f : 0.0f;  // the tensor ranks' blocks differ
  if (bad == 0.0f) return true;
  log(LogLevel::kWarn, str_cat("data parallel: the averaged pseudo-gradient of outer round ", stats_.rounds + 1,
                               " holds NaN or Inf; its outer step is skipped on every rank (anchor and outer "
                               "momentum unchanged)"));
  return false;
}

void DataParallel::drop_if_not_finite(float* d, size_t n, const char* what) {
  // Under tensor parallelism a model replica drops its round as one (each rank holds blocks).
  if (!any_over_tensor(!std::isfinite(kernels::cpu::sum_of_squares(d, static_cast<int64_t>(n))))) return;
  std::fill(d, d + n, 0.0f);
  log(LogLevel::kWarn, str_cat("data parallel: ", what, " of this rank holds NaN or Inf (its parameters are not "
                               "finite); its round is dropped and it restarts from the anchor"));
}

void DataParallel::on_gradient(size_t index, const Tensor& grad) {
  if (plan_.mode != SyncMode::kSync) return;
  poll();
  Bucket& b = buckets_[bucket_of_[index]];
  COHORT_ASSERT(b.remaining > 0 && !b.work, "gradient ", index, " produced twice in one step");
  if (b.dev.defined()) {
    device_copy_queued(b.dev.data<float>() + offset_of_[index], grad.raw(), grad.device(), grad.nbytes());
  } else {
    // ZeRO 2 frees it between steps: ordinary memory (registering is a collective round trip).
    if (b.buf.size() != b.padded) b.buf = coll::CommBuffer(nullptr, b.padded);
    device_copy(b.buf.data() + offset_of_[index], Device::kCpu, grad.raw(), grad.device(), grad.nbytes());
  }
  // Every gradient of the bucket is final: reduce the copy while backward goes on.
  if (--b.remaining == 0) {
    mark_if_loss_not_finite(b);
    launch_reduction(b);
  }
}

void DataParallel::before_update(std::vector<Tensor>& grads) {
  if (plan_.mode != SyncMode::kSync) return;
  Clock::time_point start = Clock::now();
  Clock::time_point first = Clock::time_point::max(), last = Clock::time_point::min();
  for (Bucket& b : buckets_) {
    COHORT_ASSERT(b.work != nullptr, "a gradient bucket was not complete after backward");
    if (!b.finished) {
      b.work->wait();
      b.done = Clock::now();
    }
    first = std::min(first, b.launched);
    last = std::max(last, b.done);
    if (plan_.zero_stage > 0) take_gradient_shard(b);  // grads stay local: the shard is stepped
    else
      for (size_t j = 0; j < b.params.size(); ++j) {
        Tensor& g = grads[b.params[j]];
        if (b.dev.defined()) device_copy_queued(g.raw(), b.dev.data<float>() + b.offsets[j], g.device(), g.nbytes());
        else device_copy(g.raw(), g.device(), b.buf.data() + b.offsets[j], Device::kCpu, g.nbytes());
      }
    b.work.reset();
    b.finished = false;
    b.remaining = b.params.size();
  }
  // The collectives run back to back on the progress thread: their busy span is first launch
  // to last completion; the exposed part is what the training thread waited. It adds to the
  // step's other waits (ZeRO 3's parameter gathers in forward and backward), none of which is
  // compute.
  note_wait(start);
  if (!buckets_.empty()) stats_.comm_seconds += seconds(last - first);
}

void DataParallel::after_update(std::vector<Tensor>& params, int64_t) {
  if (plan_.mode == SyncMode::kSync) {
    ++stats_.rounds;
  } else {
    if (!outer_sharded()) poll();
    ++inner_steps_;
    const bool co2 = plan_.mode == SyncMode::kCo2;
    if (inner_steps_ % plan_.tau == 0) {
      if (outer_sharded()) co2 ? end_round_co2_sharded(params) : end_round_sharded(params);
      else co2 ? end_round_co2(params) : end_round_blocking(params);
    } else if (outer_sharded() && co2) {
      advance_outer_shard(false);  // the outer step in the middle of the round
    }
  }
  Clock::time_point now = Clock::now();
  stats_.compute_seconds += std::max(0.0, seconds(now - last_mark_) - step_wait_);
  last_mark_ = now;
  step_wait_ = 0;
}

void DataParallel::end_round_blocking(std::vector<Tensor>& params) {
  // d_k = x_k - avg_i x^{(i)}_{k,tau}: the local pseudo-gradient, averaged (blocking).
  flatten(params, inflight_.data());
  for (size_t i = 0; i < numel_; ++i) inflight_[i] = anchor_[i] - inflight_[i];
  drop_if_not_finite(inflight_.data(), numel_, "the round's pseudo-gradient");
  Clock::time_point start = Clock::now();
  comm_->all_reduce(inflight_.data(), numel_, coll::DataType::kF32, coll::ReduceOp::kAvg)->wait();
  note_blocking(start);
  // The average is the same bytes on every rank: so is the decision to skip a non-finite one.
  if (outer_finite(inflight_.data(), numel_)) {
    std::function<double(double)> model_norm;  // the clip's norm: the whole model's momentum
    if (tensor_) model_norm = [this](double) { return model_sum_of_squares(outer_.momentum().data()); };
    stats_.last_momentum_norm = outer_.step(anchor_, inflight_.data(), 1.0, model_norm);
  }
  unflatten(anchor_.data(), params);
  round_start_ = anchor_;
  ++stats_.rounds;
}

void DataParallel::end_round_co2(std::vector<Tensor>& params) {
  // Each rank's model is the shared anchor plus its own progress not yet averaged in:
  //     x^{(i)} = x_k - e^{(i)}_{k}      (x_k anchor, e^{(i)}_k this rank's last round)
  // so no rank ever discards a round of its own work while the average of that round travels.
  // 1. Round k-1's reduction e_{k-1} = avg_i e^{(i)}_{k-1}: wait for it (CO2's only blocking point).
  if (inflight_work_) {
    Clock::time_point start = Clock::now();
    inflight_work_->wait();
    stats_.comm_seconds += seconds(note_wait(start) - inflight_launched_);
    inflight_work_.reset();
    have_result_ = true;
  }
  if (have_result_) std::swap(inflight_, result_);  // result_ = e_{k-1}; inflight_ is free
  // 2. Round k's pseudo-gradient on this rank: parameters at the start of the round minus now.
  flatten(params, inflight_.data());
  for (size_t i = 0; i < numel_; ++i) inflight_[i] = round_start_[i] - inflight_[i];
  drop_if_not_finite(inflight_.data(), numel_, "the round's pseudo-gradient");
  // 3. The outer step with the one-round-stale e_{k-1} (outer.cpp): x_{k+1} = x_k - alpha * u_k.
  //    Without a result (round 0) x_{k+1} = x_k; nor with a non-finite one (the same bytes on
  //    every rank, so every rank skips it).
  if (have_result_ && !outer_finite(result_.data(), numel_)) {
    prev_anchor_ = anchor_;
    have_result_ = false;
  } else if (have_result_) {
    stats_.last_staleness_scale = staleness_scale();
    prev_anchor_ = anchor_;  // x_k: the anchor the round now in flight will be applied after
    std::function<double(double)> model_norm;  // the clip's norm: the whole model's momentum
    if (tensor_) model_norm = [this](double) { return model_sum_of_squares(outer_.momentum().data()); };
    stats_.last_momentum_norm = outer_.step(anchor_, result_.data(), stats_.last_staleness_scale, model_norm);
    have_result_ = false;
  } else {
    prev_anchor_ = anchor_;
  }
  // 4. Round k+1 starts from the new anchor plus this rank's round k, whose average replaces
  //    it at the end of round k+1: x^{(i)} = x_{k+1} - e^{(i)}_k.
  for (size_t i = 0; i < numel_; ++i) round_start_[i] = anchor_[i] - inflight_[i];
  unflatten(round_start_.data(), params);
  // 5. e^{(i)}_k is averaged in the background while round k+1 runs; nothing touches inflight_
  //    until the wait in step 1 of the next round end.
  inflight_launched_ = Clock::now();
  inflight_work_ = comm_->all_reduce(inflight_.data(), numel_, coll::DataType::kF32, coll::ReduceOp::kAvg);
  ++stats_.rounds;
}

void DataParallel::save_state(checkpoint::CheckpointExtra& extra) {
  // ZeRO 3: the checkpoint written next reads the whole parameters (every rank saves).
  if (plan_.zero_stage >= 3) materialize_parameters(trainer_->mutable_parameters(), true);
  if (shard_optimizer_) return save_shard_state(extra);  // ZeRO: the trainer's optimizer has none
  if (outer_sharded()) return save_outer_shard(extra);
  if (plan_.mode == SyncMode::kSync) return;  // DDP keeps no state beyond the trainer's
  if (inflight_work_) {
    // The reduction in flight is waited for and saved as its result: resuming applies it at
    // the same round end as an uninterrupted run would.
    Clock::time_point start = Clock::now();
    inflight_work_->wait();
    stats_.wait_seconds += seconds(Clock::now() - start);
    stats_.comm_seconds += seconds(Clock::now() - inflight_launched_);
    inflight_work_.reset();
    have_result_ = true;
  }
  auto vec = [&](const auto& v) {  // a vector or a CommBuffer
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kF32);
    if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
    return t;
  };
  std::vector<float>& m = outer_.momentum();
  if (m.size() != numel_) m.assign(numel_, 0.0f);
  extra.tensors["parallel.anchor"] = vec(anchor_);
  extra.tensors["parallel.prev_anchor"] = vec(prev_anchor_);
  extra.tensors["parallel.round_start"] = vec(round_start_);
  extra.tensors["parallel.outer_momentum"] = vec(m);
  extra.tensors["parallel.reduced"] =  // inflight_ holds numel_ floats outside ZeRO 1
      have_result_ ? vec(inflight_) : Tensor::zeros({static_cast<int64_t>(numel_)}, DType::kF32);
  extra.ints["parallel.have_reduced"] = have_result_ ? 1 : 0;
  extra.ints["parallel.inner_steps"] = inner_steps_;
  extra.ints["parallel.rounds"] = stats_.rounds;
  extra.ints["parallel.mode"] = static_cast<int64_t>(plan_.mode);
}

void DataParallel::load_state(const checkpoint::CheckpointExtra& extra) {
  if (shard_optimizer_) return load_shard_state(extra);
  if (outer_sharded()) return load_outer_shard(extra);
  COHORT_CHECK(!extra.ints.count("parallel.zero.world"), Status::kInvalidArgument,
               "data parallel: the checkpoint holds a ZeRO optimizer shard; load it with a ZeRO stage 1-3 "
               "plan, world and rank");
  if (plan_.mode == SyncMode::kSync) return;
  COHORT_CHECK(!inflight_work_, Status::kInvalidState, "data parallel: cannot load while a reduction is in flight");
  auto get = [&](const char* name) -> const Tensor& {
    auto it = extra.tensors.find(name);
    COHORT_CHECK(it != extra.tensors.end(), Status::kInvalidArgument, "data parallel: the checkpoint has no '", name,
                 "' (saved without outer state?)");
    COHORT_CHECK(it->second.dtype() == DType::kF32 && static_cast<size_t>(it->second.numel()) == numel_,
                 Status::kInvalidArgument, "data parallel: '", name, "' has ", it->second.numel(),
                 " elements, the model has ", numel_);
    return it->second;
  };
  auto ints = [&](const char* name) {
    auto it = extra.ints.find(name);
    COHORT_CHECK(it != extra.ints.end(), Status::kInvalidArgument, "data parallel: the checkpoint has no '", name, "'");
    return it->second;
  };
  COHORT_CHECK(ints("parallel.mode") == static_cast<int64_t>(plan_.mode), Status::kInvalidArgument,
               "data parallel: the checkpoint was saved in mode ", ints("parallel.mode"), ", the plan is ",
               mode_name(plan_.mode));
  const Tensor &a = get("parallel.anchor"), &p = get("parallel.prev_anchor"), &m = get("parallel.outer_momentum"),
               &r = get("parallel.reduced"),
               &rs = get("parallel.round_start");
  int64_t have = ints("parallel.have_reduced"), steps = ints("parallel.inner_steps"), rounds = ints("parallel.rounds");
  // Everything verified: now change state.
  auto load = [&](const Tensor& t, std::vector<float>& v) {
    v.resize(numel_);
    std::memcpy(v.data(), t.raw(), numel_ * sizeof(float));
  };
  load(a, anchor_);
  load(p, prev_anchor_);
  load(rs, round_start_);
  load(m, outer_.momentum());
  std::memcpy(inflight_.data(), r.raw(), numel_ * sizeof(float));  // sized at attach
  have_result_ = have != 0;
  inner_steps_ = steps;
  stats_.rounds = rounds;
}

ParallelStats DataParallel::stats() const {
  ParallelStats s = stats_;
  s.hidden_fraction = s.comm_seconds > 0 ? std::clamp(1.0 - s.wait_seconds / s.comm_seconds, 0.0, 1.0) : 1.0;
  fill_memory_stats(s);
  return s;
}

double DataParallel::sum_over_tensor(float* values, size_t n) {
  // A member buffer, as sum_over_ranks (a failed reduction may still hold it). Summed in f32: the
  // transport has no f64, and the decisions taken from these sums need no more.
  if (tensor_scalars_.size() < n) tensor_scalars_.resize(n);
  std::copy(values, values + n, tensor_scalars_.begin());
  Clock::time_point start = Clock::now();
  tensor_->all_reduce(tensor_scalars_.data(), n, coll::DataType::kF32, coll::ReduceOp::kSum)->wait();
  note_blocking(start);
  std::copy(tensor_scalars_.begin(), tensor_scalars_.begin() + static_cast<std::ptrdiff_t>(n), values);
  return values[0];
}

bool DataParallel::any_over_tensor(bool local) {
  if (!tensor_) return local;
  float flag = local ? 1.0f : 0.0f;
  return sum_over_tensor(&flag, 1) != 0.0f;
}

double DataParallel::model_sum_of_squares(const float* flat) {
  if (!tensor_) return kernels::cpu::sum_of_squares(flat, static_cast<int64_t>(numel_));
  double local = 0;
  for (const auto& [offset, count] : norm_ranges_)
    local += kernels::cpu::sum_of_squares(flat + offset, static_cast<int64_t>(count));
  float sum = static_cast<float>(local);
  return sum_over_tensor(&sum, 1);
}

double DataParallel::staleness_scale() {
  if (!tensor_ || !outer_.config().staleness_penalty)
    return outer_.staleness_scale(anchor_, prev_anchor_, result_.data());
  // ||x_k - x_{k-1}||^2 and ||d||^2 of the whole model (outer.cpp has the formula).
  double gap_sq = 0, d_sq = 0;
  for (const auto& [offset, count] : norm_ranges_) {
    for (size_t i = offset; i < offset + count; ++i) {
      const double g = static_cast<double>(anchor_[i]) - prev_anchor_[i];
      gap_sq += g * g;
    }
    d_sq += kernels::cpu::sum_of_squares(result_.data() + offset, static_cast<int64_t>(count));
  }
  float sums[2] = {static_cast<float>(gap_sq), static_cast<float>(d_sq)};
  sum_over_tensor(sums, 2);
  return outer_.staleness_scale_from(sums[0], sums[1]);
}

}  // namespace cohort::parallel
