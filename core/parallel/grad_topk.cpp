// GradTopk: one gradient bucket's error-feedback top-k exchange (the rule: grad_topk.h), and
// DataParallel's use of it in the sync mode: the averages into the gradients, the residuals into
// and out of checkpoints. (zero.cpp's launch_reduction encodes and launches the all-gather.)
#include "core/parallel/grad_topk.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/base/error.h"
#include "core/base/log.h"
#include "core/device/device.h"
#include "core/ops/pipe_topk.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/flat.h"
#include "kernels/cpu/optim.h"

namespace cohort::parallel {

GradTopk::GradTopk(int64_t n, double keep)
    : n_(n), k_(topk_count(n, keep)), message_bytes_(topk_message_bytes(n, keep, DType::kF32)),
      residual_(static_cast<size_t>(n), 0.0f), sent_(static_cast<size_t>(k_)), idx_(static_cast<size_t>(k_)),
      values_(static_cast<size_t>(k_)) {}

void GradTopk::encode(float* a, void* message) {
  for (int64_t i = 0; i < n_; ++i) a[i] += residual_[static_cast<size_t>(i)];
  topk_write_message(a, sizeof(float), n_, k_, sent_.data(), message);
}

void GradTopk::average(const void* messages, int world, float* out, const std::string& what) {
  std::fill(out, out + n_, 0.0f);
  const size_t index_bytes = topk_index_bytes(n_, k_);
  for (int r = 0; r < world; ++r) {
    const char* m = static_cast<const char*>(messages) + static_cast<size_t>(r) * message_bytes_;
    topk_read_indices(m, n_, k_, idx_.data(), str_cat(what, ": the message of rank ", r));
    std::memcpy(values_.data(), m + index_bytes, static_cast<size_t>(k_) * sizeof(float));
    for (int64_t j = 0; j < k_; ++j) out[idx_[static_cast<size_t>(j)]] += values_[static_cast<size_t>(j)];
  }
  const float inv = 1.0f / static_cast<float>(world);
  for (int64_t i = 0; i < n_; ++i) out[i] *= inv;
}

void GradTopk::settle(const float* a, bool applied) {
  if (!applied) return;
  std::memcpy(residual_.data(), a, static_cast<size_t>(n_) * sizeof(float));
  for (int32_t i : sent_) residual_[static_cast<size_t>(i)] = 0.0f;
}

void DataParallel::average_topk(std::vector<Tensor>& grads) {
  // Every rank holds every rank's messages: the averages, their finiteness and so the residuals'
  // fate are the same on every rank.
  double sum_of_squares = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    if (topk_average_.size() < b.padded) topk_average_.resize(b.padded);  // ZeRO pads buckets after build_buckets
    float* avg = topk_average_.data();
    b.topk->average(b.messages.data(), comm_->size(), avg, str_cat("data parallel: top-k gradient bucket ", i));
    sum_of_squares += kernels::cpu::sum_of_squares(avg, static_cast<int64_t>(b.numel));
    if (shard_optimizer_) {  // ZeRO 1: this rank's block of the average is what its shard steps with
      std::fill(avg + b.numel, avg + b.padded, 0.0f);  // the bucket's padding
      take_gradient_shard(b, avg);
      continue;
    }
    for (size_t j = 0; j < b.params.size(); ++j) {
      Tensor& g = grads[b.params[j]];
      device_copy(g.raw(), g.device(), avg + b.offsets[j], Device::kCpu, g.nbytes());
    }
  }
  // Not finite: every optimizer skips the step (as DDP's), so no message was applied.
  const bool applied = std::isfinite(sum_of_squares);
  for (Bucket& b : buckets_) b.topk->settle(b.buf.data(), applied);
}

// The residuals, one flat vector in parameter order (so a different bucket_bytes still loads it),
// with the world they belong to: each rank's file holds its own.
void DataParallel::copy_residuals(float* into_flat, const float* from_flat) {
  const std::vector<Tensor>& params = trainer_->parameters();
  const std::vector<size_t> at = flat_offsets(params);
  for (Bucket& b : buckets_)
    for (size_t j = 0; j < b.params.size(); ++j) {
      float* in_bucket = b.topk->residual().data() + b.offsets[j];
      const size_t bytes = static_cast<size_t>(params[b.params[j]].numel()) * sizeof(float);
      if (into_flat) std::memcpy(into_flat + at[b.params[j]], in_bucket, bytes);
      else std::memcpy(in_bucket, from_flat + at[b.params[j]], bytes);
    }
}

void DataParallel::save_topk_state(checkpoint::CheckpointExtra& extra) {
  Tensor flat = Tensor::zeros({static_cast<int64_t>(numel_)}, DType::kF32);
  copy_residuals(flat.data<float>(), nullptr);
  extra.tensors["parallel.topk.residual"] = flat;
  extra.ints["parallel.topk.world"] = comm_->size();
  extra.ints["parallel.topk.rank"] = comm_->rank();
}

void DataParallel::load_topk_state(const checkpoint::CheckpointExtra& extra) {
  auto it = extra.tensors.find("parallel.topk.residual");
  if (plan_.grad_keep >= 1) {
    if (it != extra.tensors.end())
      log(LogLevel::kWarn, "data parallel: the checkpoint holds a top-k residual (gradient not sent yet); this "
                           "plan sends whole gradients (grad_keep 1), so it is dropped");
    return;
  }
  auto reset = [&](const std::string& why) {
    for (Bucket& b : buckets_) std::fill(b.topk->residual().begin(), b.topk->residual().end(), 0.0f);
    log(LogLevel::kWarn, str_cat("data parallel: top-k residuals start from zero: ", why));
  };
  if (it == extra.tensors.end()) return reset("the checkpoint was saved without top-k compression");
  COHORT_CHECK(it->second.dtype() == DType::kF32 && static_cast<size_t>(it->second.numel()) == numel_,
               Status::kInvalidArgument, "data parallel: 'parallel.topk.residual' has ", it->second.numel(),
               " elements, the model has ", numel_);
  const int64_t world = saved_int(extra, "parallel.topk.world"), rank = saved_int(extra, "parallel.topk.rank");
  if (world != comm_->size() || rank != comm_->rank())
    return reset(str_cat("the checkpoint's residual is rank ", rank, " of ", world, "'s, this is rank ",
                         comm_->rank(), " of ", comm_->size(), " (each rank's residual is its own unsent gradient)"));
  copy_residuals(nullptr, it->second.data<float>());
}

}  // namespace cohort::parallel
