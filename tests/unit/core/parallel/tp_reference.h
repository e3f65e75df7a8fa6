// Test support for tensor parallelism: small GPT and MLP models, deterministic batches, the
// single-process reference trained on the whole global batch, and the comparison of a rank's
// parameter blocks with the blocks of the reference's whole parameters.
//
// The tolerance. A tensor-parallel step computes the same sums as one rank in another order — a
// row-parallel product of K in-features is T partial sums of K/T terms added by the all-reduce,
// the input gradient of a column-parallel layer likewise — so each result differs from the single
// rank's by rounding alone: about sqrt(K) u sum|terms| for a sum of K terms when the rounding
// errors are independent, K u sum|terms| at worst (u = 2^-24, fp32's unit roundoff; Higham,
// Accuracy and Stability of Numerical Algorithms, eq. 3.5 and section 2.8).
// - The loss at step s: a relative K_max u (K_max, the longest sum of the step) for the forward's
//   rounding, plus as much again per step for the parameters' drift: K_max u (1 + s).
// - The parameters: how far rounding-sized differences carry through S AdamW steps depends on
//   the model (AdamW divides by each element's own gradient scale, so an element whose gradient
//   sum cancels moves by its rounding error at full weight). So the single rank measures it on
//   itself, as a control: the reference trained again from parameters moved by one unit in the
//   last place each (signs from a hash) — a difference of about u in every input of every sum,
//   where reordering makes about sqrt(K) u. The bound is K_max times the control's largest
//   parameter difference: reordering's worst case, not its typical sqrt(K_max). The typical bound
//   held on AVX2 hosts, but on an AVX-512 Xeon (oneDNN's other kernels) the 2x2 grid's attention
//   projection weight ended 1.97e-5 from the reference against sqrt(K_max) x control = 1.17e-5
//   (control 1.46e-6, K_max 64): the rounding errors of the reordered sums are not independent
//   there. A wrong shard or a missing collective is off by 1e-3 and more. Both are printed;
//   README lists them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/exec/trainer.h"
#include "core/graph/shard.h"
#include "core/models/gpt.h"
#include "core/models/mlp.h"
#include "core/parallel/data_parallel.h"

namespace cohort::test {

constexpr double kUnitRoundoff = 1.0 / (1 << 24);

// The models: widths divisible by 4 (heads too), so every grid up to 4 ranks fits.
inline models::GptConfig tp_gpt_config(int64_t batch) {
  models::GptConfig c;
  c.batch = batch;
  c.context = 8;
  c.vocab = 32;
  c.layers = 2;
  c.width = 16;
  c.heads = 4;
  return c;
}

inline models::MlpConfig tp_mlp_config(int64_t batch) {
  models::MlpConfig c;
  c.batch = batch;
  c.in_features = 12;
  c.hidden = {16};
  c.classes = 4;
  c.activation = "gelu";
  return c;
}

inline Graph tp_model(const std::string& model, int64_t batch) {
  return model == "gpt" ? models::build_gpt(tp_gpt_config(batch)) : models::build_mlp(tp_mlp_config(batch));
}

// The longest sum of the model's step (K_max of the tolerance): a product's inner extent (4C,
// the MLP's features) or a weight gradient's rows (batch x tokens).
inline double tp_longest_sum(const std::string& model, int64_t batch) {
  if (model == "gpt") {
    const models::GptConfig c = tp_gpt_config(batch);
    return static_cast<double>(std::max(4 * c.width, c.batch * c.context));
  }
  const models::MlpConfig c = tp_mlp_config(batch);
  return static_cast<double>(std::max({c.in_features, c.hidden[0], c.batch}));
}

inline optim::OptimizerConfig tp_optimizer() {
  optim::OptimizerConfig o;
  o.kind = optim::OptimizerKind::kAdamW;
  o.lr = 3e-3;
  o.weight_decay = 0.01;
  o.clip_norm = 0.5;  // binds in the first steps: the norm summed over the tensor ranks matters
  return o;
}


// Rows [first, first + count) of step `step`'s global batch for `model`.
inline std::map<std::string, Tensor> tp_batch(const std::string& model, int64_t step, int64_t first, int64_t count) {
  auto mix = [](int64_t a) { return static_cast<uint64_t>(a) * 0x9E3779B97F4A7C15ull >> 33; };
  if (model == "gpt") {
    const models::GptConfig c = tp_gpt_config(count);
    Tensor tokens = Tensor::empty({count, c.context}, DType::kI32);
    Tensor targets = Tensor::empty({count, c.context}, DType::kI32);
    for (int64_t i = 0; i < count; ++i)
      for (int64_t t = 0; t < c.context; ++t) {
        const int64_t g = (first + i) * 131 + step * 7919 + t;
        tokens.data<int32_t>()[i * c.context + t] = static_cast<int32_t>(mix(g) % static_cast<uint64_t>(c.vocab));
        targets.data<int32_t>()[i * c.context + t] = static_cast<int32_t>(mix(g + 1) % static_cast<uint64_t>(c.vocab));
      }
    return {{"tokens", tokens}, {"targets", targets}};
  }
  const models::MlpConfig c = tp_mlp_config(count);
  Tensor x = Tensor::empty({count, c.in_features}, DType::kF32);
  Tensor y = Tensor::empty({count}, DType::kI32);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t g = (first + i) * 7919 + step * 104729;
    for (int64_t f = 0; f < c.in_features; ++f)
      x.data<float>()[i * c.in_features + f] = std::sin(0.37f * static_cast<float>(g % 1009) + 1.3f * static_cast<float>(f));
    y.data<int32_t>()[i] = static_cast<int32_t>(mix(g) % static_cast<uint64_t>(c.classes));
  }
  return {{"x", x}, {"y", y}};
}

// The control of the tolerance: every parameter moved by one unit in the last place, up or down
// (the sign from a hash of its name and index) — a rounding-sized difference in every sum the
// step computes, as reordering makes.
inline void perturb_by_one_ulp(Trainer& t) {
  for (size_t i = 0; i < t.parameters().size(); ++i) {
    Tensor& p = t.mutable_parameters()[i];
    for (int64_t k = 0; k < p.numel(); ++k) {
      float& v = p.data<float>()[k];
      const uint64_t h = ((i * 1000003 + static_cast<uint64_t>(k)) * 0x9E3779B97F4A7C15ull) >> 63;
      v = std::nextafter(v, h ? INFINITY : -INFINITY);
    }
  }
}

// One process on the global batch: the losses of every step, the final whole parameters, and
// the control of the tolerance (perturb_by_one_ulp).
struct TpReference {
  std::vector<float> losses;
  std::map<std::string, Tensor> parameters;
  double control_diff = 0;            // the control's largest parameter difference
  double longest_sum = 0;             // K_max
  double loss_relative_per_step = 0;  // K_max u
  double parameter_bound() const { return longest_sum * control_diff; }
};

inline TpReference tp_reference(const std::string& model, int64_t global_batch, int64_t steps, uint64_t seed) {
  TpReference r;
  r.longest_sum = tp_longest_sum(model, global_batch);
  r.loss_relative_per_step = r.longest_sum * kUnitRoundoff;
  std::vector<float> plain;
  for (bool noise : {false, true}) {
    TrainerOptions o;
    o.seed = seed;
    o.num_threads = 1;
    Trainer t(tp_model(model, global_batch), tp_optimizer(), o);
    if (noise) perturb_by_one_ulp(t);
    for (int64_t s = 0; s < steps; ++s) {
      const float loss = t.step(tp_batch(model, s, 0, global_batch));
      if (!noise) r.losses.push_back(loss);
    }
    for (size_t i = 0; i < t.parameters().size(); ++i) {
      const Tensor& p = t.parameters()[i];
      if (!noise) {
        r.parameters[t.parameter_names()[i]] = p;
        continue;
      }
      const Tensor& q = r.parameters.at(t.parameter_names()[i]);
      for (int64_t k = 0; k < p.numel(); ++k)
        r.control_diff = std::max(r.control_diff, static_cast<double>(std::fabs(p.data<float>()[k] - q.data<float>()[k])));
    }
  }
  return r;
}

// The largest |difference| between a rank's parameters (blocks or whole) and the reference's
// corresponding blocks, and where; blocks counts the sharded parameters.
struct TpDiff {
  double max_abs = 0;
  std::string worst;
  int blocks = 0;
};

// Every whole parameter of the model by name — under pipeline stages the other stages' too. A
// collective over the model axes (whole_model_tensor): every rank of a replica calls it alike.
inline std::map<std::string, Tensor> tp_whole_model(const Trainer& t) {
  std::map<std::string, Tensor> out;
  for (ValueId p : t.model_graph().parameters()) {
    const std::string& name = t.model_graph().value(p).name;
    const int64_t i = t.local_parameter(name);
    out[name] = t.whole_model_tensor(name, i >= 0 ? t.parameters()[static_cast<size_t>(i)] : Tensor());
  }
  return out;
}

// ZeRO 3 over the data axis, read right after the steps, before anything gathers the
// parameters: between steps a rank holds only its shard — 1/data of the parameters it holds
// under the layout (its blocks, its stage's), plus at most data - 1 padding elements a bucket —
// and, where the model has many buckets (the GPT's), never all of them whole at once within a
// step (one bucket in use, one prefetched; the MLP's two layers are each in use or prefetched
// throughout, so `many_buckets` is false for it). The figures and the verdict, for every test
// of ZeRO 3 under model axes to check and print alike.
struct Zero3Memory {
  int64_t between = 0;  // parameter bytes held between steps
  int64_t local = 0;    // this rank's parameters whole (its blocks / its stage's)
  int64_t bound = 0;    // local / data + the buckets' padding
  int64_t peak = 0;     // the step's peak of whole parameter bytes
  int64_t buckets = 0, gathers = 0, prefetched = 0;
  bool ok = false;

  std::string describe() const {
    char line[256];
    std::snprintf(line, sizeof line,
                  "ZeRO 3 parameters %lld B between steps (this rank's %lld B, bound %lld), step peak of whole "
                  "ones %lld B, %lld buckets, %lld gathers (%lld prefetched) -> %s",
                  static_cast<long long>(between), static_cast<long long>(local), static_cast<long long>(bound),
                  static_cast<long long>(peak), static_cast<long long>(buckets), static_cast<long long>(gathers),
                  static_cast<long long>(prefetched), ok ? "ok" : "MISMATCH");
    return line;
  }
};

inline Zero3Memory zero3_memory(Trainer& t, int data, bool many_buckets) {
  const parallel::ParallelStats s = dynamic_cast<parallel::DataParallel&>(*t.step_hook()).stats();
  Zero3Memory m;
  for (const Tensor& p : t.parameters()) m.local += p.numel() * static_cast<int64_t>(sizeof(float));
  m.between = s.parameter_bytes;
  m.bound = m.local / data + s.buckets * (data - 1) * static_cast<int64_t>(sizeof(float));
  m.peak = s.peak_parameter_bytes;
  m.buckets = s.buckets;
  m.gathers = s.parameter_gathers;
  m.prefetched = s.parameter_gathers_prefetched;
  m.ok = m.gathers > 0 && m.between >= m.local / data && m.between <= m.bound && m.peak > 0 &&
         (!many_buckets || m.peak < m.local);
  return m;
}

inline TpDiff tp_parameter_diff(const Trainer& rank, const TpReference& ref) {
  TpDiff d;
  const Graph& g = rank.forward_graph();
  for (size_t i = 0; i < rank.parameters().size(); ++i) {
    const std::string& name = rank.parameter_names()[i];
    const Value& v = g.value(g.find(name));
    const Tensor want = v.shard.empty() ? ref.parameters.at(name) : take_shard(ref.parameters.at(name), v.shard);
    const Tensor& got = rank.parameters()[i];
    d.blocks += !v.shard.empty();
    double worst = got.shape() == want.shape() ? 0.0 : INFINITY;
    for (int64_t k = 0; k < got.numel() && std::isfinite(worst); ++k)
      worst = std::max(worst, static_cast<double>(std::fabs(got.data<float>()[k] - want.data<float>()[k])));
    if (!(worst <= d.max_abs)) {
      d.max_abs = worst;
      d.worst = name;
    }
  }
  return d;
}

}  // namespace cohort::test
