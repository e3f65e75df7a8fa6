// DataParallel: DDP buckets, blocking local-SGD rounds, CO2 rounds with one reduction in flight.
#include "core/parallel/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "core/base/error.h"
#include "core/base/log.h"
#include "core/checkpoint/format.h"
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
  COHORT_CHECK(!on_device || plan.shard_group == 1, Status::kUnsupported, "data parallel: shard_group ",
               plan.shard_group, " runs ZeRO inside each replica, on host parameters only yet; the trainer runs on ",
               device_name(trainer.device()), " (shard_group 1 runs there)");
  std::vector<Tensor>& params = trainer.mutable_parameters();
  for (size_t i = 0; i < params.size(); ++i)
    COHORT_CHECK(params[i].dtype() == DType::kF32 && params[i].is_contiguous(), Status::kUnsupported,
                 "data parallel: parameter '", trainer.parameter_names()[i], "' is ", dtype_name(params[i].dtype()),
                 "; only contiguous f32 parameters are supported yet");
  auto dp = std::make_shared<DataParallel>(plan, comm);
  // Top-k messages are encoded and summed on the host: their buckets stay in host memory.
  if (plan.mode == SyncMode::kSync && plan.grad_keep >= 1) dp->device_comm_ = std::move(device_comm);
  // Identical initial weights on every rank: rank 0's parameters, whatever the others' seeds.
  dp->numel_ = total_numel(params);
  std::vector<float> flat(dp->numel_);
  flatten(params, flat.data());
  comm->broadcast(flat.data(), flat.size(), coll::DataType::kF32, 0)->wait();
  unflatten(flat.data(), params);
  dp->trainer_ = &trainer;
  if (trainer.axes() && trainer.axes()->size("model") > 1) {
    dp->axes_ = trainer.axes();
    dp->model_ = trainer.axes()->find("model");
  }
  dp->outer_numel_ = dp->numel_;
  if (dp->grouped()) dp->split_shard_groups();  // comm_: the replica's positions; outer_comm_: across replicas
  if (dp->replica_sync()) {
    dp->build_buckets(params);
    if (plan.zero_stage > 0) dp->build_shards(trainer.optimizer());
    if (plan.zero_stage >= 3) {
      dp->build_uses(trainer);
      for (Bucket& b : dp->buckets_) {  // whole, in their own memory, until the first step
        b.held_bytes = static_cast<int64_t>(b.numel * sizeof(float));
        dp->gathered_bytes_ += b.held_bytes;
      }
    }
    if (dp->grouped()) {
      dp->build_fragments(params);  // of whole parameters; their pieces of the shard: init_outer_over_shard
      dp->init_outer_over_shard();
      if (plan.mode == SyncMode::kCo2 && plan.outer_bits < 32) dp->init_low_bit_messages();
    }
  } else {
    dp->build_fragments(params);
    std::vector<float> outer(flat.size());  // the outer state's layout: fragment after fragment
    for (const Fragment& fr : dp->fragments_) dp->read_outer(fr, params, outer.data());
    if (dp->outer_sharded()) {
      dp->init_outer_shard(outer);  // this rank's block of each fragment
    } else {
      dp->anchor_ = outer;
      dp->round_start_ = std::move(outer);
      dp->inflight_ = coll::CommBuffer(comm, flat.size());
      if (plan.mode == SyncMode::kCo2) {
        dp->outer_.momentum().assign(flat.size(), 0.0f);  // read by the first guess
        if (plan.outer_bits < 32) dp->init_low_bit_messages();
      } else {
        dp->result_ = coll::CommBuffer(comm, flat.size());
      }
    }
  }
  // Local steps normalised for the group's averaged gradient (plan.h); the optimizer that steps
  // keeps the setting for its life, as the trainer keeps this hook. Under shard groups that is
  // the replica's ZeRO optimizer, whose gradient is already the replica's average: the averaging
  // left to the outer rule is over the replicas.
  if (plan.inner_noise_scaling) {
    if (dp->shard_optimizer_) dp->shard_optimizer_->set_noise_ranks(dp->outer_comm_->size());
    else trainer.optimizer().set_noise_ranks(comm->size());
  }
  dp->round_tau_ = plan.tau;
  dp->merge_overlap_ = plan.overlap;
  dp->last_mark_ = dp->step_began_ = Clock::now();
  trainer.set_step_hook(dp);
  return dp;
}

void DataParallel::init_low_bit_messages() {
  for (Fragment& fr : fragments_) {  // each fragment's elements quantized on their own
    if (fr.count == 0) continue;     // none on this rank: nothing sent (end_round_co2)
    fr.quant = std::make_unique<Quantizer>(plan_.outer_bits, fr.count);
    fr.packed.assign(fr.quant->bytes(), 0);
    fr.gathered.assign(fr.quant->bytes() * static_cast<size_t>(outer_comm_->size()), 0);
  }
  residual_.assign(outer_numel_, 0.0f);
}

DataParallel::DataParallel(const PlanConfig& plan, std::shared_ptr<coll::Communicator> comm)
    : plan_(plan), comm_(comm), outer_comm_(comm), group_comm_(comm), outer_(plan.outer) {}

DataParallel::~DataParallel() {
  // A reduction still in flight reads inflight_: let it end before the buffer goes (its
  // failure is reported by the communicator's status, not here; its deadline bounds the wait).
  try {
    for (Fragment& fr : fragments_)
      if (fr.work) fr.work->wait();
    if (timing_work_) timing_work_->wait();
    for (SharedWait& w : shared_waits_) w.work->wait();
    for (Bucket& b : buckets_) {
      if (b.work) b.work->wait();
      if (b.gather) b.gather->wait();
    }
  } catch (const Error&) {
  }
  // Shard groups: the replica's, the outer and the group's communicators each touched them.
  const bool failed = (comm_ && comm_->status() != Status::kOk) ||
                      (outer_comm_ && outer_comm_->status() != Status::kOk) ||
                      (group_comm_ && group_comm_->status() != Status::kOk);
  if (failed) {
    // A failed collective may still hold a send to a frozen rank that UCX cannot cancel
    // (work.h): every buffer a collective touched stays alive until the communicator lets go.
    struct Buffers {
      std::vector<Bucket> buckets;
      std::vector<float> anchor, round_start, scalars, timing;
      std::vector<std::vector<uint8_t>> messages;  // co2's low-bit messages, sent and gathered
      coll::CommBuffer inflight, result;
      Tensor shard_params, shard_grads;
    };
    auto kept = std::make_shared<Buffers>();
    kept->buckets = std::move(buckets_);
    kept->anchor = std::move(anchor_);
    kept->round_start = std::move(round_start_);
    kept->inflight = std::move(inflight_);
    kept->result = std::move(result_);
    kept->scalars = std::move(scalars_);
    kept->timing = std::move(timing_);
    for (Fragment& fr : fragments_) {
      kept->messages.push_back(std::move(fr.packed));
      kept->messages.push_back(std::move(fr.gathered));
    }
    kept->shard_params = shard_params_;
    kept->shard_grads = shard_grads_;
    for (const auto& c : {comm_, outer_comm_, group_comm_})
      if (c && c->status() != Status::kOk) c->keep_alive(kept);
  }
  // The same for the replica's reduction buffer (sum_over_model), with its communicators.
  auto model_scalars = std::make_shared<std::vector<float>>(std::move(model_scalars_));
  for (coll::Communicator* c : {model_, grouped() ? comm_.get() : nullptr})
    if (c && c->status() != Status::kOk) c->keep_alive(model_scalars);
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
    if (plan_.grad_keep < 1) {
      b.topk = std::make_unique<GradTopk>(static_cast<int64_t>(b.numel), plan_.grad_keep);
      b.message.assign(b.topk->message_bytes(), 0);
      b.messages.assign(b.topk->message_bytes() * static_cast<size_t>(comm_->size()), 0);
    }
    stats_.gradient_sync_bytes +=
        static_cast<int64_t>(b.topk ? b.topk->message_bytes() : b.numel * sizeof(float));
  }
  stats_.buckets = static_cast<int64_t>(buckets_.size());
  stats_.grad_keep = plan_.grad_keep;
}

void DataParallel::poll() {
  Clock::time_point now = Clock::now();
  for (Bucket& b : buckets_)
    if (b.work && !b.finished && b.work->test()) {
      b.finished = true;
      b.done = now;
    }
  for (Fragment& fr : fragments_)
    if (fr.work && !fr.have_result && fr.work->test()) {
      stats_.comm_seconds += seconds(now - fr.launched);
      note_outer(seconds(now - fr.launched), 0);
      fr.have_result = true;
      fr.done_at = now;
      fr.work.reset();
    }
}

void DataParallel::build_fragments(const std::vector<Tensor>& params) {
  // The cut is the whole model's (graph order, whole sizes), the same under every layout of it;
  // each fragment then takes this rank's parts of its parameters. Without model axes the model's
  // parameters are this rank's, in its order: fragment f is the parameters [cut f, cut f + 1).
  const Graph& model = trainer_->model_graph();
  std::vector<int64_t> numel;
  std::vector<int64_t> local;  // model parameter -> this rank's index, or -1
  for (ValueId p : model.parameters()) {
    numel.push_back(shape_numel(model.value(p).type.shape));
    local.push_back(trainer_->local_parameter(model.value(p).name));
  }
  const std::vector<size_t> cuts = outer_fragment_cuts(numel, plan_.outer_fragments);  // kInvalidPlan: F > params
  fragments_.resize(static_cast<size_t>(plan_.outer_fragments));
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  outer_at_.assign(params.size(), kNone);
  size_t begin = 0;
  for (size_t f = 0; f < fragments_.size(); ++f) {
    Fragment& fr = fragments_[f];
    for (size_t k = cuts[f]; k < cuts[f + 1]; ++k)
      if (local[k] >= 0) fr.params.push_back(static_cast<size_t>(local[k]));
    std::sort(fr.params.begin(), fr.params.end());
    fr.begin = begin;
    for (size_t i : fr.params) {
      outer_at_[i] = begin + fr.count;
      fr.count += static_cast<size_t>(params[i].numel());
    }
    begin += fr.count;
  }
  place_fragments(plan_.tau);
  for (size_t i = 0; i < params.size(); ++i)
    COHORT_ASSERT(outer_at_[i] != kNone, "data parallel: parameter '", trainer_->parameter_names()[i],
                  "' is not among the model's");
  // The model axes' norms: each replicated parameter counted once (counts_in_norm), by offset.
  if (model_)
    for (size_t i = 0; i < params.size(); ++i)
      if (trainer_->counts_in_norm()[i]) norm_ranges_.emplace_back(outer_at_[i], static_cast<size_t>(params[i].numel()));
}

void DataParallel::place_fragments(int64_t tau) {
  for (size_t f = 0; f < fragments_.size(); ++f)
    fragments_[f].offset = outer_fragment_offset(static_cast<int>(f), plan_.outer_fragments, tau);
}

bool DataParallel::any_in_flight() const {
  for (const Fragment& fr : fragments_)
    if (fr.work) return true;
  return false;
}

int64_t DataParallel::fragment_position(const Fragment& fr) const {
  const int64_t p = round_pos_ - fr.offset;
  return p > 0 ? p : p + round_tau_;
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
  // Time between steps (an evaluation, a checkpoint, the caller loading data) is not training
  // time: co2's average in flight across it has its launch moved by it, so that overlap auto
  // measures travel in the steps' time (an evaluation of several seconds once read as a slow
  // link and raised tau to 490 on the CNN), and the step time below leaves it out.
  step_began_ = Clock::now();
  if (plan_.mode == SyncMode::kCo2) {
    bool moved = false;
    for (Fragment& fr : fragments_)
      if (fr.work && !fr.have_result) {
        fr.launched += step_began_ - last_mark_;
        moved = true;
      }
    if (moved) poll();  // arrived during the pause: its travel ends where the pause began
  }
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
  buckets_complete_ = 0;
  held_ = nullptr;
  if (plan_.zero_stage >= 3) begin_step_sharded();
}

void DataParallel::on_loss(const Tensor& loss) {
  if (!replica_sync()) return;
  loss_ = loss;
  if (held_ == nullptr) return;
  Bucket& b = *held_;
  held_ = nullptr;
  mark_if_loss_not_finite(b);
  launch_reduction(b);
}

void DataParallel::mark_if_loss_not_finite(Bucket& b) {
  if (!loss_.defined()) return;
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
  bad = any_over_model(bad != 0.0f) ? 1.0f : 0.0f;  // the tensor ranks' blocks differ
  if (bad == 0.0f) return true;
  log(LogLevel::kWarn, str_cat("data parallel: the averaged pseudo-gradient of outer round ", stats_.rounds + 1,
                               " holds NaN or Inf; its outer step is skipped on every rank (anchor and outer "
                               "momentum unchanged)"));
  return false;
}

void DataParallel::drop_if_not_finite(float* d, size_t n, const char* what) {
  // Under tensor parallelism a model replica drops its round as one (each rank holds blocks).
  if (!any_over_model(!std::isfinite(kernels::cpu::sum_of_squares(d, static_cast<int64_t>(n))))) return;
  std::fill(d, d + n, 0.0f);
  log(LogLevel::kWarn, str_cat("data parallel: ", what, " of this rank holds NaN or Inf (its parameters are not "
                               "finite); its round is dropped and it restarts from the anchor"));
}

void DataParallel::on_gradient(size_t index, const Tensor& grad) {
  if (!replica_sync()) return;
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
  // Every gradient of the bucket is final: reduce the copy while backward goes on. The step's
  // last bucket carries the loss's mark, so it waits for the loss if that has not come yet.
  if (--b.remaining > 0) return;
  if (++buckets_complete_ == buckets_.size()) {
    if (!loss_.defined()) {
      held_ = &b;
      return;
    }
    mark_if_loss_not_finite(b);
  }
  launch_reduction(b);
}

void DataParallel::before_update(std::vector<Tensor>& grads) {
  if (!replica_sync()) return;
  Clock::time_point start = Clock::now();
  Clock::time_point first = Clock::time_point::max(), last = Clock::time_point::min();
  if (held_ != nullptr) {  // no loss was reported (a hook contract broken): reduce it unmarked
    launch_reduction(*held_);
    held_ = nullptr;
  }
  for (Bucket& b : buckets_) {
    COHORT_ASSERT(b.work != nullptr, "a gradient bucket was not complete after backward");
    if (!b.finished) {
      b.work->wait();
      b.done = Clock::now();
    }
    first = std::min(first, b.launched);
    last = std::max(last, b.done);
    if (b.topk) {
      // averaged below, all of them before any residual moves
    } else if (plan_.zero_stage > 0) {
      take_gradient_shard(b);  // grads stay local: the shard is stepped
    } else {
      for (size_t j = 0; j < b.params.size(); ++j) {
        Tensor& g = grads[b.params[j]];
        if (b.dev.defined()) device_copy_queued(g.raw(), b.dev.data<float>() + b.offsets[j], g.device(), g.nbytes());
        else device_copy(g.raw(), g.device(), b.buf.data() + b.offsets[j], Device::kCpu, g.nbytes());
      }
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
  if (plan_.grad_keep < 1) average_topk(grads);
}

// Streaming outer synchronisation (plan.outer_fragments = F; after Streaming DiLoCo, Douillard
// et al. 2025, arXiv 2501.18512): the rule, derived.
//
// The outer rule of outer.cpp is elementwise but for the clip's norm, and so are co2's round end
// and merge but for the staleness penalty's norms and the finiteness checks. Cut the parameters,
// in graph order, into F contiguous fragments of about equal bytes (outer_fragment_cuts); every
// inner step still steps the whole model, but each fragment f runs the outer rule on its own
// elements only, as its own instance of DiLoCo (localsgd mode) or co2, with rounds of tau steps
// that end o_f = f tau / F steps into the plan's rounds — at inner step counts n = o_f (mod tau),
// so fragment f > 0's first round is o_f steps long. Per fragment f, x_f, m_f and y^{(i)}_f
// being the anchor's, the outer momentum's and rank i's parameters' elements in it:
//   localsgd:  at its round end, e_f = avg_i (x_f - y^{(i)}_f) is all-reduced (blocking; 1/F of
//              the model), x_f <- O(x_f, e_f), and every rank sets y_f <- x_f; the other fragments
//              keep the progress their elements made since their own round ends.
//   co2:       at its round end, e^{(i)}_f = x_f - y^{(i)}_f is sent and rank i moves y_f to its
//              guess G^{(i)}_f (from m_f and e^{(i)}_f: end_round_co2); `overlap` steps later the
//              average has arrived, x_f <- O(x_f, e_f), y_f <- x_f + s_f (y_f - G^{(i)}_f)
//              (merge_co2), s_f the penalty's factor from the fragment's own gap and progress.
// Invariant: for every f, x_f and m_f are the same on every rank and follow the unfragmented
// rule's recursion on the fragment's elements, shifted by o_f steps; between its syncs y^{(i)}_f
// is x_f plus rank i's progress since (co2: carried over at the merge), as with F = 1. Across
// fragments only the clip couples them: its norm is the whole momentum's (each fragment's part
// as its last outer step left it) and its factor scales the stepping fragment's part, so each
// part is clipped when it steps, as F = 1 clips all of it at once. A fragment whose pseudo-
// gradient or parameters are not finite drops its own round (the others go on), and a non-finite
// average skips that fragment's outer step on every rank.
// Tensor / pipeline axes (a replica over several ranks): the cut is the whole model's, so a
// fragment is the same parameters under every layout; each rank runs it on its parts of them
// (blocks under a tensor grid; under a pipeline possibly none, another stage holding them all).
// Every rank of a replica still runs every fragment's round end and merge at the same step, so the
// replica's collectives — the finiteness checks, the clip's norm (the whole momentum, as above) and
// the penalty's norms (the fragment's elements, each replicated parameter counted once) — match;
// an empty fragment sends nothing, which its data group's ranks (holding the same parameters) skip
// alike, and its average counts as arrived at once (have_result), so a checkpoint's per-fragment
// flags are the same on every rank of the replica and mean the same under another layout.
// Why the offsets: F <= tau, so at most one fragment's average is launched a step; the bytes of a
// round are the same, but a link carries 1/F of the model every tau / F steps instead of all of
// it every tau (the peak need is 1/F), and co2 hides each fragment's all-reduce behind `overlap`
// steps as before (with overlap > tau / F several fragments' averages travel at once, each in
// its own slice of inflight_). Streaming DiLoCo mixes the arriving global fragment with the
// local one; here co2's carry-over does that job exactly (DiLoCo's outer step on the anchor, the
// local steps since added), so no mixing factor enters. F = 1 is one fragment of every parameter
// with offset 0: the unfragmented code path, bit for bit.
// co2 with overlap auto: the round's length T (fragment 0's) and the overlap h change at fragment
// 0's merge, the one point of a round where no other fragment's average is pending, and fragment
// f >= 1 ends floor(f T / F) steps into the round now running (place_fragments). That holds
// because h <= floor(T / F) always (validate starts there, choose_round_shape keeps it): fragment
// f's average, launched at floor(f T / F), is merged h steps later, by fragment f + 1's round end
// (fragment F - 1's by fragment 0's, at T), and fragment 0's is merged at h, by fragment 1's round
// end — so the F averages of a round travel one after another, each measured on its own (its
// travel, ~1/F of the model's, is what h must hide), and the new T >= F x h_old keeps fragment
// 1's end of the running round ahead of the merge that re-chose it. Fragment f's rounds then
// last T_old - floor(f T_old / F) + floor(f T_new / F) steps across a change, which the rule
// allows (a round is the steps between two syncs). Every rank decides on the same reduced times
// at the same step count (note_round_end, update_round_shape), so the shape, the offsets and
// every fragment's syncs and merges stay matched across ranks.
void DataParallel::after_update(std::vector<Tensor>& params, int64_t) {
  if (plan_.mode == SyncMode::kSync) {
    ++stats_.rounds;
  } else {
    // Shard groups: the replica's synchronous step is done (apply_update); the outer rule below
    // reads and writes this rank's shard, gathered into the whole parameters at the end.
    if (!outer_sharded()) poll();
    ++inner_steps_;
    if (plan_.mode == SyncMode::kCo2) {
      // The pending merges first (with overlap = tau one falls on its fragment's round end,
      // before that round's pseudo-gradient is taken). Fixed by step counts: the same on every
      // rank. Fragment 0's round end comes last: it starts the next round (note_round_end), from
      // which the others' positions count.
      ++round_pos_;
      for (Fragment& fr : fragments_)
        if (fr.merge_pending && fragment_position(fr) == merge_overlap_) merge_co2(fr, params);
      for (size_t f = 1; f < fragments_.size(); ++f)
        if (round_pos_ == fragments_[f].offset) end_round_co2(fragments_[f], params);
      if (round_pos_ == round_tau_) end_round_co2(fragments_[0], params);
    } else {
      for (Fragment& fr : fragments_) {
        if ((inner_steps_ - fr.offset) % plan_.tau != 0) continue;
        if (outer_sharded()) {
          end_round_sharded(fr, params);  // ZeRO 1: this rank's block of the fragment stepped
        } else {
          end_round_blocking(fr, params);
        }
        if (plan_.average_inner_state) average_inner_state(fr, params);
      }
    }
    // Stages 1-2 read the whole parameters in the next step (and take the shard from them in
    // apply_update): the replica's new shards gathered into them; stage 3 keeps the shard alone.
    if (shard_written_ && plan_.zero_stage < 3) gather_parameters(params);
    shard_written_ = false;
  }
  Clock::time_point now = Clock::now();
  stats_.compute_seconds += std::max(0.0, seconds(now - step_began_) - step_wait_);
  last_mark_ = now;
  step_wait_ = 0;
}

void DataParallel::read_outer(const Fragment& fr, const std::vector<Tensor>& params, float* flat) const {
  if (!grouped()) return flatten_some(params, fr.params, outer_at_, flat);
  const float* shard = shard_params_.data<float>();
  size_t at = fr.begin;  // the fragment's pieces of the shard, one after another
  for (const auto& [offset, count] : fr.pieces) {
    std::memcpy(flat + at, shard + offset, count * sizeof(float));
    at += count;
  }
}

void DataParallel::write_outer(const Fragment& fr, const float* flat, std::vector<Tensor>& params) {
  if (!grouped()) return unflatten_some(flat, outer_at_, params, fr.params);
  float* shard = shard_params_.data<float>();
  size_t at = fr.begin;
  for (const auto& [offset, count] : fr.pieces) {
    std::memcpy(shard + offset, flat + at, count * sizeof(float));
    at += count;
  }
  shard_written_ = true;
}

void DataParallel::take_pseudo_gradient(const Fragment& fr, const std::vector<Tensor>& params) {
  const size_t b = fr.begin, e = fr.begin + fr.count;
  read_outer(fr, params, inflight_.data());
  for (size_t i = b; i < e; ++i) inflight_[i] = anchor_[i] - inflight_[i];
  drop_if_not_finite(inflight_.data() + b, fr.count, "the round's pseudo-gradient");
}

void DataParallel::end_round_blocking(Fragment& fr, std::vector<Tensor>& params) {
  // d_k = x_k - avg_i x^{(i)}_{k,tau}: the local pseudo-gradient, averaged (blocking); of
  // fragment fr's elements (all of them with one fragment).
  const size_t b = fr.begin, e = fr.begin + fr.count;
  take_pseudo_gradient(fr, params);
  // A fragment with none of this rank's parameters (another pipeline stage holds them) has no
  // all-reduce; its data group skips it alike (they hold the same parameters). The replica's
  // collectives (the finiteness checks, the clip's norm) still run on every one of its ranks.
  if (fr.count > 0) {
    Clock::time_point start = Clock::now();
    outer_comm_->all_reduce(inflight_.data() + b, fr.count, coll::DataType::kF32, coll::ReduceOp::kAvg)->wait();
    note_outer_blocking(start);
    ++stats_.outer_syncs;
  }
  outer_step(inflight_.data(), fr);
  write_outer(fr, anchor_.data(), params);
  std::copy(anchor_.begin() + static_cast<std::ptrdiff_t>(b), anchor_.begin() + static_cast<std::ptrdiff_t>(e),
            round_start_.begin() + static_cast<std::ptrdiff_t>(b));
  if (fr.offset == 0) ++stats_.rounds;
}

void DataParallel::average_inner_state(const Fragment& fr, std::vector<Tensor>& params) {
  // The same tensors, in the same order, on every rank: the optimizer's kind is the plan's, and a
  // rank whose every step so far was skipped for NaN gets its zeroed state made here.
  optim::Optimizer& opt = trainer_->optimizer();
  if (!opt.has_state()) opt.init_state(params);
  std::vector<Tensor> state;
  for (size_t i : fr.params)
    for (auto& [name, t] : opt.state(i))
      if (name != "master") state.push_back(t);  // bf16's master copy is the parameter, not a moment
  const size_t n = total_numel(state);
  if (n == 0) return;  // SGD without momentum: nothing to average (alike on every rank)
  inner_state_.resize(n + 1);
  flatten(state, inner_state_.data());
  const bool finite = std::isfinite(kernels::cpu::sum_of_squares(inner_state_.data(), static_cast<int64_t>(n)));
  if (!finite) {
    log(LogLevel::kWarn, "data parallel: this rank's inner optimizer state holds NaN or Inf at a round end; it takes "
                         "the other ranks' average");
    std::fill(inner_state_.begin(), inner_state_.end(), 0.0f);
  }
  inner_state_[n] = finite ? 1.0f : 0.0f;
  Clock::time_point start = Clock::now();
  outer_comm_->all_reduce(inner_state_.data(), n + 1, coll::DataType::kF32, coll::ReduceOp::kSum)->wait();
  note_outer_blocking(start);
  // No rank's state was finite: every rank restarts its moments from zero.
  const float count = inner_state_[n];
  const float scale = count > 0 ? 1.0f / count : 0.0f;
  for (size_t i = 0; i < n; ++i) inner_state_[i] *= scale;
  unflatten(inner_state_.data(), state);
}

void DataParallel::outer_step(const float* d, const Fragment& fr) {
  // The average is the same bytes on every rank: so is the decision to skip a non-finite one
  // (the anchor and the momentum unchanged).
  if (!outer_finite(d + fr.begin, fr.count)) return;
  std::function<double(double)> model_norm;  // the clip's norm: the whole model's momentum
  if (replica_spans_ranks()) model_norm = [this](double) { return model_sum_of_squares(outer_.momentum().data()); };
  stats_.last_momentum_norm = outer_.step(anchor_, d, 1.0, model_norm, fr.begin, fr.count);
}

// CO2 with the merge: the rule, derived.
//
// W ranks; round k is inner steps [k tau, (k+1) tau); O is the outer rule of outer.cpp (alpha,
// beta, Nesterov, clipping). Blocking DiLoCo ends round k with every rank at its own y^{(i)}_k,
// all-reduces e_k = avg_i (x_k - y^{(i)}_k), takes x_{k+1} = O(x_k, e_k) and starts round k+1
// there: the ranks wait for the all-reduce. CO2 must not wait, so the first steps of round k+1
// cannot know the other ranks' round k. What the old rule and the eager update (Kale, Douillard,
// Donchev 2025, arXiv 2502.12996) did with that — apply e_k one round late, x_{k+2} = O(x_{k+1},
// e_k), fully or for the others' shares — puts a delay inside the outer optimizer's loop. In
// directions the inner steps settle within a round, e_k is the distance to the settled point
// and changes as soon as the anchor moves, so a late e_k is a wrong one, and outer momentum
// amplifies it: at 4 ranks both diverged with DiLoCo's constants (README). In directions the
// inner steps only drift along, the steps themselves do not depend on where they start.
//
// So no delay enters the outer recursion; the steps taken while e_k travels are carried over
// instead. With h = overlap (1 <= h <= tau) and m the outer momentum:
//   round end k:  e^{(i)}_k = x_k - y^{(i)}_k is sent; rank i moves to its guess
//                 G^{(i)} = x_k - alpha u(e^{(i)}_k, m), u = e + beta (beta m + e) (Nesterov)
//                 or beta m + e: O's step as if the average were its own e^{(i)}_k (outer.h) —
//                 where x_{k+1} will be, up to this rank's deviation from the average;
//   h steps on:   e_k has arrived: x_{k+1} = O(x_k, e_k), exactly DiLoCo's; the rank's steps so
//                 far are carried over: y <- x_{k+1} + (y - G^{(i)}).
// Invariant: x_k, the outer momentum and every e_k are the same on every rank and follow DiLoCo's
// recursion exactly; after the merge each rank is at x_{k+1} plus its progress since the round
// began, as in DiLoCo. The one difference: the first h steps of a round ran from G^{(i)}, which
// is alpha (1 + beta) (e^{(i)}_k - e_k) away from x_{k+1} (alpha without Nesterov; clipping
// aside) — the rank's own deviation from the average. Steps that settle a direction or drift
// along it carry over unchanged; the rest are off by h steps' worth, which is what `overlap`
// trades for hiding the all-reduce (README: h = 1 ties DiLoCo, h = tau - 1 does not; a guess
// that left out the momentum's last average, to spare a whole-model vector, lost 0.3-0.6
// points). h = tau merges on the next round end. At W = 1 it is DiLoCo with the first h steps
// of each round carried over (alpha 1 and beta 0: plain training).
// In flight: e^{(i)}_k from a round end until the merge h steps later; nothing in between.
void DataParallel::end_round_co2(Fragment& fr, std::vector<Tensor>& params) {
  // Every step below on fragment fr's elements [b, e) only (the whole model with one fragment).
  const size_t b = fr.begin, e = fr.begin + fr.count;
  // 1. e^{(i)}_k = x_k - y^{(i)}_k, into inflight_ (free: the last merge consumed it).
  take_pseudo_gradient(fr, params);  // dropped: sent as zeros
  // 2. The guess G^{(i)}: round k+1 starts there; round_start_ keeps it until the merge.
  const std::vector<float>& m = outer_.momentum();
  for (size_t i = b; i < e; ++i) round_start_[i] = outer_.guess(anchor_[i], m[i], inflight_[i]);
  write_outer(fr, round_start_.data(), params);
  // 3. e^{(i)}_k averaged in the background; nothing touches its slice of inflight_ until the
  //    merge. With outer_bits 8 or 4 the message is the fragment's low-bit packing,
  //    gathered from every rank. None of this rank's parameters in it (another pipeline stage
  //    holds them): nothing to send, by its whole data group alike; its empty average is there.
  fr.launched = Clock::now();
  if (fr.count == 0) {
    fr.have_result = true;
  } else if (fr.quant) {
    // Error feedback: the message is e^{(i)}_k plus what this rank's earlier messages left out
    // (residual_), and what its own rounding drops is kept for the next one. The slice of
    // inflight_ is free once packed (the average arrives in fr.gathered): it takes the message as
    // every rank decodes it. A value that decodes to NaN (a non-finite block) keeps no residual.
    float* v = inflight_.data() + b;
    float* r = residual_.data() + b;
    for (size_t i = 0; i < fr.count; ++i) r[i] += v[i];
    fr.quant->pack(r, fr.packed.data());
    fr.work = outer_comm_->all_gather(fr.packed.data(), fr.gathered.data(), fr.packed.size(), coll::DataType::kU8);
    fr.quant->average(fr.packed.data(), 1, v);
    for (size_t i = 0; i < fr.count; ++i) {
      const float left = r[i] - v[i];
      r[i] = std::isfinite(left) ? left : 0.0f;
    }
    fr.decoded = false;
  } else {
    fr.work = outer_comm_->all_reduce(inflight_.data() + b, fr.count, coll::DataType::kF32, coll::ReduceOp::kAvg);
  }
  fr.merge_pending = true;
  if (fr.count > 0) ++stats_.outer_syncs;
  if (fr.offset == 0) note_round_end();  // fragment 0's round is the plan's
}

void DataParallel::merge_co2(Fragment& fr, std::vector<Tensor>& params) {
  const size_t b = fr.begin, e = fr.begin + fr.count;
  // 4. e_k: wait for it (CO2's only blocking point; it had h steps to travel), then DiLoCo's
  //    outer step x_{k+1} = O(x_k, e_k).
  double travel = -1;  // how long e_k took to arrive: exact when waited for, else to mid-step; -1 unknown
  if (fr.work) {
    Clock::time_point start = Clock::now();
    fr.work->wait();
    const Clock::time_point now = note_wait(start);
    travel = seconds(now - fr.launched);
    stats_.comm_seconds += travel;
    note_outer(travel, seconds(now - start));
    fr.work.reset();
  } else if (fr.done_at > fr.launched) {
    travel = std::max(0.0, seconds(fr.done_at - fr.launched) - 0.5 * stats_.step_seconds);
  }
  if (fr.quant && !fr.decoded) decode_average(fr);
  fr.have_result = false;
  fr.merge_pending = false;
  outer_step(inflight_.data(), fr);  // none when e_k is not finite: x_{k+1} = x_k
  // 5. The steps since the guess carried over onto x_{k+1}: y <- x_{k+1} + s (y - G), s the
  //    penalty's factor (1 when off). e_k is spent: inflight_ takes y. Steps that left this
  //    rank's parameters non-finite are dropped: it goes on from x_{k+1}.
  read_outer(fr, params, inflight_.data());
  if (any_over_model(!std::isfinite(kernels::cpu::sum_of_squares(inflight_.data() + b, static_cast<int64_t>(fr.count))))) {
    log(LogLevel::kWarn, "data parallel: this rank's parameters (or a tensor-parallel peer's blocks) hold NaN or Inf at "
                         "the merge; its steps since the round began are dropped and it goes on from the new anchor");
    std::copy(round_start_.begin() + static_cast<std::ptrdiff_t>(b), round_start_.begin() + static_cast<std::ptrdiff_t>(e),
              inflight_.data() + b);  // y - G = 0
  }
  double scale = 1.0;
  if (plan_.outer.staleness_penalty) {  // progress y - G, made at distance x_{k+1} - G
    double gap = 0, progress = 0;
    auto add = [&](size_t offset, size_t count) {
      for (size_t i = offset; i < offset + count; ++i) {
        const double g = static_cast<double>(anchor_[i]) - round_start_[i];
        const double d = static_cast<double>(inflight_[i]) - round_start_[i];
        gap += g * g;
        progress += d * d;
      }
    };
    if (!replica_spans_ranks()) {
      add(b, fr.count);
    } else {  // the fragment's norms over the replica: each replicated parameter counted once
      for (const auto& [offset, count] : norm_ranges_)
        if (offset >= b && offset + count <= e) add(offset, count);  // a fragment holds whole parameters
      float sums[2] = {static_cast<float>(gap), static_cast<float>(progress)};
      sum_over_model(sums, 2);
      gap = sums[0];
      progress = sums[1];
    }
    scale = outer_.staleness_scale_from(gap, progress);
  }
  stats_.last_staleness_scale = scale;
  const float s = static_cast<float>(scale);
  for (size_t i = b; i < e; ++i) round_start_[i] = anchor_[i] + s * (inflight_[i] - round_start_[i]);
  write_outer(fr, round_start_.data(), params);
  note_merge(travel, &fr == &fragments_.front());
}

bool DataParallel::average_replicas(const std::vector<Tensor>& params, std::vector<Tensor>& average) {
  if (plan_.mode == SyncMode::kSync || group_comm_->size() == plan_.shard_group) return false;
  // The caller (Trainer::average_replicas) made the parameters whole; under shard groups they
  // are the replica's, the same on each of its ranks.
  const std::vector<float> mean = data_rank_mean(params);
  average.clear();
  for (const Tensor& p : params) average.push_back(Tensor::empty(p.shape(), p.dtype(), device_allocator(p.device())));
  unflatten(mean.data(), average);
  return true;
}

std::vector<float> DataParallel::data_rank_mean(const std::vector<Tensor>& ts) {
  // group_comm_: every data rank (comm_ is the replica's own ranks under shard groups).
  std::vector<float> flat(total_numel(ts));
  flatten(ts, flat.data());
  group_comm_->all_reduce(flat.data(), flat.size(), coll::DataType::kF32, coll::ReduceOp::kAvg)->wait();
  return flat;
}

void DataParallel::apply_checkpoint(const checkpoint::CheckpointExtra& extra) {
  bool has_outer = false;
  for (const auto& kv : extra.tensors) has_outer = has_outer || kv.first.rfind("parallel.", 0) == 0;
  for (const auto& kv : extra.ints) has_outer = has_outer || kv.first.rfind("parallel.", 0) == 0;
  auto saved_mode = extra.ints.find("parallel.mode");
  // Written by a local-updating run (its ranks' files hold each replica's own parameters).
  const bool saved_local = saved_mode != extra.ints.end() && saved_mode->second != static_cast<int64_t>(SyncMode::kSync);
  if (plan_.zero_stage > 0 || grouped()) {
    // A ZeRO trainer always loads: its optimizer state lives only in the shard entries, and a
    // file without them must fail rather than silently restart the moments.
    load_state(extra);
  } else if (plan_.mode == SyncMode::kSync) {
    if (has_outer && !saved_local) load_state(extra);  // top-k's residuals
    // A local-updating run's files under DDP: the replicas start from their average.
    if (saved_local) restart_from_parameters(trainer_->mutable_parameters());
  } else if (saved_mode != extra.ints.end()) {
    load_state(extra);  // this mode's outer state; another mode's is refused, naming both
  } else {
    // No outer state (a plain trainer's or DDP's file): local updating starts from the loaded
    // parameters, not from the anchor attach took from the initial weights.
    restart_from_parameters(trainer_->mutable_parameters());
  }
}

void DataParallel::restart_from_parameters(std::vector<Tensor>& params) {
  COHORT_CHECK(plan_.zero_stage == 0 && !grouped(), Status::kUnsupported,
               "data parallel: a checkpoint without this plan's outer state cannot restart ZeRO stage ",
               plan_.zero_stage, " / shard_group ", plan_.shard_group, " (its state must come from the checkpoint)");
  // Anything in flight belongs to the run the parameters replaced: waited for and dropped.
  for (Fragment& fr : fragments_) {
    settle(fr.work);
    fr.have_result = fr.merge_pending = false;
    fr.decoded = true;
  }
  if (plan_.mode == SyncMode::kCo2) wait_timing();
  // DDP steps every replica from the same gradients: their optimizer states must agree too (a
  // local run's ranks each kept their own momenta), else the replicas part again at once. One
  // all-reduce for both (the tensors share their storage with the trainer's).
  std::vector<Tensor> averaged = params;
  optim::Optimizer& opt = trainer_->optimizer();
  if (plan_.mode == SyncMode::kSync && opt.has_state())
    for (size_t i = 0; i < params.size(); ++i)
      for (auto& [name, t] : opt.state(i))
        if (t.dtype() == DType::kF32) averaged.push_back(t);
  unflatten(data_rank_mean(averaged).data(), averaged);
  if (plan_.mode == SyncMode::kSync) return;
  std::vector<float> outer(outer_numel_);
  for (const Fragment& fr : fragments_) read_outer(fr, params, outer.data());
  anchor_ = outer;
  round_start_ = std::move(outer);
  std::vector<float>& m = outer_.momentum();
  if (!m.empty()) m.assign(m.size(), 0.0f);
  if (!residual_.empty()) residual_.assign(residual_.size(), 0.0f);
  inner_steps_ = 0;
  round_pos_ = 0;
}

void DataParallel::check_parameter_write() const {
  COHORT_CHECK(plan_.mode == SyncMode::kSync || (!outer_sharded() && !grouped()), Status::kUnsupported,
               "data parallel: writing a parameter under a sharded outer state (", mode_name(plan_.mode),
               " with ZeRO stage ", plan_.zero_stage, ", shard_group ", plan_.shard_group,
               ") is not supported yet: the anchor's shards would keep the old values; load a checkpoint instead");
}

void DataParallel::parameter_written(const std::vector<Tensor>& params, size_t index) {
  if (plan_.mode == SyncMode::kSync) return;
  check_parameter_write();
  COHORT_CHECK(index < params.size() && index < outer_at_.size(), Status::kInvalidArgument,
               "data parallel: parameter index ", index, " of ", params.size());
  const Tensor& p = params[index];
  for (std::vector<float>* state : {&anchor_, &round_start_})
    device_copy(state->data() + outer_at_[index], Device::kCpu, p.raw(), p.device(), p.nbytes());
}

void DataParallel::decode_average(Fragment& fr) {
  fr.quant->average(fr.gathered.data(), outer_comm_->size(), inflight_.data() + fr.begin);
  fr.decoded = true;
}

void DataParallel::note_round_end() {
  round_pos_ = 0;
  ++stats_.rounds;
  // The round's outer waits, reduced in the background (collect_shared_waits). Every rank counts
  // the same merges in a round (they fall at the same steps), so the minimum is the wait of the
  // rank that launched last, which only the transfer kept waiting.
  collect_shared_waits(kSharedWaitsInFlight - 1);
  SharedWait& w = shared_waits_.emplace_back(SharedWait{static_cast<float>(-round_outer_wait_), round_outer_wait_, nullptr});
  round_outer_wait_ = 0;
  try {
    w.work = group_comm_->all_reduce(&w.value, 1, coll::DataType::kF32, coll::ReduceOp::kMax);
  } catch (...) {
    shared_waits_.pop_back();  // never launched: nothing to wait for
    throw;
  }
  if (!plan_.overlap_auto) return;
  // This rank's times, reduced over the ranks while the average travels, so every rank decides
  // on the same numbers: the step time of the slowest rank (the maximum), and the travel time of
  // the quickest average (the minimum, sent negated under the same kMax: -1 unknown becomes 1 and
  // wins). Each rank times its average from its own launch, so a rank that ends its round early
  // also times its wait for the last one; the rank that launched last times the transfer alone.
  // Taking the slowest rank's, tried first, fed that skew back: a longer overlap let the ranks
  // drift further apart, which read as a slower link (0.3 s, 0.4, 0.8, 1.2, 1.9 in 14 rounds at
  // 100 Mbit/s while the link carried the 0.3 MiB in about 0.05 s), until tau reached its cap.
  timing_.assign(2, 0.0f);
  timing_[0] = static_cast<float>(-merged_comm_seconds_);
  timing_[1] = static_cast<float>((stats_.compute_seconds - round_compute_mark_) / static_cast<double>(round_tau_));
  round_compute_mark_ = stats_.compute_seconds;
  timing_work_ = group_comm_->all_reduce(timing_.data(), 2, coll::DataType::kF32, coll::ReduceOp::kMax);
}

void DataParallel::note_merge(double comm_seconds, bool first_fragment) {
  // -1: not measured (a resumed merge). Over F fragments, the slowest of the round's merges
  // (fragment 0's comes first in each round under overlap auto: choose_round_shape).
  merged_comm_seconds_ = first_fragment ? comm_seconds : std::max(merged_comm_seconds_, comm_seconds);
  if (plan_.overlap_auto && first_fragment) update_round_shape();
}

void DataParallel::collect_shared_waits(size_t in_flight) {
  while (!shared_waits_.empty()) {
    SharedWait& w = shared_waits_.front();
    if (!w.work->test()) {
      if (shared_waits_.size() <= in_flight) return;
      Clock::time_point start = Clock::now();
      w.work->wait();
      note_blocking(start);
    }
    stats_.outer_shared_wait_seconds += std::min(w.own, std::max(0.0, -static_cast<double>(w.value)));
    shared_waits_.pop_front();
  }
}

void DataParallel::wait_timing() {
  if (!timing_work_) return;
  Clock::time_point start = Clock::now();
  timing_work_->wait();
  note_blocking(start);
  timing_work_.reset();
}

void DataParallel::update_round_shape() {
  // The ranks' times of the round before (note_round_end; plan.h, choose_round_shape): the next
  // merge waits as many steps as an average takes to arrive, and the round now running is
  // lengthened to keep half of it after that merge. A slower link thus raises overlap and tau
  // instead of stalling; a faster one brings them back, tau never below the plan's.
  wait_timing();
  if (timing_.size() < 2) return;  // no round has ended since attach or a load
  // The travel time decided on is the median of the last five (the upper one of an even count):
  // shaped links have outliers both ways — at 100 Mbit, 4 ranks on 2 cores, most averages took
  // 0.15-0.4 s and one in a few dozen 6 s (a TCP retransmission). A maximum held over rounds,
  // tried first, let one such outlier keep tau at its cap for hundreds of steps and cost the CNN
  // 1-2 points; the median waits once for it, and follows a link that stays slower within three
  // rounds.
  const float quickest = -timing_[0];
  if (quickest >= 0) {  // < 0: some rank has not measured one (a resumed merge)
    if (travel_history_.size() == kTravelHistory) travel_history_.erase(travel_history_.begin());
    travel_history_.push_back(quickest);
  }
  double travel = 0;
  if (!travel_history_.empty()) {
    std::vector<float> sorted = travel_history_;
    std::sort(sorted.begin(), sorted.end());
    travel = sorted[sorted.size() / 2];
  }
  stats_.outer_comm_seconds = travel;
  stats_.step_seconds = timing_[1];
  const RoundShape r = choose_round_shape(travel, timing_[1], merge_overlap_, plan_.tau, round_pos_,
                                          plan_.outer_fragments);
  merge_overlap_ = r.overlap;
  round_tau_ = r.tau;
  place_fragments(round_tau_);  // fragment f >= 1 ends f tau / F steps into the round now running
}

namespace {
// Written with co2 outer state: 2 = the merge rule (end_round_co2). Checkpoints of the earlier
// rule, which applied each average one round late while each rank kept its own last round,
// carry no version and cannot be continued by this one (their anchor means something else).
constexpr int64_t kCo2Rule = 2;
}  // namespace

void DataParallel::save_co2_state(checkpoint::CheckpointExtra& extra) {
  wait_timing();  // overlap auto's times in flight: waited for and saved like the average
  collect_shared_waits(0);  // a statistic only: counted now, not saved
  // The ranks' reduced times (note_round_end); this rank's last travel time; the travel history.
  Tensor timing = Tensor::zeros({static_cast<int64_t>(3 + kTravelHistory)}, DType::kF32);
  if (timing_.size() == 2) std::memcpy(timing.raw(), timing_.data(), 2 * sizeof(float));
  timing.data<float>()[2] = static_cast<float>(merged_comm_seconds_);
  std::copy(travel_history_.begin(), travel_history_.end(), timing.data<float>() + 3);
  extra.tensors["parallel.co2.timing"] = timing;
  extra.ints["parallel.co2.travel_count"] = static_cast<int64_t>(travel_history_.size());
  extra.ints["parallel.co2.have_timing"] = timing_.size() == 2 ? 1 : 0;
  extra.ints["parallel.co2.round_pos"] = round_pos_;
  extra.ints["parallel.co2.round_tau"] = round_tau_;
  extra.ints["parallel.co2.merge_overlap"] = merge_overlap_;
  extra.ints["parallel.co2.rule"] = kCo2Rule;
}

std::function<void()> DataParallel::load_co2_state(const checkpoint::CheckpointExtra& extra) {
  auto rule = extra.ints.find("parallel.co2.rule");
  COHORT_CHECK(rule != extra.ints.end(), Status::kInvalidArgument,
               "data parallel: the checkpoint holds co2 outer state of the earlier rule, which applied each "
               "round's average one round late; this co2 merges it `overlap` steps into the next round and cannot "
               "continue that state: resume it with the build that wrote it");
  COHORT_CHECK(rule->second == kCo2Rule, Status::kInvalidArgument,
               "data parallel: the checkpoint holds co2 outer state of rule ", rule->second, ", this build runs rule ",
               kCo2Rule);
  auto ints = [&](const char* name) { return saved_int(extra, name); };
  auto tensor = [&](const char* name, size_t n) -> const Tensor& {
    auto it = extra.tensors.find(name);
    COHORT_CHECK(it != extra.tensors.end() && it->second.dtype() == DType::kF32 &&
                     static_cast<size_t>(it->second.numel()) == n,
                 Status::kInvalidArgument, "data parallel: the checkpoint has no '", name, "' of ", n, " floats");
    return it->second;
  };
  const int64_t pos = ints("parallel.co2.round_pos"), tau = ints("parallel.co2.round_tau"),
                overlap = ints("parallel.co2.merge_overlap"), have_timing = ints("parallel.co2.have_timing"),
                travels = ints("parallel.co2.travel_count");
  COHORT_CHECK(travels >= 0 && travels <= static_cast<int64_t>(kTravelHistory), Status::kInvalidArgument,
               "data parallel: the checkpoint's co2 travel history holds ", travels, " times (at most ",
               kTravelHistory, ")");
  COHORT_CHECK(pos >= 0 && pos < tau && overlap >= 1 && overlap <= tau && tau >= plan_.tau &&
                   (plan_.overlap_auto || (tau == plan_.tau && overlap == plan_.overlap)) &&
                   (!plan_.overlap_auto || overlap * plan_.outer_fragments <= tau),
               Status::kInvalidArgument, "data parallel: the checkpoint's co2 round (step ", pos, " of ", tau,
               ", merge after ", overlap, ") does not fit this plan (tau ", plan_.tau, ", overlap ",
               plan_.overlap_auto ? std::string("auto") : std::to_string(plan_.overlap), ")");
  const Tensor& timing = tensor("parallel.co2.timing", 3 + kTravelHistory);
  return [this, &timing, pos, tau, overlap, have_timing, travels] {
    const float* t = timing.data<float>();
    timing_.clear();
    if (have_timing) timing_.assign(t, t + 2);
    merged_comm_seconds_ = t[2];
    travel_history_.assign(t + 3, t + 3 + travels);
    round_pos_ = pos;
    round_tau_ = tau;
    merge_overlap_ = overlap;
    place_fragments(tau);  // as update_round_shape left them
  };
}

void DataParallel::save_state(checkpoint::CheckpointExtra& extra) {
  // ZeRO 3: the checkpoint written next reads the whole parameters (every rank saves).
  if (plan_.zero_stage >= 3) materialize_parameters(trainer_->mutable_parameters(), true);
  if (shard_optimizer_) save_shard_state(extra);  // ZeRO: the trainer's optimizer has none
  if (outer_sharded()) return save_outer_shard(extra);
  if (plan_.mode == SyncMode::kSync) {  // DDP keeps no state beyond the trainer's but top-k's residuals
    if (plan_.grad_keep < 1) save_topk_state(extra);
    return;
  }
  // Shard groups: the outer state below is this rank's shard's (outer_numel_ floats).
  if (grouped()) extra.ints["parallel.shard_group"] = plan_.shard_group;
  bool have_result = false;  // any fragment's
  for (Fragment& fr : fragments_) {
    if (fr.work) {
      // The reduction in flight is waited for and saved as its result: resuming applies it at
      // the same step (localsgd: round end; co2: merge) as an uninterrupted run would.
      Clock::time_point start = Clock::now();
      fr.work->wait();
      stats_.wait_seconds += seconds(Clock::now() - start);
      stats_.comm_seconds += seconds(Clock::now() - fr.launched);
      note_outer(seconds(Clock::now() - fr.launched), seconds(Clock::now() - start));
      fr.work.reset();
      fr.have_result = true;
    }
    have_result = have_result || fr.have_result;
  }
  for (Fragment& fr : fragments_)  // saved as the average it is
    if (fr.quant && fr.have_result && !fr.decoded) decode_average(fr);
  auto vec = [&](const auto& v) {  // a vector or a CommBuffer
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kF32);
    if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
    return t;
  };
  std::vector<float>& m = outer_.momentum();
  if (m.size() != outer_numel_) m.assign(outer_numel_, 0.0f);
  if (round_start_.size() != outer_numel_) round_start_.assign(outer_numel_, 0.0f);
  // inflight_ holds outer_numel_ floats outside ZeRO 1: the fragments' arrived averages, zeros elsewhere.
  std::vector<float> reduced(outer_numel_, 0.0f);
  for (const Fragment& fr : fragments_)
    if (fr.have_result) std::memcpy(reduced.data() + fr.begin, inflight_.data() + fr.begin, fr.count * sizeof(float));
  // Shard groups keep this rank's shard as it is (a load needs the same groups); otherwise each
  // model-sized vector is written per parameter in the whole model's layout, so that the file
  // resumes under another tensor grid or pipeline (save_outer_vector).
  auto put = [&](const char* key, const std::vector<float>& v) {
    if (grouped()) {
      extra.tensors[key] = vec(v);
    } else {
      save_outer_vector(extra, key, v);
    }
  };
  put("parallel.anchor", anchor_);
  put("parallel.round_start", round_start_);  // co2: the guess, while a merge is pending
  if (plan_.mode == SyncMode::kCo2) save_co2_state(extra);
  put("parallel.outer_momentum", m);
  put("parallel.reduced", reduced);
  if (!residual_.empty()) {
    put("parallel.co2.residual", residual_);
    extra.ints["parallel.co2.has_residual"] = 1;
  }
  if (!grouped()) {
    extra.ints["parallel.whole_layout"] = 1;
    extra.ints["parallel.replica"] = comm_->rank();
    extra.ints["parallel.replicas"] = comm_->size();
  }
  extra.ints["parallel.have_reduced"] = have_result ? 1 : 0;
  // Streaming synchronisation: which fragments hold an average, so a resumed run merges each at
  // its own step (their positions follow from the step counts).
  extra.ints["parallel.fragments"] = static_cast<int64_t>(fragments_.size());
  if (fragments_.size() > 1)
    for (size_t f = 0; f < fragments_.size(); ++f)
      extra.ints[str_cat("parallel.fragment_reduced.", f)] = fragments_[f].have_result ? 1 : 0;
  extra.ints["parallel.inner_steps"] = inner_steps_;
  extra.ints["parallel.rounds"] = stats_.rounds;
  extra.ints["parallel.mode"] = static_cast<int64_t>(plan_.mode);
}

void DataParallel::load_state(const checkpoint::CheckpointExtra& extra) {
  if (shard_optimizer_ && !grouped()) {  // both verified before either changes
    const std::function<void()> apply = load_shard_state(extra);
    if (plan_.mode == SyncMode::kSync) load_topk_state(extra);
    return apply();
  }
  if (outer_sharded()) return load_outer_shard(extra);
  // Shard groups: the inner optimizer's shard and the outer state of this rank's shard, both
  // verified before either changes.
  std::function<void()> load_shard;
  if (grouped()) {
    auto group = extra.ints.find("parallel.shard_group");
    COHORT_CHECK(group != extra.ints.end() && group->second == plan_.shard_group, Status::kInvalidArgument,
                 "data parallel: the checkpoint holds the outer state of ",
                 group == extra.ints.end() ? std::string("no shard group (shard_group 1)")
                                           : str_cat("shard groups of ", group->second, " ranks"),
                 "; the plan's shard_group is ", plan_.shard_group);
    load_shard = load_shard_state(extra);
  } else {
    COHORT_CHECK(!extra.ints.count("parallel.shard_group"), Status::kInvalidArgument, "data parallel: the "
                 "checkpoint holds the outer state of shard groups of ", extra.ints.at("parallel.shard_group"),
                 " ranks; the plan's shard_group is 1");
  }
  COHORT_CHECK(grouped() || !extra.ints.count("parallel.zero.world"), Status::kInvalidArgument,
               "data parallel: the checkpoint holds a ZeRO optimizer shard; load it with a ZeRO stage 1-3 "
               "plan, world and rank");
  if (plan_.mode == SyncMode::kSync) return load_topk_state(extra);
  COHORT_CHECK(!any_in_flight(), Status::kInvalidState, "data parallel: cannot load while a reduction is in flight");
  auto ints = [&](const char* name) { return saved_int(extra, name); };
  // Written per parameter in the whole model's layout (save_state), or by an earlier build as
  // this rank's flat vector (shard groups still are).
  const bool whole = extra.ints.count("parallel.whole_layout") && ints("parallel.whole_layout") == 1;
  COHORT_CHECK(!whole || !grouped(), Status::kInvalidArgument, "data parallel: the checkpoint holds the outer state "
               "of the whole model; the plan's shard groups (shard_group ", plan_.shard_group, ") need one saved "
               "under the same groups");
  if (whole) check_outer_layout(extra);
  auto get = [&](const char* name) -> std::vector<float> {
    if (whole) return load_outer_vector(extra, name);
    auto it = extra.tensors.find(name);
    COHORT_CHECK(it != extra.tensors.end(), Status::kInvalidArgument, "data parallel: the checkpoint has no '", name,
                 "' (saved without outer state?)");
    COHORT_CHECK(it->second.dtype() == DType::kF32 && static_cast<size_t>(it->second.numel()) == outer_numel_,
                 Status::kInvalidArgument, "data parallel: '", name, "' has ", it->second.numel(), " elements, ",
                 grouped() ? "this rank's shard has " : "the model has ", outer_numel_);
    const float* f = it->second.data<float>();
    return std::vector<float>(f, f + outer_numel_);
  };
  COHORT_CHECK(ints("parallel.mode") == static_cast<int64_t>(plan_.mode), Status::kInvalidArgument,
               "data parallel: the checkpoint was saved in mode ", ints("parallel.mode"), ", the plan is ",
               mode_name(plan_.mode));
  // Written before streaming synchronisation: one fragment.
  const int64_t fragments = extra.ints.count("parallel.fragments") ? ints("parallel.fragments") : 1;
  COHORT_CHECK(fragments == static_cast<int64_t>(fragments_.size()), Status::kInvalidArgument,
               "data parallel: the checkpoint's outer state is cut into ", fragments, " fragment(s), the plan's "
               "outer_fragments = ", fragments_.size());
  std::function<void()> load_co2 = plan_.mode == SyncMode::kCo2 ? load_co2_state(extra) : nullptr;
  std::vector<float> a = get("parallel.anchor"), m = get("parallel.outer_momentum"), r = get("parallel.reduced"),
                     rs = get("parallel.round_start");
  // Low-bit messages' error feedback: what they have not carried yet. A checkpoint saved with fp32
  // messages (or before error feedback) has none: they start from zero. One saved with low-bit
  // messages, loaded under fp32 ones, leaves its residual out (at most half a level a value).
  const bool has_residual = extra.ints.count("parallel.co2.has_residual") && ints("parallel.co2.has_residual") == 1;
  std::vector<float> residual;
  if (!residual_.empty())
    residual = has_residual ? get("parallel.co2.residual") : std::vector<float>(outer_numel_, 0.0f);
  int64_t have = ints("parallel.have_reduced"), steps = ints("parallel.inner_steps"), rounds = ints("parallel.rounds");
  // Everything verified: now change state.
  anchor_ = std::move(a);
  round_start_ = std::move(rs);
  if (load_co2) load_co2();
  outer_.momentum() = std::move(m);
  if (!residual_.empty()) residual_ = std::move(residual);
  std::memcpy(inflight_.data(), r.data(), outer_numel_ * sizeof(float));  // sized at attach
  if (load_shard) load_shard();
  const Clock::time_point now = Clock::now();
  for (size_t f = 0; f < fragments_.size(); ++f) {
    Fragment& fr = fragments_[f];
    if (fragments_.size() == 1) {
      fr.have_result = have != 0;
    } else {
      fr.have_result = ints(str_cat("parallel.fragment_reduced.", f).c_str()) != 0;
    }
    fr.merge_pending = plan_.mode == SyncMode::kCo2 && fr.have_result;  // co2 saves a pending merge's average
    fr.launched = fr.done_at = now;  // its travel time is not this run's to measure
  }
  for (Fragment& fr : fragments_) fr.decoded = true;
  inner_steps_ = steps;
  stats_.rounds = rounds;
}

void DataParallel::save_outer_vector(checkpoint::CheckpointExtra& extra, const std::string& key,
                                     const std::vector<float>& flat) const {
  COHORT_CHECK(flat.size() == outer_numel_, Status::kInternal, "data parallel: '", key, "' holds ", flat.size(),
               " floats, the outer state ", outer_numel_);
  const std::vector<Tensor>& params = trainer_->parameters();
  const std::vector<size_t>& at = outer_at_;  // parameter i's elements in the outer state
  // Every rank of the replica walks the whole model alike: whole_model_tensor gathers a block
  // over the tensor axes and broadcasts a parameter from the pipeline stage holding it.
  const Graph& model = trainer_->model_graph();
  for (ValueId p : model.parameters()) {
    const std::string& name = model.value(p).name;
    const int64_t i = trainer_->local_parameter(name);
    Tensor local;
    if (i >= 0) {
      local = Tensor::empty(params[static_cast<size_t>(i)].shape(), DType::kF32);
      std::memcpy(local.raw(), flat.data() + at[static_cast<size_t>(i)], local.nbytes());
    }
    extra.tensors[key + "/" + name] = trainer_->whole_model_tensor(name, local);
  }
}

std::vector<float> DataParallel::load_outer_vector(const checkpoint::CheckpointExtra& extra,
                                                   const std::string& key) const {
  const std::vector<Tensor>& params = trainer_->parameters();
  const std::vector<size_t>& at = outer_at_;
  std::vector<float> flat(outer_numel_);
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string name = key + "/" + trainer_->parameter_names()[i];
    auto it = extra.tensors.find(name);
    COHORT_CHECK(it != extra.tensors.end(), Status::kInvalidArgument, "data parallel: the checkpoint has no '", name,
                 "' (saved without outer state, or for another model?)");
    const Shape whole = trainer_->whole_shape(i);
    COHORT_CHECK(it->second.dtype() == DType::kF32 && it->second.shape() == whole, Status::kInvalidArgument,
                 "data parallel: '", name, "' is ", dtype_name(it->second.dtype()), " ", shape_str(it->second.shape()),
                 ", the parameter's whole shape f32 ", shape_str(whole));
    const Tensor block = trainer_->block_of(i, it->second);  // this rank's block under the tensor grid
    std::memcpy(flat.data() + at[i], block.raw(), params[i].numel() * sizeof(float));
  }
  return flat;
}

void DataParallel::check_outer_layout(const checkpoint::CheckpointExtra& extra) const {
  // Each replica trains its own copy between outer syncs: a rank continues its own replica's,
  // among as many replicas as were saved. The tensor grid and pipeline may differ.
  const int64_t replicas = saved_int(extra, "parallel.replicas"), replica = saved_int(extra, "parallel.replica");
  COHORT_CHECK(replicas == comm_->size(), Status::kInvalidArgument, "data parallel: the checkpoint holds the outer "
               "state of one of ", replicas, " data-parallel replicas; the plan has ", comm_->size(),
               " (the model's ranks may change between a save and a resume, the replicas may not)");
  COHORT_CHECK(replica == comm_->rank(), Status::kInvalidArgument, "data parallel: the checkpoint holds replica ",
               replica, "'s outer state and parameters; this rank trains replica ", comm_->rank(), " of ",
               comm_->size(), ": load a file saved by a rank of replica ", comm_->rank());
  // Streaming synchronisation: which fragments hold an average (parallel.fragment_reduced.f) is
  // layout-free too: the fragments are cut by the whole model's parameters (build_fragments), and
  // a fragment's flag is the same on every rank of its replica (set at its round end where it is
  // empty, its average waited for at the save where not).
}

int64_t DataParallel::saved_int(const checkpoint::CheckpointExtra& extra, const std::string& name, const char* hint) {
  auto it = extra.ints.find(name);
  COHORT_CHECK(it != extra.ints.end(), Status::kInvalidArgument, "data parallel: the checkpoint has no '", name, "'",
               hint);
  return it->second;
}

ParallelStats DataParallel::stats() const {
  ParallelStats s = stats_;
  s.tau = plan_.mode == SyncMode::kCo2 ? round_tau_ : plan_.tau;
  s.overlap = plan_.mode == SyncMode::kCo2 ? merge_overlap_ : 0;
  s.outer_fragments = static_cast<int64_t>(fragments_.size());
  for (const Fragment& fr : fragments_)  // what one outer collective carries from this rank
    s.outer_sync_bytes = std::max(s.outer_sync_bytes, static_cast<int64_t>(fr.count * sizeof(float)));
  if (plan_.outer_bits < 32) {  // the largest low-bit message
    s.outer_sync_bytes = 0;
    for (const Fragment& fr : fragments_)
      s.outer_sync_bytes = std::max(s.outer_sync_bytes, static_cast<int64_t>(fr.packed.size()));
  }
  if (outer_sharded()) {  // a fragment padded to a multiple of the world
    s.outer_sync_bytes = 0;
    for (const Fragment& fr : fragments_)
      s.outer_sync_bytes = std::max(s.outer_sync_bytes,
                                    static_cast<int64_t>(fr.block * static_cast<size_t>(comm_->size()) * sizeof(float)));
  }
  s.hidden_fraction = s.comm_seconds > 0 ? std::clamp(1.0 - s.wait_seconds / s.comm_seconds, 0.0, 1.0) : 1.0;
  s.outer_hidden_fraction =
      s.outer_seconds > 0 ? std::clamp(1.0 - s.outer_wait_seconds / s.outer_seconds, 0.0, 1.0) : 1.0;
  s.shard_group = plan_.shard_group;
  fill_memory_stats(s);
  return s;
}

bool DataParallel::any_over_model(bool local) {
  if (!replica_spans_ranks()) return local;
  float flag = local ? 1.0f : 0.0f;
  return sum_over_model(&flag, 1) != 0.0f;
}

double DataParallel::model_sum_of_squares(const float* flat) {
  if (!replica_spans_ranks()) return kernels::cpu::sum_of_squares(flat, static_cast<int64_t>(outer_numel_));
  double local = 0;
  for (const auto& [offset, count] : norm_ranges_)
    local += kernels::cpu::sum_of_squares(flat + offset, static_cast<int64_t>(count));
  float sum = static_cast<float>(local);
  return sum_over_model(&sum, 1);
}

}  // namespace cohort::parallel
