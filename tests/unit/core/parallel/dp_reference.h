// Test support for data parallelism: a small MLP on synthetic data, and a single-process
// reference that simulates R ranks (R model copies, each on its shard of the global batch) and
// applies the outer rule written out again here, independently of core/parallel/outer.cpp —
// including what happens to NaN: a rank's step skipped for it (kNonFinite) leaves that rank's
// model as it was, a rank whose round pseudo-gradient is not finite contributes zeros (but
// under ZeRO 1 local SGD, which averages parameters), and a non-finite average skips the step.
// Streaming synchronisation (plan.outer_fragments = F): fragment f (parallel::outer_fragment_cuts,
// checked on its own in parallel_test.cpp) runs that rule on its elements alone, its rounds
// ending at step counts n = f tau / F (mod tau); the clip's norm stays the whole momentum's.
// co2 under overlap auto (DpSimulation::shape, the round shape the engine chose after each step):
// fragment 0's round lasts the tau in force at its end, fragment f >= 1 ends floor(f tau / F)
// steps into it, and each average is merged `overlap` steps after its launch — the overlap in
// force when it was launched.
// Shard groups (plan.shard_group = S): a replica of S ranks training synchronously under ZeRO is
// one simulated rank on their S shards of the batch concatenated (`rows` = S x kShard samples),
// and the outer rule between replicas is the same elementwise rule — so the reference simulates
// D / S ranks of `rows` samples each; a replica whose parameters are not finite drops its round.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/device/device.h"
#include "core/exec/trainer.h"
#include "core/models/mlp.h"
#include "core/ops/pipe_topk.h"
#include "core/parallel/plan.h"

namespace cohort::test {

constexpr int64_t kShard = 8;      // samples per rank per step
constexpr int64_t kFeatures = 12;
constexpr int64_t kClasses = 4;

// hidden 16 by default; wider models give buffers large enough for registered memory.
inline Graph dp_model(int64_t batch, int64_t hidden = 16) {
  models::MlpConfig c;
  c.batch = batch;
  c.in_features = kFeatures;
  c.hidden = {hidden};
  c.classes = kClasses;
  c.activation = "tanh";
  return models::build_mlp(c);
}

inline optim::OptimizerConfig dp_inner_optimizer() {
  optim::OptimizerConfig o;
  o.kind = optim::OptimizerKind::kSgd;
  o.lr = 0.05;
  o.momentum = 0.9;
  return o;
}

// AdamW, for what applies to it alone (inner noise scaling).
inline optim::OptimizerConfig dp_adamw_optimizer() {
  optim::OptimizerConfig o;
  o.kind = optim::OptimizerKind::kAdamW;
  o.lr = 0.01;
  return o;
}

// Samples [first, first + count) of step `step`'s global batch: deterministic, learnable.
inline std::map<std::string, Tensor> dp_batch(int64_t step, int64_t first, int64_t count) {
  Tensor x = Tensor::empty({count, kFeatures}, DType::kF32);
  Tensor y = Tensor::empty({count}, DType::kI32);
  for (int64_t i = 0; i < count; ++i) {
    int64_t g = (first + i) * 7919 + step * 104729;
    float sum = 0;
    for (int64_t f = 0; f < kFeatures; ++f) {
      float v = std::sin(0.37f * static_cast<float>(g % 1009) + 1.3f * static_cast<float>(f));
      x.data<float>()[i * kFeatures + f] = v;
      sum += v * static_cast<float>(f % 3);
    }
    y.data<int32_t>()[i] = static_cast<int32_t>(static_cast<int64_t>(std::fabs(sum) * 3.0f) % kClasses);
  }
  return {{"x", x}, {"y", y}};
}

inline std::vector<float> dp_flat(const Trainer& t) {  // host copies, whichever the trainer's device
  std::vector<float> v;
  for (const Tensor& p : t.parameters()) {
    const Tensor h = to_device(p, Device::kCpu);
    const float* d = h.data<float>();
    v.insert(v.end(), d, d + h.numel());
  }
  return v;
}

inline void dp_set_flat(Trainer& t, const std::vector<float>& v) {
  size_t off = 0;
  for (Tensor& p : t.mutable_parameters()) {
    std::memcpy(p.raw(), v.data() + off, p.nbytes());
    off += static_cast<size_t>(p.numel());
  }
}

// R simulated ranks running localsgd or co2 exactly as specified in the plan.
class DpSimulation {
 public:
  // Simulated rank r trains on samples [r rows, (r + 1) rows) of each step's global batch.
  // plan.inner_noise_scaling: each simulated rank's optimizer normalises for `ranks` of them.
  DpSimulation(int ranks, const parallel::PlanConfig& plan, uint64_t seed, int64_t hidden = 16, int64_t rows = kShard,
               const optim::OptimizerConfig& inner = dp_inner_optimizer())
      : plan_(plan), rows_(rows) {
    TrainerOptions o;
    o.seed = seed;
    o.num_threads = 1;
    for (int r = 0; r < ranks; ++r) {
      trainers_.push_back(std::make_unique<Trainer>(dp_model(rows, hidden), inner, o));
      if (plan.inner_noise_scaling) trainers_.back()->optimizer().set_noise_ranks(ranks);
    }
    anchor_ = dp_flat(*trainers_[0]);
    momentum_.assign(anchor_.size(), 0.0f);
    x_.assign(anchor_.begin(), anchor_.end());
    m_.assign(x_.size(), 0.0);
    mean_.assign(x_.size(), 0.0);
    guess_.assign(static_cast<size_t>(ranks), x_);
    residual_.assign(static_cast<size_t>(ranks), std::vector<float>(x_.size(), 0.0f));
    std::vector<int64_t> numel;
    for (const Tensor& p : trainers_[0]->parameters()) numel.push_back(p.numel());
    std::vector<size_t> cuts = parallel::outer_fragment_cuts(numel, plan.outer_fragments);
    lo_.assign(1, 0);
    for (size_t f = 1; f < cuts.size(); ++f) {
      size_t n = lo_.back();
      for (size_t i = cuts[f - 1]; i < cuts[f]; ++i) n += static_cast<size_t>(numel[i]);
      lo_.push_back(n);
    }
    pending_.assign(static_cast<size_t>(plan.outer_fragments), false);
    launched_.assign(pending_.size(), 0);
    merge_after_.assign(pending_.size(), 0);
  }

  // Called with each rank's batch before its step (tests that put NaN or Inf into one rank's
  // batch), and with each rank's trainer after the step and its round end or merge (tests that
  // make a rank's parameters NaN).
  std::function<void(int64_t step, int rank, std::map<std::string, Tensor>& batch)> edit_batch;
  std::function<void(int64_t step, int rank, Trainer& trainer)> after_step;
  // co2: the round shape in force after each step (the engine's stats under overlap auto);
  // unset, the plan's tau and overlap.
  std::function<parallel::RoundShape(int64_t step)> shape;
  std::vector<std::vector<int64_t>> skipped;  // per rank: the steps its trainer skipped for NaN
  // Shard groups with outer_bits 8 / 4: a simulated rank is a replica, whose message is its
  // positions' (each rank's of its shard). Per position, where each element of its outer state
  // sits in the flat model (-1: padding, sent as 0) and where each fragment begins in it
  // (DataParallel::outer_layout, the library's layout taken as given): each position's blocks
  // follow its own order. Empty: one message in the flat model's order.
  struct PositionLayout {
    std::vector<int64_t> flat;
    std::vector<size_t> fragment_begin;
  };
  std::vector<PositionLayout> positions;

  void step(int64_t step) {
    int ranks = static_cast<int>(trainers_.size());
    skipped.resize(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      std::map<std::string, Tensor> batch = dp_batch(step, r * rows_, rows_);
      if (edit_batch) edit_batch(step, r, batch);
      try {
        trainers_[r]->step(batch);
      } catch (const Error& e) {
        if (e.status() != Status::kNonFinite) throw;
        skipped[static_cast<size_t>(r)].push_back(step);
      }
    }
    // The engine's round end and merge run inside the trainer's step, before its caller sees it.
    if (plan_.mode == parallel::SyncMode::kCo2) co2_after(step + 1);
    else localsgd_after(step + 1);
    if (after_step)
      for (int r = 0; r < ranks; ++r) after_step(step, r, *trainers_[r]);
  }

  // Whether fragment f's round ends after `steps` inner steps.
  bool round_ends(size_t f, int64_t steps) const {
    const int64_t fragments = static_cast<int64_t>(pending_.size());
    return (steps - static_cast<int64_t>(f) * plan_.tau / fragments) % plan_.tau == 0;
  }

  void localsgd_after(int64_t steps) {
    for (size_t f = 0; f < pending_.size(); ++f)
      if (round_ends(f, steps)) localsgd_round(lo_[f], lo_[f + 1]);
  }

  // Elements [lo, hi): the whole model, or one fragment.
  void localsgd_round(size_t lo, size_t hi) {
    const int ranks = static_cast<int>(trainers_.size());
    // The round's averaged pseudo-gradient: anchor minus the mean of the ranks' parameters,
    // applied at once; every rank restarts from the new anchor.
    std::vector<float> d(anchor_.size(), 0.0f);
    for (auto& t : trainers_) {
      std::vector<float> x = dp_flat(*t), mine(hi - lo);
      for (size_t i = lo; i < hi; ++i) mine[i - lo] = anchor_[i] - x[i];
      // A rank's non-finite pseudo-gradient counts as no progress; under ZeRO 1 the ranks
      // average parameters instead, so it reaches the average (and skips the step, below).
      // Shard groups average pseudo-gradients again (ZeRO runs inside the replica).
      if (!all_finite(mine) && (plan_.zero_stage == 0 || plan_.shard_group > 1))
        std::fill(mine.begin(), mine.end(), 0.0f);
      for (size_t i = lo; i < hi; ++i) d[i] += mine[i - lo] / static_cast<float>(ranks);
    }
    if (all_finite(d)) outer(d, 1.0, lo, hi);  // a non-finite average: no outer step on any rank
    for (auto& t : trainers_) {
      std::vector<float> x = dp_flat(*t);
      std::copy(anchor_.begin() + static_cast<std::ptrdiff_t>(lo), anchor_.begin() + static_cast<std::ptrdiff_t>(hi),
                x.begin() + static_cast<std::ptrdiff_t>(lo));
      dp_set_flat(*t, x);
    }
    if (plan_.average_inner_state) average_inner_state(lo, hi);
  }

  // plan.average_inner_state: the moment tensors (SGD's momentum here) of the parameters in
  // elements [lo, hi) set to the ranks' mean, in rank order; a rank whose tensor is not finite
  // left out of it.
  void average_inner_state(size_t lo, size_t hi) {
    size_t at = 0;
    for (size_t i = 0; i < trainers_[0]->parameters().size(); ++i) {
      const size_t n = static_cast<size_t>(trainers_[0]->parameters()[i].numel());
      const bool in = at >= lo && at + n <= hi;
      at += n;
      if (!in) continue;
      const size_t states = trainers_[0]->optimizer().state(i).size();
      for (size_t k = 0; k < states; ++k) {
        std::vector<float> sum(n, 0.0f);
        float count = 0;
        for (auto& t : trainers_) {
          const float* v = t->optimizer().state(i)[k].second.data<float>();
          if (!all_finite(std::vector<float>(v, v + n))) continue;
          for (size_t e = 0; e < n; ++e) sum[e] += v[e];
          ++count;
        }
        for (auto& t : trainers_) {
          float* v = t->optimizer().state(i)[k].second.data<float>();
          for (size_t e = 0; e < n; ++e) v[e] = count > 0 ? sum[e] * (1.0f / count) : 0.0f;
        }
      }
    }
  }

  // co2 written from its definition (core/parallel/data_parallel.cpp derives it), in double.
  // At a round end every rank sends anchor - parameters (zeros when not finite) and moves to its
  // guess, the anchor the outer step would reach were the average its own (the momentum left as
  // it is); `overlap` steps later the anchor takes DiLoCo's outer step with the average (none
  // when the average is not finite), and each rank lands on it plus what it moved since its
  // guess (times the penalty's factor when that is on; nothing when its parameters are not finite).
  void co2_after(int64_t steps) {
    const size_t fragments = pending_.size();
    if (shape) {
      const parallel::RoundShape now = shape(steps - 1);
      for (size_t f = 0; f < fragments; ++f)
        if (pending_[f] && steps - launched_[f] == merge_after_[f]) co2_merge(f, lo_[f], lo_[f + 1]);
      const int64_t pos = steps - round_begin_;
      for (size_t f = 0; f < fragments; ++f) {
        const bool ends = f == 0 ? pos == now.tau : pos == static_cast<int64_t>(f) * now.tau / static_cast<int64_t>(fragments);
        if (!ends) continue;
        co2_round_end(f, lo_[f], lo_[f + 1]);
        launched_[f] = steps;
        merge_after_[f] = now.overlap;
        if (f == 0) round_begin_ = steps;
      }
      return;
    }
    for (size_t f = 0; f < fragments; ++f)
      if (pending_[f] && round_ends(f, steps - plan_.overlap)) co2_merge(f, lo_[f], lo_[f + 1]);
    for (size_t f = 0; f < fragments; ++f)
      if (round_ends(f, steps)) co2_round_end(f, lo_[f], lo_[f + 1]);
  }

  // Fragment f's merge, on its elements [lo, hi) (all of them with one fragment).
  void co2_merge(size_t f, size_t lo, size_t hi) {
    const auto& c = plan_.outer;
    const size_t ranks = trainers_.size(), n = x_.size();
    bool finite = true;
    for (size_t i = lo; i < hi; ++i) finite = finite && std::isfinite(mean_[i]);
    if (finite) {
      for (size_t i = lo; i < hi; ++i) m_[i] = c.momentum * m_[i] + mean_[i];
      double norm = 0;  // the whole momentum's: the other fragments' parts as their last merge left them
      for (size_t i = 0; i < n; ++i) norm += m_[i] * m_[i];
      norm = std::sqrt(norm);
      const double keep = c.clip_threshold > 0 && norm > c.clip_threshold ? c.clip_threshold / norm : 1.0;
      for (size_t i = lo; i < hi; ++i) {
        m_[i] *= keep;
        x_[i] -= c.lr * (c.nesterov ? mean_[i] + c.momentum * m_[i] : m_[i]);
      }
    }
    for (size_t r = 0; r < ranks; ++r) {
      std::vector<float> y = dp_flat(*trainers_[r]);
      bool y_finite = true;
      for (size_t i = lo; i < hi; ++i) y_finite = y_finite && std::isfinite(y[i]);
      if (!y_finite)  // no progress carried over
        for (size_t i = lo; i < hi; ++i) y[i] = static_cast<float>(guess_[r][i]);
      double gap = 0, moved = 0;
      for (size_t i = lo; i < hi; ++i) {
        gap += (x_[i] - guess_[r][i]) * (x_[i] - guess_[r][i]);
        moved += (y[i] - guess_[r][i]) * (y[i] - guess_[r][i]);
      }
      const double s =
          c.staleness_penalty ? 1.0 / (1.0 + c.penalty_constant * std::sqrt(gap) / (std::sqrt(moved) + 1e-12)) : 1.0;
      for (size_t i = lo; i < hi; ++i) y[i] = static_cast<float>(x_[i] + s * (y[i] - guess_[r][i]));
      dp_set_flat(*trainers_[r], y);
    }
    pending_[f] = false;
  }

  void co2_round_end(size_t f, size_t lo, size_t hi) {
    const auto& c = plan_.outer;
    const size_t ranks = trainers_.size();
    const double w = static_cast<double>(ranks);
    for (size_t i = lo; i < hi; ++i) mean_[i] = 0.0;
    std::vector<float> low_bit_sum(hi - lo, 0.0f);  // outer_bits 8 or 4: the decoded messages, in rank order
    for (size_t r = 0; r < ranks; ++r) {
      std::vector<float> y = dp_flat(*trainers_[r]);
      std::vector<float> sent(hi - lo);
      for (size_t i = lo; i < hi; ++i) sent[i - lo] = static_cast<float>(x_[i] - y[i]);
      if (!all_finite(sent)) {  // the rank's round is dropped: it sends zeros
        std::fill(sent.begin(), sent.end(), 0.0f);
        for (size_t i = lo; i < hi; ++i) y[i] = static_cast<float>(x_[i]);
      }
      if (plan_.outer_bits < 32 && positions.empty())
        add_low_bit(sent, plan_.outer_bits, residual_[r].data() + lo, low_bit_sum);
      for (const PositionLayout& p : positions) {  // shard groups: each position's message
        const size_t from = p.fragment_begin.at(f),
                     to = f + 1 < p.fragment_begin.size() ? p.fragment_begin[f + 1] : p.flat.size();
        std::vector<float> e(to - from, 0.0f), res(to - from, 0.0f), sum(to - from, 0.0f);
        for (size_t k = from; k < to; ++k) {
          const int64_t i = p.flat[k];
          if (i < 0) continue;  // padding: 0 sent, nothing kept
          COHORT_CHECK(static_cast<size_t>(i) >= lo && static_cast<size_t>(i) < hi, Status::kInternal,
                       "position layout: element ", i, " outside fragment ", f);
          e[k - from] = sent[static_cast<size_t>(i) - lo];
          res[k - from] = residual_[r][static_cast<size_t>(i)];
        }
        add_low_bit(e, plan_.outer_bits, res.data(), sum);
        for (size_t k = from; k < to; ++k) {
          const int64_t i = p.flat[k];
          if (i < 0) continue;
          low_bit_sum[static_cast<size_t>(i) - lo] += sum[k - from];
          residual_[r][static_cast<size_t>(i)] = res[k - from];
        }
      }
      for (size_t i = lo; i < hi; ++i) {
        const double e = x_[i] - y[i];
        mean_[i] += e / w;
        const double m = c.momentum * m_[i] + e;  // the momentum, were the average e (not kept)
        guess_[r][i] = x_[i] - c.lr * (c.nesterov ? e + c.momentum * m : m);
        y[i] = static_cast<float>(guess_[r][i]);
      }
      dp_set_flat(*trainers_[r], y);
    }
    if (plan_.outer_bits < 32)
      for (size_t i = lo; i < hi; ++i) mean_[i] = low_bit_sum[i - lo] * (1.0f / static_cast<float>(ranks));
    pending_[f] = true;
  }

  // A rank's message with outer_bits 8 or 4, written out from its definition (quantize.h,
  // data_parallel.h's residual_): the values sent are e plus what the rank's earlier messages
  // left out (res, which then keeps what this one leaves out); per block of 256 of them the
  // largest magnitude is the top level, each value the nearest level (ties to even), decoded as
  // level x scale and added, in fp32.
  static void add_low_bit(const std::vector<float>& e, int bits, float* res, std::vector<float>& sum) {
    const float top = bits == 8 ? 127.0f : 7.0f;
    std::vector<float> x(e.size());
    for (size_t i = 0; i < e.size(); ++i) x[i] = res[i] + e[i];
    for (size_t lo = 0; lo < x.size(); lo += 256) {
      const size_t hi = std::min(x.size(), lo + 256);
      float amax = 0;
      for (size_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float scale = amax / top, inv = scale > 0 ? 1.0f / scale : 0.0f;
      for (size_t i = lo; i < hi; ++i) {
        const float d = std::clamp(std::nearbyint(x[i] * inv), -top, top) * scale;
        sum[i] += d;
        res[i] = std::isfinite(x[i] - d) ? x[i] - d : 0.0f;
      }
    }
  }

  Trainer& rank(int r) { return *trainers_[static_cast<size_t>(r)]; }
  const std::vector<float>& anchor() const { return anchor_; }

 private:
  static bool all_finite(const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
  }
  // The outer step on elements [lo, hi) of the anchor; the clip's norm is the whole momentum's.
  void outer(const std::vector<float>& d, double s, size_t lo, size_t hi) {
    const auto& c = plan_.outer;
    for (size_t i = lo; i < hi; ++i)
      momentum_[i] = static_cast<float>(c.momentum) * momentum_[i] + static_cast<float>(s) * d[i];
    double norm = 0;
    for (float m : momentum_) norm += m * static_cast<double>(m);
    norm = std::sqrt(norm);
    if (c.clip_threshold > 0 && norm > c.clip_threshold)
      for (size_t i = lo; i < hi; ++i) momentum_[i] *= static_cast<float>(c.clip_threshold / norm);
    for (size_t i = lo; i < hi; ++i) {
      float u = c.nesterov ? static_cast<float>(s) * d[i] + static_cast<float>(c.momentum) * momentum_[i] : momentum_[i];
      anchor_[i] -= static_cast<float>(c.lr) * u;
    }
  }

  parallel::PlanConfig plan_;
  int64_t rows_ = kShard;
  std::vector<std::unique_ptr<Trainer>> trainers_;
  std::vector<float> anchor_, momentum_;  // localsgd
  // co2: the anchor, the outer momentum, the average in flight, and each rank's guess.
  std::vector<double> x_, m_, mean_;
  std::vector<std::vector<double>> guess_;
  std::vector<std::vector<float>> residual_;  // co2 with outer_bits 8 / 4: each rank's error feedback
  // Per fragment: where its elements begin (lo_[F] = all of them), and (co2) whether its average
  // awaits its merge.
  std::vector<size_t> lo_;
  std::vector<bool> pending_;
  // With `shape`: where fragment 0's round began, and per fragment its launch and the steps to
  // its merge (step counts).
  int64_t round_begin_ = 0;
  std::vector<int64_t> launched_, merge_after_;
};

// Synchronous DDP with top-k gradient compression and error feedback (plan.grad_keep < 1),
// written out again from core/parallel/grad_topk.h's rule: each rank's gradient at the shared
// parameters (a probe trainer whose update its hook takes over and drops; a rank whose loss is
// not finite sets element 0 of its first bucket to NaN, as DataParallel marks it), DataParallel's
// buckets (parameters in reverse order, a new bucket once one holds bucket_bytes), per bucket
// a = g + e and the k = topk_count(n, keep) largest |a| sent (NaN above every number, ties to the
// lower index), the ranks' sent values summed in rank order and scaled by 1/W, then e <- a with
// the sent entries zeroed when that average is finite (else e unchanged: the step is skipped),
// and one trainer stepped with the average.
class TopkDdpSimulation {
 public:
  TopkDdpSimulation(int ranks, const parallel::PlanConfig& plan, int64_t hidden = 16) : ranks_(ranks), plan_(plan) {
    TrainerOptions o;
    o.seed = 1;
    o.num_threads = 1;
    main_ = std::make_unique<Trainer>(dp_model(kShard, hidden), dp_inner_optimizer(), o);
    probe_ = std::make_unique<Trainer>(dp_model(kShard, hidden), dp_inner_optimizer(), o);
    capture_ = std::make_shared<Hook>();
    apply_ = std::make_shared<Hook>();
    apply_->overwrite = true;
    probe_->set_step_hook(capture_);
    main_->set_step_hook(apply_);
    // DataParallel::build_buckets' layout: [begin, end) ranges of the flat parameters.
    const std::vector<Tensor>& params = main_->parameters();
    std::vector<size_t> at(params.size() + 1, 0);
    for (size_t i = 0; i < params.size(); ++i) at[i + 1] = at[i] + static_cast<size_t>(params[i].numel());
    size_t bytes = plan.bucket_bytes;  // the current bucket's: full at the start
    for (size_t k = params.size(); k-- > 0;) {
      if (bytes >= plan.bucket_bytes) {
        buckets_.push_back({});
        bytes = 0;
      }
      buckets_.back().push_back(k);
      bytes += static_cast<size_t>(params[k].numel()) * sizeof(float);
    }
    offsets_ = at;
    residual_.assign(static_cast<size_t>(ranks), std::vector<float>(at.back(), 0.0f));
  }

  // One step on the global batch's rank shards (edit may poison rank r's); false when skipped.
  bool step(int64_t s, const std::function<void(int64_t, int, std::map<std::string, Tensor>&)>& edit) {
    const std::vector<float> shared = dp_flat(*main_);
    const size_t n = shared.size();
    std::vector<std::vector<float>> a(static_cast<size_t>(ranks_));
    for (int r = 0; r < ranks_; ++r) {
      dp_set_flat(*probe_, shared);
      std::map<std::string, Tensor> batch = dp_batch(s, r * kShard, kShard);
      if (edit) edit(s, r, batch);
      try {
        probe_->step(batch);
      } catch (const Error& e) {
        if (e.status() != Status::kNonFinite) throw;
      }
      a[static_cast<size_t>(r)] = capture_->grads;
      if (!capture_->loss_finite) a[static_cast<size_t>(r)][offsets_[buckets_[0][0]]] = std::nanf("");
      for (size_t i = 0; i < n; ++i) a[static_cast<size_t>(r)][i] += residual_[static_cast<size_t>(r)][i];
    }
    // Per bucket: each rank's sent indices, and the average of what was sent.
    std::vector<float> average(n, 0.0f);
    std::vector<std::vector<size_t>> sent(static_cast<size_t>(ranks_));
    for (const std::vector<size_t>& bucket : buckets_) {
      std::vector<size_t> elements;  // the bucket's flat indices, in its own order (reverse parameters)
      for (size_t k : bucket)
        for (size_t i = offsets_[k]; i < offsets_[k + 1]; ++i) elements.push_back(i);
      const int64_t count = topk_count(static_cast<int64_t>(elements.size()), plan_.grad_keep);
      for (int r = 0; r < ranks_; ++r) {
        const std::vector<float>& v = a[static_cast<size_t>(r)];
        std::vector<size_t> order(elements.size());
        for (size_t j = 0; j < order.size(); ++j) order[j] = j;
        auto above = [&](size_t x, size_t y) {  // x before y: NaN first, then larger |a|, then lower position
          const float fx = v[elements[x]], fy = v[elements[y]];
          if (std::isnan(fx) != std::isnan(fy)) return std::isnan(fx);
          if (!std::isnan(fx) && std::fabs(fx) != std::fabs(fy)) return std::fabs(fx) > std::fabs(fy);
          return x < y;
        };
        std::sort(order.begin(), order.end(), above);
        order.resize(static_cast<size_t>(count));
        std::sort(order.begin(), order.end());
        for (size_t j : order) {
          average[elements[j]] += v[elements[j]];
          sent[static_cast<size_t>(r)].push_back(elements[j]);
        }
      }
    }
    double sum = 0;
    for (float& x : average) {
      x *= 1.0f / static_cast<float>(ranks_);
      sum += static_cast<double>(x) * x;
    }
    const bool applied = std::isfinite(sum);
    if (applied)
      for (int r = 0; r < ranks_; ++r) {
        residual_[static_cast<size_t>(r)] = a[static_cast<size_t>(r)];
        for (size_t i : sent[static_cast<size_t>(r)]) residual_[static_cast<size_t>(r)][i] = 0.0f;
      }
    apply_->grads = average;
    try {
      main_->step(dp_batch(s, 0, kShard));
    } catch (const Error& e) {
      if (e.status() != Status::kNonFinite) throw;
      return false;
    }
    return applied;
  }

  const Trainer& model() const { return *main_; }

 private:
  // Captures the gradients (flat, parameter order) and drops the update, or (overwrite) replaces
  // the gradients with `grads` and lets the optimizer step.
  struct Hook : StepHook {
    bool overwrite = false, loss_finite = true;
    std::vector<float> grads;
    void on_gradient(size_t, const Tensor&) override {}
    void on_loss(const Tensor& loss) override { loss_finite = std::isfinite(loss.data<float>()[0]); }
    void before_update(std::vector<Tensor>& g) override {
      size_t off = 0;
      if (!overwrite) grads.clear();
      for (Tensor& t : g) {
        if (overwrite) std::memcpy(t.raw(), grads.data() + off, t.nbytes());
        else grads.insert(grads.end(), t.data<float>(), t.data<float>() + t.numel());
        off += static_cast<size_t>(t.numel());
      }
    }
    bool apply_update(std::vector<Tensor>&, std::vector<Tensor>&) override { return !overwrite; }
    // (The probe's update, taken over and dropped, counts as skipped where its loss is not finite.)
    double applied_grad_norm() const override { return loss_finite ? 0.0 : std::nan(""); }
    void after_update(std::vector<Tensor>&, int64_t) override {}
  };
  int ranks_;
  parallel::PlanConfig plan_;
  std::unique_ptr<Trainer> main_, probe_;
  std::shared_ptr<Hook> capture_, apply_;
  std::vector<std::vector<size_t>> buckets_;  // parameter indices, as DataParallel fills them
  std::vector<size_t> offsets_;
  std::vector<std::vector<float>> residual_;
};

inline double dp_max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : 1e30;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace cohort::test
